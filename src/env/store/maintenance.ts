/**
 * Store upkeep: stats (dedup), verify (rehash everything), gc (drop unreferenced objects and scratch). Images count:
 * the layers (diff records) and blobs an image record names keep their objects; the others go with gc.
 */
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { errMessage, StoreCorruptError, TimeoutError } from "../../errors.js";
import type { LayerKey } from "../types.js";
import { mapLimit, removeTree } from "./fsutil.js";
import { imageDirs } from "./image-layout.js";
import { imageRoots, listImages } from "./images.js";
import { readDiff, type DiffRecord } from "./layer-diff.js";
import { objectHash, objectMode, type ObjectId, type Store } from "./layout.js";
import { staleLayerImages, storedLayerImageProblem } from "./layer-image.js";
import { lockFile } from "./lock.js";
import {
  hasLayer,
  listLayers,
  readManifest,
  referencedObjects,
  summarizeManifest,
  type LayerManifest,
} from "./manifest.js";
import { objectMtime, objectOwner, scanObjects, sha256File } from "./objects.js";

export interface StoreStats {
  layers: number;
  /** Image records, and the unpacked OCI layers they name. */
  images: number;
  imageLayers: number;
  objects: number;
  /** What the layers would take without dedup: sum of file sizes over all manifests. */
  logicalBytes: number;
  /** Object bytes on disk, each object counted once. */
  storedBytes: number;
  /** Objects no manifest references (gc removes them). */
  unreferencedObjects: number;
  unreferencedBytes: number;
  /** logicalBytes / storedBytes (1 for an empty store). */
  dedupRatio: number;
}

export interface VerifyReport {
  ok: boolean;
  objectsChecked: number;
  bytesChecked: number;
  /** Objects whose content, mode or mtime is wrong. */
  corrupt: { id: ObjectId; reason: string }[];
  /** Objects referenced by a manifest but absent (or truncated). */
  missing: { id: ObjectId; layers: LayerKey[] }[];
  /** Manifests that do not parse or validate. */
  badManifests: { key: LayerKey; error: string }[];
  /** Image records whose layers or root filesystem are missing or unreadable. */
  badImages: { id: string; error: string }[];
  /** Layers whose metadata image the store keeps is not the one their manifest gives. */
  badLayerImages: { key: LayerKey; error: string }[];
  /** Files in objects/ that are not objects. */
  stray: string[];
}

export interface GcResult {
  removedObjects: number;
  freedBytes: number;
  /** Unpacked OCI layers and manifest/config blobs no image needs any more, and interrupted downloads. */
  removedImageFiles: number;
  /** Scratch files and dirs left in tmp/ by interrupted writers. */
  removedTemp: number;
}

/** Load every manifest; corrupt ones are returned separately rather than aborting. */
async function loadManifests(
  store: Store,
): Promise<{ manifests: LayerManifest[]; bad: { key: LayerKey; error: string }[] }> {
  const manifests: LayerManifest[] = [];
  const bad: { key: LayerKey; error: string }[] = [];
  for (const key of await listLayers(store)) {
    try {
      manifests.push(await readManifest(store, key));
    } catch (e) {
      bad.push({ key, error: errMessage(e) });
    }
  }
  return { manifests, bad };
}

/** Diff records some image names (readable ones; the others are reported), and the file names of the rest. */
async function loadDiffs(
  store: Store,
): Promise<{ live: DiffRecord[]; bad: { id: string; error: string }[]; dead: string[]; blobs: Set<string> }> {
  const roots = await imageRoots(store);
  const live: DiffRecord[] = [];
  const bad: { id: string; error: string }[] = [];
  for (const diffId of roots.diffIds) {
    try {
      live.push(await readDiff(store, diffId));
    } catch (e) {
      bad.push({ id: diffId, error: errMessage(e) });
    }
  }
  const names = await fsp.readdir(imageDirs(store).diffs).catch(() => [] as string[]);
  const dead = names.filter((n) => !roots.diffIds.has(`sha256:${n.replace(/\.json$/, "")}`));
  return { live, bad, dead, blobs: roots.blobs };
}

function referenceIndex(
  manifests: LayerManifest[],
  diffs: DiffRecord[],
): Map<ObjectId, { size: number; layers: LayerKey[] }> {
  const refs = new Map<ObjectId, { size: number; layers: LayerKey[] }>();
  const add = (id: ObjectId, size: number, owner: string): void => {
    const r = refs.get(id);
    if (r) r.layers.push(owner);
    else refs.set(id, { size, layers: [owner] });
  };
  for (const m of manifests) for (const [id, size] of referencedObjects(m)) add(id, size, m.key);
  for (const d of diffs)
    for (const e of d.entries) if (e.type === "file") add(e.object, e.size, `image layer ${d.diffId}`);
  return refs;
}

export async function storeStats(store: Store): Promise<StoreStats> {
  const { manifests } = await loadManifests(store);
  const diffs = await loadDiffs(store);
  const refs = referenceIndex(manifests, diffs.live);
  const { objects } = await scanObjects(store);
  const stats: StoreStats = {
    layers: (await listLayers(store)).length,
    images: (await listImages(store)).length,
    imageLayers: diffs.live.length,
    objects: objects.length,
    logicalBytes: manifests.reduce((n, m) => n + summarizeManifest(m).logicalBytes, 0),
    storedBytes: objects.reduce((n, o) => n + o.size, 0),
    unreferencedObjects: 0,
    unreferencedBytes: 0,
    dedupRatio: 1,
  };
  for (const o of objects) {
    if (refs.has(o.id)) continue;
    stats.unreferencedObjects++;
    stats.unreferencedBytes += o.size;
  }
  if (stats.storedBytes > 0) stats.dedupRatio = stats.logicalBytes / stats.storedBytes;
  return stats;
}

/** Rehash every object and check every manifest's references. `onProgress` gets (objects done, total). */
export async function verifyStore(
  store: Store,
  opts: { concurrency?: number; onProgress?: (done: number, total: number) => void } = {},
): Promise<VerifyReport> {
  const { manifests, bad } = await loadManifests(store);
  const diffs = await loadDiffs(store);
  const refs = referenceIndex(manifests, diffs.live);
  const { objects, stray } = await scanObjects(store);
  const report: VerifyReport = {
    ok: true,
    objectsChecked: 0,
    bytesChecked: 0,
    corrupt: [],
    missing: [],
    badManifests: bad,
    badImages: [...diffs.bad, ...(await imageProblems(store))],
    badLayerImages: [],
    stray,
  };
  for (const m of manifests) {
    const error = await storedLayerImageProblem(store, m.key);
    if (error) report.badLayerImages.push({ key: m.key, error });
  }
  const sizes = new Map(objects.map((o) => [o.id, o.size]));
  await mapLimit(objects, opts.concurrency ?? 4, async (o) => {
    const reason = await checkObject(store, o.id, o.path);
    if (reason) report.corrupt.push({ id: o.id, reason });
    report.objectsChecked++;
    report.bytesChecked += o.size;
    opts.onProgress?.(report.objectsChecked, objects.length);
  });
  for (const [id, r] of refs) {
    const size = sizes.get(id);
    if (size === undefined) report.missing.push({ id, layers: r.layers });
    else if (size !== r.size) report.corrupt.push({ id, reason: `size ${size}, manifests say ${r.size}` });
  }
  report.corrupt.sort((a, b) => a.id.localeCompare(b.id));
  report.missing.sort((a, b) => a.id.localeCompare(b.id));
  report.ok =
    report.corrupt.length === 0 &&
    report.missing.length === 0 &&
    bad.length === 0 &&
    report.badImages.length === 0 &&
    report.badLayerImages.length === 0 &&
    stray.length === 0;
  return report;
}

/** Image records whose root filesystem layer is gone (their diff records are checked by loadDiffs). */
async function imageProblems(store: Store): Promise<{ id: string; error: string }[]> {
  const out: { id: string; error: string }[] = [];
  for (const { record } of await listImages(store)) {
    if (!(await hasLayer(store, record.rootfs)))
      out.push({ id: record.id, error: `root filesystem layer ${record.rootfs} is missing` });
  }
  return out;
}

async function checkObject(store: Store, id: ObjectId, path: string): Promise<string | undefined> {
  const st = await fsp.lstat(path);
  const { hex } = await sha256File(path);
  if (objectHash(id) !== hex) return `content hash is ${hex}`;
  if ((st.mode & 0o7777) !== objectMode(id))
    return `mode ${(st.mode & 0o7777).toString(8)}, expected ${objectMode(id).toString(8)}`;
  if (Math.floor(st.mtimeMs / 1000) !== objectMtime(id))
    return `mtime ${new Date(st.mtimeMs).toISOString()} is not ${new Date(objectMtime(id) * 1000).toISOString()}`;
  const owner = objectOwner(store, id);
  if (owner && (st.uid !== owner.uid || st.gid !== owner.gid))
    return `owner ${st.uid}:${st.gid}, expected ${owner.uid}:${owner.gid}`;
  return undefined;
}

/**
 * Remove objects no manifest references, stray files in objects/, and everything in tmp/. Holds the store lock
 * exclusively, so no ingest, import or pull is in flight (they hold it shared) and every scratch file is stale.
 * Refuses to run while any manifest is corrupt: its references are unknown, so deleting could destroy a layer.
 */
export async function gcStore(store: Store, opts: { lockTimeoutMs?: number } = {}): Promise<GcResult> {
  let lock: Awaited<ReturnType<typeof lockFile>>;
  try {
    lock = await lockFile(store.lockPath, { timeoutMs: opts.lockTimeoutMs ?? 60_000 });
  } catch (e) {
    if (e instanceof TimeoutError)
      throw new TimeoutError(`store ${store.root} is busy (an ingest, import or pull is running); try gc again later`);
    throw e;
  }
  try {
    const { manifests, bad } = await loadManifests(store);
    const diffs = await loadDiffs(store);
    const unreadable = bad[0] ? `manifest of layer ${bad[0].key}` : diffs.bad[0] ? `layer ${diffs.bad[0].id}` : "";
    if (unreadable) {
      const why = bad[0]?.error ?? diffs.bad[0]!.error;
      throw new StoreCorruptError(`refusing to gc: ${unreadable} is corrupt (${why}); remove or re-import it first`);
    }
    const refs = referenceIndex(manifests, diffs.live);
    const { objects, stray } = await scanObjects(store);
    const result: GcResult = { removedObjects: 0, freedBytes: 0, removedImageFiles: 0, removedTemp: 0 };
    for (const o of objects) {
      if (refs.has(o.id)) continue;
      await fsp.rm(o.path, { force: true });
      result.removedObjects++;
      result.freedBytes += o.size;
    }
    for (const path of stray) {
      const st = await fsp.lstat(path);
      if (st.isDirectory()) continue;
      await fsp.rm(path, { force: true });
      result.freedBytes += st.size;
    }
    result.freedBytes += await gcImageFiles(store, diffs.dead, diffs.blobs, result);
    for (const path of await staleLayerImages(store)) {
      result.freedBytes += (await fsp.lstat(path)).size;
      await fsp.rm(path, { force: true });
      result.removedImageFiles++;
    }
    for (const name of await fsp.readdir(store.tmpDir)) {
      await removeTree(join(store.tmpDir, name));
      result.removedTemp++;
    }
    return result;
  } finally {
    await lock.release();
  }
}

/** Diff records and blobs no image names, and every download (gc holds the lock: none is in flight). */
async function gcImageFiles(store: Store, deadDiffs: string[], liveBlobs: Set<string>, r: GcResult): Promise<number> {
  const dirs = imageDirs(store);
  const blobs = await fsp.readdir(dirs.blobs).catch(() => [] as string[]);
  const downloads = await fsp.readdir(dirs.downloads).catch(() => [] as string[]);
  const victims = [
    ...deadDiffs.map((n) => join(dirs.diffs, n)),
    ...blobs.filter((n) => !liveBlobs.has(`sha256:${n}`)).map((n) => join(dirs.blobs, n)),
    ...downloads.map((n) => join(dirs.downloads, n)),
  ];
  let freed = 0;
  for (const path of victims) {
    freed += (await fsp.lstat(path)).size;
    await fsp.rm(path, { force: true, recursive: true });
    r.removedImageFiles++;
  }
  return freed;
}
