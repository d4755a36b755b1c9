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
import {
  checkDerived,
  hasRepositoryAt,
  repositoryCandidates,
  sourceRepository,
  writeConfig,
} from "./image-history-check.js";
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
import { createHash } from "node:crypto";
import { TESTBED_PATH, type LayerKey } from "./types.js";

/** Bump when what the derivation makes changes: images get a new layer, never an old one reused. */
export const IMAGE_HISTORY_VERSION = 1;
/** The derived layer's one tree (its `.git` inside, so it is materialized as every testbed's). */
export const HISTORY_TREE = "testbed";

/**
 * The derived layer of an image's root filesystem (`rootfs-<chain id>`) for its repository at `dir` (`/testbed`,
 * else the image's WorkingDir: the path is part of the key, as two images may share a root and not a WorkingDir).
 */
export function testbedHistoryKey(rootfs: LayerKey, dir = TESTBED_PATH): LayerKey {
  const at = dir === TESTBED_PATH ? "" : `-${createHash("sha256").update(dir).digest("hex").slice(0, 12)}`;
  return derivedKey(rootfs, `testbed-git-${IMAGE_HISTORY_VERSION}${at}`);
}

const deriving = new Map<string, Promise<LayerKey | undefined>>();

/** An image's chronological `.git`: its layer, and the directory of the image it goes over. */
export interface HistoryLayer {
  key: LayerKey;
  /** `/testbed`, or the image's WorkingDir where it keeps its repository instead. */
  dir: string;
}

/** The layer already stored for this image, if any (the same root always picks the same directory). */
async function storedHistory(cache: NodeCache, image: ImageRecord): Promise<HistoryLayer | undefined> {
  for (const dir of repositoryCandidates(image.config.WorkingDir)) {
    const key = testbedHistoryKey(image.rootfs, dir);
    if (await hasLayer(cache.store, key)) return { key, dir };
  }
  return undefined;
}

/**
 * The image's chronological `.git` layer, derived now if the store lacks it; undefined when the image has no
 * repository (`repositoryCandidates`). The derivation reads the image's `.git` on the host: from its root filesystem
 * materialized (leased meanwhile), whatever form its sandboxes get it in.
 */
export async function ensureTestbedHistory(
  home: string,
  cache: NodeCache,
  image: ImageRecord,
  what: string,
): Promise<HistoryLayer | undefined> {
  const stored = await storedHistory(cache, image);
  if (stored) return stored;
  const dir = await repositoryInManifest(cache.store, image);
  if (dir === undefined) return undefined;
  const key = testbedHistoryKey(image.rootfs, dir);
  const id = `${cache.store.root}\0${key}`;
  let p = deriving.get(id);
  if (!p) {
    p = derivedOnce(home, cache, { image, key, dir, what }).finally(() => deriving.delete(id));
    deriving.set(id, p);
  }
  const derived = await p;
  return derived === undefined ? undefined : { key: derived, dir };
}

const repositories = new Map<string, Promise<string | undefined>>();

/**
 * The first candidate directory the root's manifest shows a `.git` in, or a link on the way to (the derivation's
 * checks refuse it: it must get there, not be passed over for a later candidate or none); read once per root.
 */
function repositoryInManifest(store: Store, image: ImageRecord): Promise<string | undefined> {
  const candidates = repositoryCandidates(image.config.WorkingDir);
  const id = `${store.root}\0${image.rootfs}\0${candidates.join("\0")}`;
  let p = repositories.get(id);
  if (!p) {
    p = readManifest(store, image.rootfs).then((m) => {
      const types = new Map<unknown, string>((m.trees[ROOTFS_TREE]?.entries ?? []).map((e) => [e.path, e.type]));
      return candidates.find((dir) => manifestShowsRepository(types, dir));
    });
    p.catch(() => repositories.delete(id));
    repositories.set(id, p);
  }
  return p;
}

function manifestShowsRepository(types: Map<unknown, string>, dir: string): boolean {
  const parts = dir.split("/").filter(Boolean);
  for (let i = 1; i <= parts.length; i++) {
    const type = types.get(parts.slice(0, i).join("/"));
    if (type === "symlink") return true;
    if (type !== "dir") return false;
  }
  return types.has(`${parts.join("/")}/.git`);
}

interface Job {
  image: ImageRecord;
  key: LayerKey;
  /** Where the image keeps its repository, as its manifest shows it. */
  dir: string;
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
      const root = lease.trees[ROOTFS_TREE]!;
      if (!hasRepositoryAt(root, job.dir, job.what)) return undefined;
      await deriveAndStore(home, cache, { ...job, testbed: sourceRepository(root, job.dir, job.what) });
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
 * The chronological `.git` of the image as an overlay of its sandboxes (after its root: over `/testbed/.git`, or
 * the WorkingDir's), leased from the node cache as a materialized tree (its index a private copy, newer than the
 * work tree); undefined when the image has no repository.
 */
export async function testbedHistory(
  home: string,
  cache: NodeCache,
  image: ImageRecord,
  what: string,
): Promise<TestbedHistory | undefined> {
  const layer = await ensureTestbedHistory(home, cache, image, what);
  if (layer === undefined) return undefined;
  const lease = await cache.acquire(layer.key, { form: "tree" });
  const lower = join(lease.trees[HISTORY_TREE]!, ".git");
  return { key: layer.key, overlay: { lower: [lower], target: `${layer.dir}/.git` }, release: () => lease.release() };
}

/**
 * Where images are made present for rows (prepare, a server's prepare, an evaluation that may pull): the image's
 * history derived now rather than at its first sandbox; its root filesystem is leased only when it must be.
 */
export async function prepareTestbedHistory(home: string, cache: NodeCache, ref: string): Promise<void> {
  await ensureTestbedHistory(home, cache, await getImage(cache.store, ref), ref);
}
