/**
 * Content-addressed objects. Writers put bytes in a scratch file inside the store, check the hash, fix mode and
 * mtime, then rename into objects/: a crash never leaves a partial file under an object's name.
 */
import { createHash } from "node:crypto";
import {
  chmodSync,
  chownSync,
  createReadStream,
  linkSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  utimesSync,
  writeFileSync,
  type PathLike,
} from "node:fs";
import * as fsp from "node:fs/promises";
import { dirname, join } from "node:path";
import { errCode, InvalidInputError } from "../../errors.js";
import { NORMALIZED_MTIME_SEC, scratchName } from "./fsutil.js";
import { canChown, storeIds } from "./ids.js";
import { FileAppender } from "./appender.js";
import {
  imageFileAttrs,
  objectHash,
  objectIdFor,
  objectMode,
  objectPath,
  OBJECT_FILE_RE,
  type ObjectId,
  type Store,
} from "./layout.js";

/** Files up to this size are read whole (putSmallFileSync); larger ones are streamed. */
export const SMALL_FILE_BYTES = 1 << 20;

export interface PutResult {
  id: ObjectId;
  size: number;
  /** false when the store already had it (the dedup case). */
  added: boolean;
}

/** Does the store hold this object? `size` also catches objects truncated by a crash before a sync. */
export async function hasObject(store: Store, id: ObjectId, size?: number): Promise<boolean> {
  try {
    const st = await fsp.lstat(objectPath(store, id));
    return st.isFile() && (size === undefined || st.size === size);
  } catch (e) {
    if (errCode(e) === "ENOENT") return false;
    throw e;
  }
}

/** `hasObject` without a thread-pool round trip: one lstat, for loops over thousands of objects. */
export function hasObjectSync(store: Store, id: ObjectId, size?: number): boolean {
  const st = lstatSync(objectPath(store, id), { throwIfNoEntry: false });
  return st?.isFile() === true && (size === undefined || st.size === size);
}

/**
 * Make `dest` (a new name) the object itself, by a hard link (false when the store lacks it or the filesystem
 * cannot link it: another filesystem, a full link count). For trees no one but the caller writes until they are
 * ingested: the object is immutable only as long as nothing with its owner's rights can reach `dest`.
 */
export function linkObject(store: Store, id: ObjectId, dest: string): boolean {
  try {
    linkSync(objectPath(store, id), dest);
    return true;
  } catch (e) {
    if (["ENOENT", "EXDEV", "EMLINK", "EPERM"].includes(errCode(e) ?? "")) return false;
    throw e;
  }
}

/** Is the file at `st` the object `id` itself (a hard link to it, so its bytes need no hashing)? */
export function isObjectInode(store: Store, id: ObjectId, st: { dev: number; ino: number; size: number }): boolean {
  const o = lstatSync(objectPath(store, id), { throwIfNoEntry: false });
  return o?.isFile() === true && o.dev === st.dev && o.ino === st.ino && o.size === st.size;
}

export async function sha256File(path: PathLike): Promise<{ hex: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    hash.update(chunk);
    size += chunk.length;
  }
  return { hex: hash.digest("hex"), size };
}

/**
 * Store one small file of a tree being ingested, synchronously (see yielder()): one read serves both hashing
 * and writing, and a file the store already has costs a read and a stat.
 */
export function putSmallFileSync(store: Store, src: Buffer, executable: boolean): PutResult {
  const data = readFileSync(src);
  const id = objectIdFor(createHash("sha256").update(data).digest("hex"), executable);
  return { id, size: data.length, added: putBufferSync(store, data, id) };
}

/**
 * Store bytes received from elsewhere as object `id`, synchronously, if they hash to it; `mismatch()` is thrown
 * (and nothing is written) if they do not. (What else the id says, mode and owner, comes with the layer's record.)
 */
export function putVerifiedSync(store: Store, data: Buffer, id: ObjectId, mismatch: () => Error): void {
  if (createHash("sha256").update(data).digest("hex") !== objectHash(id)) throw mismatch();
  writeObjectSync(store, data, id);
}

/** Write verified bytes to a scratch file and place it as object `id`. */
function writeObjectSync(store: Store, data: Buffer, id: ObjectId): void {
  const tmp = join(store.tmpDir, scratchName("obj"));
  writeFileSync(tmp, data, { flag: "wx", mode: 0o600 });
  placeObject(store, tmp, id);
}

/** Store one large file of a tree being ingested: hash it, then copy it only if the store lacks it. */
export async function putLargeFile(store: Store, src: PathLike, executable: boolean): Promise<PutResult> {
  const { hex, size } = await sha256File(src);
  const id = objectIdFor(hex, executable);
  if (await hasObject(store, id, size)) return { id, size, added: false };
  await copyVerified(
    store,
    src,
    id,
    () => new InvalidInputError(`file ${String(src)} changed while it was being stored`),
  );
  return { id, size, added: true };
}

/** Write a stream of chunks to a new file, hashing on the way; the file is removed if anything fails. */
export async function writeHashed(
  chunks: AsyncIterable<Buffer>,
  path: string,
  throttle?: (bytes: number) => Promise<void>,
): Promise<{ hex: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  const out = new FileAppender(await fsp.open(path, "wx", 0o600));
  try {
    for await (const chunk of chunks) {
      if (throttle) await throttle(chunk.length);
      hash.update(chunk);
      size += chunk.length;
      await out.append(chunk);
    }
    await out.flush();
  } catch (e) {
    await out.close();
    await fsp.rm(path, { force: true });
    throw e;
  }
  await out.close();
  return { hex: hash.digest("hex"), size };
}

/**
 * Copy `src` into the store as object `id`, hashing while copying; throws `mismatch()` if the bytes do not hash
 * to the id. Used for large ingested files and for objects pulled from a remote store. Returns the size.
 */
export async function copyVerified(
  store: Store,
  src: PathLike,
  id: ObjectId,
  mismatch: () => Error,
  throttle?: (bytes: number) => Promise<void>,
): Promise<number> {
  const tmp = join(store.tmpDir, scratchName("obj"));
  const { hex, size } = await writeHashed(createReadStream(src), tmp, throttle);
  if (objectHash(id) !== hex) {
    await fsp.rm(tmp, { force: true });
    throw mismatch();
  }
  placeObject(store, tmp, id);
  return size;
}

/** The mtime an object's inode carries: the fixed epoch, or a Python source's own (see layout.ts). */
export function objectMtime(id: ObjectId): number {
  return imageFileAttrs(id)?.mtimeSec ?? NORMALIZED_MTIME_SEC;
}

/** Host owner of an image's object (the store's id range; see ids.ts), or undefined: keep the writer's own. */
export function objectOwner(store: Store, id: ObjectId): { uid: number; gid: number } | undefined {
  const image = imageFileAttrs(id);
  if (!image || !canChown()) return undefined;
  const { base } = storeIds(store);
  return { uid: base + image.uid, gid: base + image.gid };
}

/**
 * Give a verified scratch file its final owner, mode and mtime, then rename it to its object path (a few quick
 * metadata calls, so synchronous). The scratch file is removed on failure.
 */
export function placeObject(store: Store, tmp: string, id: ObjectId): void {
  const dest = objectPath(store, id);
  try {
    const owner = objectOwner(store, id);
    if (owner) chownSync(tmp, owner.uid, owner.gid);
    chmodSync(tmp, objectMode(id));
    utimesSync(tmp, objectMtime(id), objectMtime(id));
    renameInto(tmp, dest);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}

/** Store bytes already in memory as object `id` (its hash computed by the caller) unless the store has it. */
export function putBufferSync(store: Store, data: Buffer, id: ObjectId): boolean {
  const st = lstatSync(objectPath(store, id), { throwIfNoEntry: false });
  if (st?.isFile() && st.size === data.length) return false;
  writeObjectSync(store, data, id);
  return true;
}

/** Rename into a shard directory, made on first use (one call per object once the shard exists). */
function renameInto(tmp: string, dest: string): void {
  try {
    renameSync(tmp, dest);
  } catch (e) {
    if (errCode(e) !== "ENOENT") throw e;
    mkdirSync(dirname(dest), { recursive: true });
    renameSync(tmp, dest);
  }
}

export interface ObjectFile {
  id: ObjectId;
  path: string;
  size: number;
}

/** Every object on disk, plus files in objects/ that are not objects (reported by verify, removed by gc). */
export async function scanObjects(store: Store): Promise<{ objects: ObjectFile[]; stray: string[] }> {
  const objects: ObjectFile[] = [];
  const stray: string[] = [];
  for (const shard of (await fsp.readdir(store.objectsDir)).sort()) {
    const shardDir = join(store.objectsDir, shard);
    if (!/^[0-9a-f]{2}$/.test(shard) || !(await fsp.lstat(shardDir)).isDirectory()) {
      stray.push(shardDir);
      continue;
    }
    for (const rest of (await fsp.readdir(shardDir)).sort()) {
      const path = join(shardDir, rest);
      const st = await fsp.lstat(path);
      if (OBJECT_FILE_RE.test(rest) && st.isFile()) objects.push({ id: shard + rest, path, size: st.size });
      else stray.push(path);
    }
  }
  return { objects, stray };
}
