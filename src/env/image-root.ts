/**
 * An image's root filesystem as sandbox options: leased from the node cache, mounted as `/` copy-on-write (its files'
 * owners mapped from the store's id range onto the sandbox's), with the config's Env, WorkingDir and User. What a
 * sandbox on an image (`workspace.ts`), a spec-built environment on its base image and that environment's build
 * (`build.ts`) all run on.
 */
import type { SandboxOptions } from "../sandbox/sandbox.js";
import type { NodeCache } from "./cache/index.js";
import { acquireImageRootfs, imageRuntime } from "./images/index.js";
import { canChown, storeIds, type ImageRecord } from "./store/index.js";

export interface ImageRoot {
  image: ImageRecord;
  /** `rootfs`, `env`, `cwd`, `uid`, `gid`: the caller's options go over them. */
  options: SandboxOptions;
  /** Give the root filesystem's lease back (once the sandboxes on it are gone). */
  release: () => Promise<void>;
}

/** The image `ref` of the cache's store as a sandbox's root; NotFoundError (saying `images pull`) when absent. */
export async function imageRoot(cache: NodeCache, ref: string): Promise<ImageRoot> {
  const { image, root, lease } = await acquireImageRootfs(cache, ref);
  try {
    const run = await imageRuntime(cache.store, image);
    const owner = canChown() ? storeIds(cache.store).base : undefined;
    const options: SandboxOptions = {
      rootfs: { path: root, ...(owner === undefined ? {} : { owner }), home: run.home },
      env: run.env,
      cwd: run.cwd,
      uid: run.uid,
      gid: run.gid,
    };
    return { image, options, release: () => lease.release() };
  } catch (e) {
    await lease.release();
    throw e;
  }
}
