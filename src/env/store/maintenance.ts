/** Store upkeep: stats (dedup), verify (rehash everything), gc (drop unreferenced objects and scratch). */
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { errMessage, StoreCorruptError, TimeoutError } from "../../errors.js";
import type { LayerKey } from "../types.js";
import { mapLimit, NORMALIZED_MTIME_SEC, removeTree } from "./fsutil.js";
import { isExecutableId, manifestPath, objectIdFor, objectMode, type ObjectId, type Store } from "./layout.js";
import { lockFile } from "./lock.js";
import { listLayers, readManifest, referencedObjects, summarizeManifest, type LayerManifest } from "./manifest.js";
import { scanObjects, sha256File } from "./objects.js";

export interface StoreStats {
  layers: number;
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
  /** Files in objects/ that are not objects. */
  stray: string[];
}

export interface GcResult {
  removedObjects: number;
  freedBytes: number;
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

function referenceIndex(manifests: LayerManifest[]): Map<ObjectId, { size: number; layers: LayerKey[] }> {
  const refs = new Map<ObjectId, { size: number; layers: LayerKey[] }>();
  for (const m of manifests) {
    for (const [id, size] of referencedObjects(m)) {
      const r = refs.get(id);
      if (r) r.layers.push(m.key);
      else refs.set(id, { size, layers: [m.key] });
    }
  }
  return refs;
}

export async function storeStats(store: Store): Promise<StoreStats> {
  const { manifests } = await loadManifests(store);
  const refs = referenceIndex(manifests);
  const { objects } = await scanObjects(store);
  const stats: StoreStats = {
    layers: (await listLayers(store)).length,
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
  const refs = referenceIndex(manifests);
  const { objects, stray } = await scanObjects(store);
  const report: VerifyReport = {
    ok: true,
    objectsChecked: 0,
    bytesChecked: 0,
    corrupt: [],
    missing: [],
    badManifests: bad,
    stray,
  };
  const sizes = new Map(objects.map((o) => [o.id, o.size]));
  await mapLimit(objects, opts.concurrency ?? 4, async (o) => {
    const reason = await checkObject(o.id, o.path);
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
  report.ok = report.corrupt.length === 0 && report.missing.length === 0 && bad.length === 0 && stray.length === 0;
  return report;
}

async function checkObject(id: ObjectId, path: string): Promise<string | undefined> {
  const st = await fsp.lstat(path);
  const { hex } = await sha256File(path);
  if (objectIdFor(hex, isExecutableId(id)) !== id) return `content hash is ${hex}`;
  if ((st.mode & 0o7777) !== objectMode(id))
    return `mode ${(st.mode & 0o7777).toString(8)}, expected ${objectMode(id).toString(8)}`;
  if (Math.floor(st.mtimeMs / 1000) !== NORMALIZED_MTIME_SEC)
    return `mtime ${new Date(st.mtimeMs).toISOString()} is not the normalized epoch`;
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
    if (bad.length > 0) {
      throw new StoreCorruptError(
        `refusing to gc: manifest of layer ${bad[0]!.key} is corrupt (${bad[0]!.error}); ` +
          "remove or re-import that layer first",
      );
    }
    const refs = referenceIndex(manifests);
    const { objects, stray } = await scanObjects(store);
    const result: GcResult = { removedObjects: 0, freedBytes: 0, removedTemp: 0 };
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
    for (const name of await fsp.readdir(store.tmpDir)) {
      await removeTree(join(store.tmpDir, name));
      result.removedTemp++;
    }
    return result;
  } finally {
    await lock.release();
  }
}

/** Forget a layer (its objects stay until gc). */
export async function removeLayer(store: Store, key: LayerKey): Promise<void> {
  await readManifest(store, key).catch((e: unknown) => {
    if (!(e instanceof StoreCorruptError)) throw e;
  });
  await fsp.rm(manifestPath(store, key), { force: true });
}
