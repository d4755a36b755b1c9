/**
 * On-disk layout of a store:
 *   store.json                 format marker
 *   objects/ab/cdef…[x]        content-addressed files, read-only (0444, or 0555 when the name ends in "x")
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

/** sha256 (hex) of the content, plus "x" when the file is executable: two different objects for the same bytes. */
export type ObjectId = string;

export const OBJECT_ID_RE = /^[0-9a-f]{64}x?$/;
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

/** Objects are immutable: read-only for everyone, executable iff their id says so. */
export function objectMode(id: ObjectId): number {
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
