/**
 * Chronologically sound testbeds for images: an image's own `/testbed/.git` keeps whatever its maker left (every
 * branch, tag, reflog, stash, pack: the fix is one `git log --all` away), so every sandbox on it gets instead, mounted
 * copy-on-write over `/testbed/.git`, a repository holding HEAD's commit (its id unchanged), its tree and blobs, and
 * nothing else (`image-history-script.ts`). The working tree stays the image's, untracked files included.
 *
 * It is derived once per image root filesystem and version, in a sandbox (`image-history-derive.ts`), checked
 * (`image-history-check.ts`) and stored as a layer (`testbed-git-<version>-<chain id>`, one tree `testbed` holding
 * `.git`) like any other; concurrent asks share one derivation (in process; across processes under a lock), and
 * later ones find the layer. An image without `/testbed/.git` is left as it is; one whose repository cannot be made
 * sound is an `ImageInvalidError` saying why, never its full history instead.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { OverlayMount } from "../sandbox/plan.js";
import { homeLayout } from "../util/home.js";
import type { NodeCache } from "./cache/index.js";
import { checkDerived, sourceTestbed, writeConfig } from "./image-history-check.js";
import { deriveTestbedGit } from "./image-history-derive.js";
import { getImage } from "./images/index.js";
import {
  canChown,
  derivedKey,
  ensureImageDirs,
  hasLayer,
  ingestLayer,
  lockFile,
  normalizeMtimes,
  readManifest,
  ROOTFS_TREE,
  storeIds,
  type ImageRecord,
  type Store,
} from "./store/index.js";
import { TESTBED_PATH, type LayerKey } from "./types.js";

/** Bump when what the derivation makes changes: images get a new layer, never an old one reused. */
export const IMAGE_HISTORY_VERSION = 1;
/** The derived layer's one tree (its `.git` inside, so it is materialized as every testbed's). */
export const HISTORY_TREE = "testbed";

/** The derived layer of an image's root filesystem (`rootfs-<chain id>`). */
export function testbedHistoryKey(rootfs: LayerKey): LayerKey {
  return derivedKey(rootfs, `testbed-git-${IMAGE_HISTORY_VERSION}`);
}

const deriving = new Map<string, Promise<LayerKey | undefined>>();

/**
 * The key of the image's chronological `.git` layer, derived now if the store lacks it; undefined when the image has
 * no `/testbed/.git`. The derivation reads the image's `.git` on the host: from its root filesystem materialized
 * (leased meanwhile), whatever form its sandboxes get it in.
 */
export async function ensureTestbedHistory(
  home: string,
  cache: NodeCache,
  image: ImageRecord,
  what: string,
): Promise<LayerKey | undefined> {
  const key = testbedHistoryKey(image.rootfs);
  if (await hasLayer(cache.store, key)) return key;
  if (!(await mayHaveTestbedGit(cache.store, image.rootfs))) return undefined;
  const id = `${cache.store.root}\0${key}`;
  let p = deriving.get(id);
  if (!p) {
    p = derivedOnce(home, cache, { image, key, what }).finally(() => deriving.delete(id));
    deriving.set(id, p);
  }
  return p;
}

const gitEntries = new Map<string, Promise<boolean>>();

/** Whether the root's manifest has `testbed/.git` (or a `testbed` that is not a directory); read once per layer. */
function mayHaveTestbedGit(store: Store, rootfs: LayerKey): Promise<boolean> {
  const id = `${store.root}\0${rootfs}`;
  let p = gitEntries.get(id);
  if (!p) {
    p = readManifest(store, rootfs).then((m) => {
      const entries = m.trees[ROOTFS_TREE]?.entries ?? [];
      const testbed = entries.find((e) => e.path === "testbed");
      // A linked /testbed is refused by the derivation's checks: it must get there.
      return testbed !== undefined && (testbed.type !== "dir" || entries.some((e) => e.path === "testbed/.git"));
    });
    p.catch(() => gitEntries.delete(id));
    gitEntries.set(id, p);
  }
  return p;
}

interface Job {
  image: ImageRecord;
  key: LayerKey;
  what: string;
}

/** Under the layer's lock: another process may have stored it meanwhile. */
async function derivedOnce(home: string, cache: NodeCache, job: Job): Promise<LayerKey | undefined> {
  const lock = await lockFile(join(ensureImageDirs(cache.store).locks, `${job.key}.lock`), {
    timeoutMs: 60 * 60_000,
  });
  try {
    if (await hasLayer(cache.store, job.key)) return job.key;
    const lease = await cache.acquire(job.image.rootfs, { form: "tree" });
    try {
      const testbed = sourceTestbed(lease.trees[ROOTFS_TREE]!, job.what);
      if (testbed === undefined) return undefined;
      await deriveAndStore(home, cache, { ...job, testbed });
      return job.key;
    } finally {
      await lease.release();
    }
  } finally {
    await lock.release();
  }
}

async function deriveAndStore(home: string, cache: NodeCache, job: Job & { testbed: string }): Promise<void> {
  const started = performance.now();
  const dest = join(homeLayout(home).envs, `image-history-${randomBytes(6).toString("hex")}`);
  mkdirSync(homeLayout(home).envs, { recursive: true });
  try {
    const owner = canChown() ? storeIds(cache.store).base : undefined;
    const report = await deriveTestbedGit({ home, testbed: job.testbed, dest, what: job.what, owner });
    checkDerived(dest, report, job.what);
    writeConfig(dest, report);
    await normalizeMtimes(dest);
    const meta = {
      image: job.image.id,
      rootfs: job.image.rootfs,
      version: IMAGE_HISTORY_VERSION,
      head: report.head,
      branch: report.branch ?? null,
      deriveMs: Math.round(performance.now() - started),
    };
    await ingestLayer(cache.store, job.key, { [HISTORY_TREE]: dest }, { meta });
  } finally {
    rmSync(dest, { recursive: true, force: true });
  }
}

/** What a sandbox on the image mounts for its testbed's history, and the lease to give back with it. */
export interface TestbedHistory {
  key: LayerKey;
  overlay: OverlayMount;
  release: () => Promise<void>;
}

/**
 * The chronological `.git` of the image as an overlay of its sandboxes (after its root: over `/testbed/.git`),
 * leased from the node cache as a materialized tree (its index a private copy, newer than the work tree); undefined
 * when the image has no `/testbed/.git`.
 */
export async function testbedHistory(
  home: string,
  cache: NodeCache,
  image: ImageRecord,
  what: string,
): Promise<TestbedHistory | undefined> {
  const key = await ensureTestbedHistory(home, cache, image, what);
  if (key === undefined) return undefined;
  const lease = await cache.acquire(key, { form: "tree" });
  const lower = join(lease.trees[HISTORY_TREE]!, ".git");
  return { key, overlay: { lower: [lower], target: `${TESTBED_PATH}/.git` }, release: () => lease.release() };
}

/**
 * Where images are made present for rows (prepare, a server's prepare, an evaluation that may pull): the image's
 * history derived now rather than at its first sandbox; its root filesystem is leased only when it must be.
 */
export async function prepareTestbedHistory(home: string, cache: NodeCache, ref: string): Promise<void> {
  await ensureTestbedHistory(home, cache, await getImage(cache.store, ref), ref);
}
