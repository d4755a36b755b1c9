/** Directory trees -> objects + one manifest. Idempotent; the manifest is written last, after a filesystem sync. */
import { lstatSync, lutimesSync, readdirSync, readlinkSync, type Stats } from "node:fs";
import * as fsp from "node:fs/promises";
import { InvalidInputError } from "../../errors.js";
import type { LayerKey } from "../types.js";
import { NORMALIZED_MTIME_SEC, mapLimit, syncFilesystem, yielder } from "./fsutil.js";
import { lockFile } from "./lock.js";
import { assertLayerKey, isTreeName, type ObjectId, type Store } from "./layout.js";
import {
  MANIFEST_FORMAT,
  writeManifest,
  type JsonValue,
  type LayerManifest,
  type ManifestEntry,
  type TreeManifest,
} from "./manifest.js";
import { displayName, encodeName, joinBytes } from "./names.js";
import { isObjectInode, putLargeFile, putSmallFileSync, SMALL_FILE_BYTES, type PutResult } from "./objects.js";

export interface IngestOptions {
  /** Free-form data kept in the manifest (e.g. the spec). */
  meta?: { [key: string]: JsonValue };
  /** Large files (over 1 MiB) hashed/copied at once (default 4). */
  concurrency?: number;
  /**
   * Files the caller made hard links to objects (`linkObject`), by `<tree>/<path>`: one whose inode is still that
   * object's is recorded without being read, with the mode given (the one the file would have had if the build had
   * written it: an object's own mode is read-only). Anything else under that name is hashed like any file.
   */
  linked?: ReadonlyMap<string, LinkedObject>;
}

/** A file that is a hard link to an object, and the mode to record for it. */
export interface LinkedObject {
  object: ObjectId;
  mode: number;
}

export interface IngestResult {
  key: LayerKey;
  manifest: LayerManifest;
  /** Skipped special files, mtimes that were not normalized: worth showing to the user. */
  warnings: string[];
  files: number;
  logicalBytes: number;
  /** Objects this ingest added to the store, and their bytes: what the layer really cost. */
  newObjects: number;
  newBytes: number;
}

interface PendingFile {
  entry: ManifestEntry & { type: "file" };
  abs: Buffer;
}

/**
 * Store the directory trees of one layer, e.g. `ingestLayer(store, key, { testbed: "/b/testbed", venv: "/b/venv" })`.
 * Objects are shared with every other layer (identical files cost nothing). Sockets, FIFOs and devices are
 * skipped with a warning. Every entry is recorded with the fixed mtime; files whose mtime differs are counted in a
 * warning (their .pyc caches, if any, were compiled against other mtimes — call normalizeMtimes() before compiling).
 */
export async function ingestLayer(
  store: Store,
  key: LayerKey,
  trees: Record<string, string>,
  opts: IngestOptions = {},
): Promise<IngestResult> {
  assertLayerKey(key);
  const names = await checkTrees(key, trees);
  // Shared lock: gc (exclusive) must not delete objects we rely on before our manifest exists.
  const lock = await lockFile(store.lockPath, { shared: true });
  try {
    const linked = { store, ids: opts.linked ?? new Map<string, LinkedObject>(), count: 0 };
    const { manifestTrees, pending, warnings } = await walkTrees(trees, names, linked);
    const added = await storeObjects(store, pending, opts.concurrency ?? 4);
    const manifest: LayerManifest = {
      format: MANIFEST_FORMAT,
      key,
      mtime: { policy: "fixed", epochSec: NORMALIZED_MTIME_SEC },
      trees: manifestTrees,
      ...(opts.meta ? { meta: opts.meta } : {}),
    };
    await syncFilesystem(store.objectsDir);
    await writeManifest(store, manifest);
    return {
      key,
      manifest,
      warnings,
      files: pending.length + linked.count,
      logicalBytes: summarizeFiles(manifestTrees),
      newObjects: added.size,
      newBytes: [...added.values()].reduce((a, b) => a + b, 0),
    };
  } finally {
    await lock.release();
  }
}

/** Tree names, sorted; each must be a valid name and an existing directory. */
async function checkTrees(key: LayerKey, trees: Record<string, string>): Promise<string[]> {
  const names = Object.keys(trees).sort();
  if (names.length === 0) throw new InvalidInputError(`layer ${key}: no trees to ingest`);
  for (const name of names) {
    if (!isTreeName(name)) throw new InvalidInputError(`layer ${key}: invalid tree name ${JSON.stringify(name)}`);
    const st = await fsp.stat(trees[name]!).catch(() => undefined);
    if (!st?.isDirectory())
      throw new InvalidInputError(`layer ${key}: tree ${name}: ${trees[name]} is not a directory`);
  }
  return names;
}

/** Every tree's entries (files still without their object id), the files to store, and the warnings. */
async function walkTrees(
  trees: Record<string, string>,
  names: string[],
  linked: LinkedFiles,
): Promise<{ manifestTrees: Record<string, TreeManifest>; pending: PendingFile[]; warnings: string[] }> {
  const warnings: string[] = [];
  const pending: PendingFile[] = [];
  const unnormalized: string[] = [];
  const manifestTrees: Record<string, TreeManifest> = {};
  for (const name of names) {
    const rootStat = await fsp.stat(trees[name]!);
    const entries: ManifestEntry[] = [];
    await walk(Buffer.from(trees[name]!), Buffer.alloc(0), {
      tree: name,
      entries,
      pending,
      warnings,
      unnormalized,
      inodes: new Map(),
      pause: yielder(),
      linked,
    });
    manifestTrees[name] = { mode: rootStat.mode & 0o7777, entries };
  }
  if (unnormalized.length > 0) {
    warnings.push(
      `${unnormalized.length} file(s) had an mtime other than ${new Date(NORMALIZED_MTIME_SEC * 1000).toISOString()} ` +
        `(e.g. ${unnormalized[0]}); they are recorded with that time — compile .pyc files after normalizeMtimes()`,
    );
  }
  return { manifestTrees, pending, warnings };
}

/** Store each file as an object (small ones inline, large ones `concurrency` at a time); the objects added. */
async function storeObjects(store: Store, pending: PendingFile[], concurrency: number): Promise<Map<string, number>> {
  const added = new Map<string, number>();
  const record = (p: PendingFile, r: PutResult): void => {
    p.entry.object = r.id;
    p.entry.size = r.size;
    if (r.added) added.set(r.id, r.size);
  };
  const pause = yielder();
  for (const p of pending) {
    if (p.entry.size > SMALL_FILE_BYTES) continue;
    record(p, putSmallFileSync(store, p.abs, (p.entry.mode & 0o111) !== 0));
    await pause();
  }
  const large = pending.filter((p) => p.entry.size > SMALL_FILE_BYTES);
  await mapLimit(large, concurrency, async (p) =>
    record(p, await putLargeFile(store, p.abs, (p.entry.mode & 0o111) !== 0)),
  );
  return added;
}

interface WalkState {
  tree: string;
  entries: ManifestEntry[];
  pending: PendingFile[];
  warnings: string[];
  unnormalized: string[];
  /** dev:ino -> first path, to record hard links within the tree once. */
  inodes: Map<string, Buffer>;
  pause: () => Promise<void>;
  linked: LinkedFiles;
}

/** The caller's hard links to objects, and how many of them were taken as they are. */
interface LinkedFiles {
  store: Store;
  ids: ReadonlyMap<string, LinkedObject>;
  count: number;
}

/** The object a file already is (a hard link the caller made), if it still is. */
function linkedObject(s: WalkState, rel: Buffer, st: Stats): LinkedObject | undefined {
  if (s.linked.ids.size === 0) return undefined;
  const known = s.linked.ids.get(`${s.tree}/${rel.toString()}`);
  if (known === undefined || !isObjectInode(s.linked.store, known.object, st)) return undefined;
  s.linked.count++;
  return known;
}

/** Bytes of the files of the trees (hard links within a tree once). */
function summarizeFiles(trees: Record<string, TreeManifest>): number {
  let n = 0;
  for (const t of Object.values(trees)) for (const e of t.entries) if (e.type === "file") n += e.size;
  return n;
}

/** Pre-order walk in byte order of names, so manifests are deterministic. Synchronous calls: see yielder(). */
async function walk(absDir: Buffer, relDir: Buffer, s: WalkState): Promise<void> {
  const names = readdirSync(absDir, { encoding: "buffer" }).sort(Buffer.compare);
  for (const name of names) {
    await s.pause();
    const rel = relDir.length === 0 ? Buffer.from(name) : joinBytes(relDir, name);
    const abs = joinBytes(absDir, name);
    const st = lstatSync(abs);
    const path = encodeName(rel);
    const shown = `${s.tree}/${displayName(rel)}`;
    if (st.isDirectory()) {
      s.entries.push({ path, type: "dir", mode: st.mode & 0o7777 });
      await walk(abs, rel, s);
    } else if (st.isSymbolicLink()) {
      s.entries.push({ path, type: "symlink", target: encodeName(readlinkSync(abs, { encoding: "buffer" })) });
    } else if (st.isFile()) {
      // A .pyc's own mtime never matters (Python checks the source mtime stored inside it), so don't warn on it.
      if (st.mtimeMs !== NORMALIZED_MTIME_SEC * 1000 && !rel.toString("latin1").endsWith(".pyc"))
        s.unnormalized.push(shown);
      const inode = `${st.dev}:${st.ino}`;
      const first = st.nlink > 1 ? s.inodes.get(inode) : undefined;
      if (first) {
        s.entries.push({ path, type: "hardlink", target: encodeName(first) });
        continue;
      }
      if (st.nlink > 1) s.inodes.set(inode, rel);
      const known = linkedObject(s, rel, st);
      const mode = known?.mode ?? st.mode & 0o7777;
      const entry = { path, type: "file" as const, mode, object: known?.object ?? "", size: st.size };
      s.entries.push(entry);
      if (known === undefined) s.pending.push({ entry, abs });
    } else {
      s.warnings.push(`skipped ${specialKind(st)} ${shown}`);
    }
  }
}

function specialKind(st: Stats): string {
  if (st.isSocket()) return "socket";
  if (st.isFIFO()) return "FIFO";
  if (st.isCharacterDevice()) return "character device";
  if (st.isBlockDevice()) return "block device";
  return "special file";
}

/**
 * Set every mtime under `dir` (and of `dir`) to the normalized epoch. Builders call this before compiling .pyc
 * files so that the source mtimes recorded in them match what materialize restores. Returns entries touched.
 */
export async function normalizeMtimes(dir: string): Promise<number> {
  // Synchronous calls in slices (yielder()): thousands of small calls, each far cheaper than a thread-pool trip.
  const pause = yielder();
  let count = 0;
  const visit = async (abs: Buffer): Promise<void> => {
    await pause();
    const st = lstatSync(abs);
    if (st.isDirectory()) {
      for (const name of readdirSync(abs, { encoding: "buffer" })) await visit(joinBytes(abs, name));
    }
    if (st.mtimeMs !== NORMALIZED_MTIME_SEC * 1000) lutimesSync(abs, NORMALIZED_MTIME_SEC, NORMALIZED_MTIME_SEC);
    count++;
  };
  await visit(Buffer.from(dir));
  return count;
}
