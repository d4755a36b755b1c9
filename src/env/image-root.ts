/**
 * An image's root filesystem as sandbox options: leased from the node cache, mounted as `/` copy-on-write (its files
 * keep the image's owners in the sandbox's id range), with the config's Env, WorkingDir and User. What a
 * sandbox on an image (`workspace.ts`), a spec-built environment on its base image and that environment's build
 * (`build.ts`) all run on.
 */
import type { SandboxOptions } from "../sandbox/sandbox.js";
import type { AcquireOptions, NodeCache } from "./cache/index.js";
import { acquireImageRootfs, imageRuntime } from "./images/index.js";
import { canChown, storeIds, type ImageRecord } from "./store/index.js";

export interface ImageRoot {
  image: ImageRecord;
  /** `rootfs`, `env`, `cwd`, `uid`, `gid`: the caller's options go over them. */
  options: SandboxOptions;
  /** Give the root filesystem's lease back (once the sandboxes on it are gone). */
  release: () => Promise<void>;
}

/**
 * The image `ref` of the cache's store as a sandbox's root, in the cache's form unless `opts.form` says; NotFoundError
 * (saying `images pull`) when absent.
 */
export async function imageRoot(
  cache: NodeCache,
  ref: string,
  opts: Pick<AcquireOptions, "form"> = {},
): Promise<ImageRoot> {
  const { image, root, lease } = await acquireImageRootfs(cache, ref, opts);
  try {
    const run = await imageRuntime(cache.store, image);
    // Materialized, its files belong to the store's range, mapped onto the sandbox's; its image holds the image's own
    // ids, which the sandbox's namespace maps as it maps any layer image's.
    const owner = lease.form === "tree" && canChown() ? storeIds(cache.store).base : undefined;
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
