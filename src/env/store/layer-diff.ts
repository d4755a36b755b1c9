/**
 * One OCI layer (an uncompressed tar stream) -> objects + a diff record (images/diffs/<diff id>.json): its entries in
 * archive order, whiteouts and opaque directories included, so that flatten.ts can apply layers in order without
 * reading a file again. The stream is hostile until proven otherwise: names are cleaned or refused, nothing is
 * written but content-addressed objects, and the record (what makes the layer "present") is written last, after the
 * whole stream hashed to the expected diff id.
 */
import { createHash } from "node:crypto";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { DiskFullError, errCode, ImageInvalidError, StoreCorruptError, TarFormatError } from "../../errors.js";
import { readTar, type TarHeader } from "../../util/tar.js";
import { scratchName, syncFiles, writeFileAtomic } from "./fsutil.js";
import { IMAGE_ID_COUNT, NOBODY_ID } from "./ids.js";
import { digestHex, ensureImageDirs, imageDirs } from "./image-layout.js";
import { imageObjectId, objectPath, type ObjectId, type Store } from "./layout.js";
import type { Xattrs } from "./manifest.js";
import { displayName, encodeName, type EncodedName } from "./names.js";
import { hasObject, placeObject, putBufferSync, writeHashed } from "./objects.js";

export type DiffEntry =
  | { path: EncodedName; type: "dir"; mode: number; uid: number; gid: number; xattrs?: Xattrs }
  | { path: EncodedName; type: "file"; mode: number; object: ObjectId; size: number; xattrs?: Xattrs }
  | { path: EncodedName; type: "symlink"; target: EncodedName; uid: number; gid: number }
  /** `target`: a path of this layer or a lower one (cleaned like every path). */
  | { path: EncodedName; type: "hardlink"; target: EncodedName }
  /** `.wh.NAME`: `path` (the NAME) of lower layers is deleted. */
  | { path: EncodedName; type: "whiteout" }
  /** `.wh..wh..opq` in a directory: `path` (the directory; "" for the root) hides everything lower layers put in it. */
  | { path: EncodedName; type: "opaque" }
  /** A device node or FIFO: never created on the host; it replaces what the path held below, like the real one. */
  | { path: EncodedName; type: "special"; kind: "device" | "fifo" };

export interface DiffRecord {
  format: 1;
  diffId: string;
  entries: DiffEntry[];
  /** Regular files and the sum of their sizes (hard links counted once). */
  files: number;
  bytes: number;
  /** What was neutralised (ids clamped, duplicates...), for the user. */
  warnings: string[];
  /**
   * The peer (origin) this record was taken from, when it was not unpacked here: its entries are that peer's word
   * (diff-check.ts says what of them was checked), not proven to be what the diff id's tar holds.
   */
  peer?: string;
}

export interface UnpackBudget {
  /** Uncompressed bytes of the layer's tar stream (default 64 GiB): a decompression bomb stops here. */
  maxBytes?: number;
  /** Entries of the layer (default 1,000,000). */
  maxEntries?: number;
}

export interface UnpackResult {
  record: DiffRecord;
  newObjects: number;
  newBytes: number;
}

const DEFAULT_MAX_BYTES = 64 * 1024 ** 3;
const DEFAULT_MAX_ENTRIES = 1_000_000;
const SMALL = 1 << 20;
const PATH_MAX = 4096;
const NAME_MAX = 255;
const WHITEOUT = ".wh.";
const OPAQUE = ".wh..wh..opq";

export function diffPath(store: Store, diffId: string): string {
  return join(imageDirs(store).diffs, `${digestHex(diffId)}.json`);
}

export async function hasDiff(store: Store, diffId: string): Promise<boolean> {
  return fsp.access(diffPath(store, diffId)).then(
    () => true,
    () => false,
  );
}

export async function readDiff(store: Store, diffId: string): Promise<DiffRecord> {
  let value: DiffRecord;
  try {
    value = JSON.parse(await fsp.readFile(diffPath(store, diffId), "utf8")) as DiffRecord;
  } catch (e) {
    throw new StoreCorruptError(`store ${store.root}: layer ${diffId} is unreadable: ${(e as Error).message}`);
  }
  if (value.format !== 1 || value.diffId !== diffId || !Array.isArray(value.entries))
    throw new StoreCorruptError(`store ${store.root}: layer ${diffId}: malformed record`);
  return value;
}

interface UnpackState {
  store: Store;
  what: string;
  entries: DiffEntry[];
  seen: Set<string>;
  files: number;
  bytes: number;
  clamped: number;
  duplicates: number;
  added: Map<ObjectId, number>;
  maxEntries: number;
}

export interface UnpackOptions extends UnpackBudget {
  what?: string;
  /** Once the content is verified, before its new objects are synced (a refusal here stores nothing). */
  beforeRecord?: () => Promise<void>;
  /**
   * Work of the caller's that needs the verified record, done while its new objects are synced (the disk waited
   * for, not the processor); it must not fail, and the record is written once both are done.
   */
  whileSyncing?: (record: DiffRecord) => Promise<void>;
}

/**
 * Unpack one layer's uncompressed tar stream into the store. `diffId` is what the image's config says the stream
 * hashes to; nothing is recorded unless it does. The caller holds the store lock (shared) and the layer's lock.
 */
export async function unpackLayer(
  store: Store,
  diffId: string,
  tar: AsyncIterable<Buffer>,
  opts: UnpackOptions = {},
): Promise<UnpackResult> {
  digestHex(diffId);
  ensureImageDirs(store);
  const what = opts.what ?? `layer ${diffId}`;
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
  const s: UnpackState = {
    store,
    what,
    entries: [],
    seen: new Set(),
    files: 0,
    bytes: 0,
    clamped: 0,
    duplicates: 0,
    added: new Map(),
    maxEntries: opts.maxEntries ?? DEFAULT_MAX_ENTRIES,
  };
  const hashed = hashedStream(tar, maxBytes, what);
  try {
    await readTar(hashed.stream, async (h, body) => {
      if (h.kind === "file" && hashed.count() + h.size > maxBytes) throw budgetError(what, maxBytes);
      await onEntry(s, h, body);
    });
    for await (const _ of hashed.stream); // a tar's trailing padding is part of what the diff id hashes
  } catch (e) {
    await hashed.close().catch(() => undefined); // a source left midway is stopped (a download closes its file)
    throw unpackError(e, what);
  }
  const got = `sha256:${hashed.digest()}`;
  if (got !== diffId) throw new ImageInvalidError(`${what}: its content hashes to ${got}, not to its diff id`);
  await opts.beforeRecord?.();
  const record: DiffRecord = {
    format: 1,
    diffId,
    entries: s.entries,
    files: s.files,
    bytes: s.bytes,
    warnings: warningsOf(s),
  };
  await writeDiffRecord(store, record, [...s.added.keys()], what, opts.whileSyncing);
  return { record, newObjects: s.added.size, newBytes: [...s.added.values()].reduce((a, b) => a + b, 0) };
}

/** Write a diff record as it is (one checked by `checkDiffRecord`); its objects must be on disk and synced. */
export async function writeDiff(store: Store, record: DiffRecord): Promise<void> {
  ensureImageDirs(store);
  await writeFileAtomic(diffPath(store, record.diffId), JSON.stringify(record), store.tmpDir);
}

async function writeDiffRecord(
  store: Store,
  record: DiffRecord,
  added: ObjectId[],
  what: string,
  whileSyncing?: (record: DiffRecord) => Promise<void>,
): Promise<void> {
  try {
    const syncing = syncFiles(
      added.map((id) => objectPath(store, id)),
      store.objectsDir,
    );
    syncing.catch(() => undefined); // awaited below, after the caller's work
    await whileSyncing?.(record);
    await syncing;
    await writeFileAtomic(diffPath(store, record.diffId), JSON.stringify(record), store.tmpDir);
  } catch (e) {
    throw unpackError(e, what);
  }
}

function warningsOf(s: UnpackState): string[] {
  const w: string[] = [];
  if (s.clamped > 0) w.push(`${s.clamped} entries owned by ids over 65535 are owned by nobody (65534)`);
  if (s.duplicates > 0) w.push(`${s.duplicates} duplicate entries: the last one of each name wins`);
  return w;
}

/** Failures as one clear line: a full disk, a corrupt archive, or the error itself. */
export function unpackError(e: unknown, what: string): Error {
  if (errCode(e) === "ENOSPC")
    return new DiskFullError(`no space left on the store's filesystem while unpacking ${what}; free space and retry`);
  if (e instanceof TarFormatError) return new ImageInvalidError(`${what}: ${e.message}`);
  return e instanceof Error ? e : new Error(String(e));
}

function budgetError(what: string, maxBytes: number): ImageInvalidError {
  return new ImageInvalidError(`${what} expands past the ${maxBytes}-byte budget for one layer (a tar bomb?)`);
}

/** The stream, hashed and counted as it passes; past maxBytes it stops with an error. */
function hashedStream(
  source: AsyncIterable<Buffer>,
  maxBytes: number,
  what: string,
): { stream: AsyncIterable<Buffer>; digest: () => string; count: () => number; close: () => Promise<void> } {
  const hash = createHash("sha256");
  let count = 0;
  const it = source[Symbol.asyncIterator]();
  const stream: AsyncIterable<Buffer> = {
    [Symbol.asyncIterator]: () => ({
      async next(): Promise<IteratorResult<Buffer>> {
        const r = await it.next();
        if (r.done) return r;
        count += r.value.length;
        if (count > maxBytes) throw budgetError(what, maxBytes);
        hash.update(r.value);
        return r;
      },
    }),
  };
  const close = async (): Promise<void> => void (await it.return?.());
  return { stream, digest: () => hash.digest("hex"), count: () => count, close };
}

async function onEntry(s: UnpackState, h: TarHeader, body: AsyncIterable<Buffer>): Promise<void> {
  if (s.entries.length >= s.maxEntries)
    throw new ImageInvalidError(`${s.what} has more than ${s.maxEntries} entries (the budget for one layer)`);
  const path = cleanPath(h.name, s.what);
  const shown = displayName(path) || "/";
  const key = path.toString("latin1");
  if (s.seen.has(key)) s.duplicates++;
  s.seen.add(key);
  const slash = path.lastIndexOf(0x2f);
  const base = path.subarray(slash + 1).toString("latin1");
  if (base.startsWith(WHITEOUT)) return whiteout(s, path, slash, base);
  const uid = clampId(s, h.uid);
  const gid = clampId(s, h.gid);
  const enc = encodeName(path);
  switch (h.kind) {
    case "dir":
      s.entries.push({ path: enc, type: "dir", mode: h.mode, uid, gid, ...xattrsOf(h) });
      return;
    case "file":
      return storeFile(s, h, body, enc, base, { uid, gid });
    case "symlink":
      if (h.linkName.length === 0) throw new ImageInvalidError(`${s.what}: symlink ${shown} has an empty target`);
      s.entries.push({ path: enc, type: "symlink", target: encodeName(h.linkName), uid, gid });
      return;
    case "hardlink":
      s.entries.push({ path: enc, type: "hardlink", target: encodeName(cleanPath(h.linkName, s.what)) });
      return;
    case "device":
    case "fifo":
      s.entries.push({ path: enc, type: "special", kind: h.kind });
      return;
    default:
      throw new ImageInvalidError(`${s.what}: ${shown} is an unsupported tar entry type (sparse or volume)`);
  }
}

function whiteout(s: UnpackState, path: Buffer, slash: number, base: string): void {
  const parent = slash < 0 ? Buffer.alloc(0) : path.subarray(0, slash);
  if (base === OPAQUE) {
    s.entries.push({ path: encodeName(parent), type: "opaque" });
    return;
  }
  if (base.startsWith(`${WHITEOUT}${WHITEOUT}`)) return; // aufs bookkeeping (.wh..wh.plnk...): not content
  const name = base.slice(WHITEOUT.length);
  if (name === "" || name === "." || name === "..")
    throw new ImageInvalidError(`${s.what}: whiteout ${JSON.stringify(displayName(path))} names no file`);
  const target = Buffer.concat([
    parent,
    parent.length ? Buffer.from("/") : Buffer.alloc(0),
    Buffer.from(name, "latin1"),
  ]);
  s.entries.push({ path: encodeName(target), type: "whiteout" });
}

function clampId(s: UnpackState, id: number): number {
  if (id < IMAGE_ID_COUNT) return id;
  s.clamped++;
  return NOBODY_ID;
}

function xattrsOf(h: TarHeader): { xattrs?: Xattrs } {
  if (h.xattrs.size === 0) return {};
  return { xattrs: Object.fromEntries([...h.xattrs].map(([k, v]) => [k, v.toString("base64")])) };
}

async function storeFile(
  s: UnpackState,
  h: TarHeader,
  body: AsyncIterable<Buffer>,
  path: EncodedName,
  base: string,
  owner: { uid: number; gid: number },
): Promise<void> {
  const attrs = {
    mode: h.mode & 0o777,
    ...owner,
    // A Python source keeps its mtime: the .pyc files compiled from it in the image record it.
    ...(base.endsWith(".py") ? { mtimeSec: Math.min(Math.max(h.mtimeSec, 0), 99_999_999_999) } : {}),
  };
  let object: ObjectId;
  if (h.size <= SMALL) {
    const parts: Buffer[] = [];
    for await (const chunk of body) parts.push(chunk);
    const data = Buffer.concat(parts);
    object = imageObjectId(createHash("sha256").update(data).digest("hex"), attrs);
    if (putBufferSync(s.store, data, object)) s.added.set(object, data.length);
  } else {
    const tmp = join(s.store.tmpDir, scratchName("obj"));
    const { hex } = await writeHashed(body, tmp);
    object = imageObjectId(hex, attrs);
    if (await hasObject(s.store, object, h.size)) await fsp.rm(tmp, { force: true });
    else {
      placeObject(s.store, tmp, object);
      s.added.set(object, h.size);
    }
  }
  s.files++;
  s.bytes += h.size;
  s.entries.push({ path, type: "file", mode: h.mode, object, size: h.size, ...xattrsOf(h) });
}

/**
 * A tar name as a clean relative path: leading "/" and "./" dropped (names are relative to the image's root), empty
 * and "." components dropped, ".." refused (no layer needs it; a hostile one uses it to climb out).
 */
export function cleanPath(raw: Buffer, what: string): Buffer {
  const parts: Buffer[] = [];
  let start = 0;
  for (let i = 0; i <= raw.length; i++) {
    if (i < raw.length && raw[i] !== 0x2f) continue;
    const part = raw.subarray(start, i);
    start = i + 1;
    if (part.length === 0 || (part.length === 1 && part[0] === 0x2e)) continue;
    if (part.length === 2 && part[0] === 0x2e && part[1] === 0x2e)
      throw new ImageInvalidError(
        `${what}: entry ${JSON.stringify(raw.toString("utf8"))} climbs out of the image ('..')`,
      );
    if (part.length > NAME_MAX) throw new ImageInvalidError(`${what}: a name of ${part.length} bytes (over 255)`);
    parts.push(part);
  }
  const out = Buffer.from(parts.map((p) => p.toString("latin1")).join("/"), "latin1");
  if (out.length > PATH_MAX) throw new ImageInvalidError(`${what}: a path of ${out.length} bytes (over 4096)`);
  return out;
}
