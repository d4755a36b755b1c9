/**
 * On-disk layout of a store:
 *   store.json                 format marker
 *   objects/ab/cdef…[x|.M.U.G] content-addressed files: their id says their mode (and, for images, owner)
 *   manifests/<layerKey>.json  one per layer, written last and atomically
 *   tmp/                       scratch for in-flight writes (same filesystem, so renames are atomic)
 *   .lock                      flock: ingest/import/pull hold it shared, gc exclusive
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { InvalidInputError, NotFoundError } from "../../errors.js";
import type { LayerKey } from "../types.js";

export interface Store {
  readonly root: string;
  readonly objectsDir: string;
  readonly manifestsDir: string;
  readonly tmpDir: string;
  readonly lockPath: string;
}

/**
 * sha256 (hex) of the content, then what the file's inode must carry, since materialized files are hard links to
 * their object: for a built layer's file nothing (0444) or "x" (0555, executable); for an image's file
 * ".MODE.UID.GID" (permission bits in 4 octal digits, owner inside the image), plus ".MTIME" for a Python source
 * (its `.pyc` caches record that mtime). The same bytes with other attributes are another object.
 */
export type ObjectId = string;

const ATTRS = String.raw`(?:x|\.0[0-7]{3}\.\d{1,5}\.\d{1,5}(?:\.\d{1,11})?)?`;
export const OBJECT_ID_RE = new RegExp(`^[0-9a-f]{64}${ATTRS}$`);
/** The name of an object's file inside its shard directory (objects/<first 2 hex>/<this>). */
export const OBJECT_FILE_RE = new RegExp(`^[0-9a-f]{62}${ATTRS}$`);

/** What an image's file object carries besides its content. */
export interface ImageFileAttrs {
  /** Permission bits (0o777 at most: setuid, setgid and sticky never reach a host inode). */
  mode: number;
  uid: number;
  gid: number;
  /** Kept for Python sources only; every other object has NORMALIZED_MTIME_SEC. */
  mtimeSec?: number;
}

const LAYER_KEY_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
const TREE_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Open (and by default create) the store rooted at `root`. With create:false, `root` must already be a store. */
export function openStore(root: string, opts: { create?: boolean } = {}): Store {
  const abs = resolve(root);
  const store: Store = {
    root: abs,
    objectsDir: join(abs, "objects"),
    manifestsDir: join(abs, "manifests"),
    tmpDir: join(abs, "tmp"),
    lockPath: join(abs, ".lock"),
  };
  if (opts.create === false) {
    if (!existsSync(store.objectsDir) || !existsSync(store.manifestsDir)) {
      throw new NotFoundError(`not a minisandbox store: ${abs} (expected objects/ and manifests/ inside)`);
    }
    return store;
  }
  for (const dir of [store.objectsDir, store.manifestsDir, store.tmpDir]) mkdirSync(dir, { recursive: true });
  // Created up front so taking the lock never changes the store's contents.
  if (!existsSync(store.lockPath)) writeFileSync(store.lockPath, "");
  const marker = join(abs, "store.json");
  if (!existsSync(marker)) writeFileSync(marker, `${JSON.stringify({ format: "minisandbox-store", version: 1 })}\n`);
  return store;
}

export function isExecutableId(id: ObjectId): boolean {
  return id.endsWith("x");
}

export function objectIdFor(sha256Hex: string, executable: boolean): ObjectId {
  return executable ? `${sha256Hex}x` : sha256Hex;
}

export function imageObjectId(sha256Hex: string, a: ImageFileAttrs): ObjectId {
  const base = `${sha256Hex}.${a.mode.toString(8).padStart(4, "0")}.${a.uid}.${a.gid}`;
  return a.mtimeSec === undefined ? base : `${base}.${a.mtimeSec}`;
}

/** The sha256 (hex) of an object's content. */
export function objectHash(id: ObjectId): string {
  return id.slice(0, 64);
}

/** The attributes of an image's file object; undefined for a built layer's object. */
export function imageFileAttrs(id: ObjectId): ImageFileAttrs | undefined {
  if (id.length <= 65) return undefined;
  const [mode, uid, gid, mtime] = id.slice(65).split(".");
  const a: ImageFileAttrs = { mode: parseInt(mode!, 8), uid: Number(uid), gid: Number(gid) };
  if (mtime !== undefined) a.mtimeSec = Number(mtime);
  return a;
}

/** Objects are immutable: a built layer's are read-only for everyone, an image's have the image's bits. */
export function objectMode(id: ObjectId): number {
  const image = imageFileAttrs(id);
  if (image) return image.mode;
  return isExecutableId(id) ? 0o555 : 0o444;
}

export function objectPath(store: Store, id: ObjectId): string {
  return join(store.objectsDir, id.slice(0, 2), id.slice(2));
}

export function manifestPath(store: Store, key: LayerKey): string {
  return join(store.manifestsDir, `${key}.json`);
}

export function isLayerKey(key: string): boolean {
  return LAYER_KEY_RE.test(key) && !key.endsWith(".json");
}

export function assertLayerKey(key: string): void {
  if (!isLayerKey(key)) {
    throw new InvalidInputError(`invalid layer key ${JSON.stringify(key)} (expected letters, digits, '.', '_', '-')`);
  }
}

export function isTreeName(name: string): boolean {
  return TREE_NAME_RE.test(name);
}
