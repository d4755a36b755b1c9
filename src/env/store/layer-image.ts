/**
 * Layer -> metadata image: the layer's trees as an EROFS image (`erofs.ts`) whose files name their store objects,
 * so that overlayfs, given the image and the store's objects/ as a data-only layer, shows exactly what
 * materializeLayer would have made (same modes, owners, times, symlinks, hard links) without one file per entry on
 * disk. Built only from a validated manifest of the local store: never from anything a sandbox wrote.
 *
 * An image's root filesystem (a tree with an `owner`) keeps its own owners and modes, by the rules its materialized
 * form follows: owners as ids inside the image (0..65535; the sandbox's id-mapped mount puts them in its range, as
 * the materialized tree's store-range owners are), files at most 0777 (no setuid, setgid or sticky bit), directories
 * their setgid and sticky bits, no xattr but overlayfs's own (no file capability), no device node (never in a
 * manifest), Python sources their own mtime.
 */
import { createHash } from "node:crypto";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import type { LayerKey } from "../types.js";
import { errCode, InvalidInputError, NotFoundError } from "../../errors.js";
import { type ErofsDir, type ErofsFile, type ErofsSymlink, erofsImage, MAX_NAME, MAX_SYMLINK } from "./erofs.js";
import { NORMALIZED_MTIME_SEC, writeFileAtomic } from "./fsutil.js";
import { lockFile } from "./lock.js";
import { imageFileAttrs, isLayerKey, manifestPath, objectMode, type ObjectId, type Store } from "./layout.js";
import { parseManifest, readManifest, type FileEntry, type LayerManifest, type TreeManifest } from "./manifest.js";
import { GIT_INDEX_MTIME_SEC, imageDirMode, readOnlyDirMode } from "./materialize.js";
import { decodeName, displayName, type EncodedName, pathKey } from "./names.js";

export interface LayerImageResult {
  path: string;
  /** Tree names, each a top-level directory of the image. */
  trees: string[];
  files: number;
  imageBytes: number;
  durationMs: number;
}

/** Where an object's data is, relative to the store's objects/ (the data layer's root). */
export const objectRedirect = (id: ObjectId): string => `/${id.slice(0, 2)}/${id.slice(2)}`;

function describe(manifest: LayerManifest, image: Buffer): Omit<LayerImageResult, "path" | "durationMs"> {
  let files = 0;
  for (const t of Object.values(manifest.trees)) for (const e of t.entries) if (e.type === "file") files++;
  return { trees: Object.keys(manifest.trees).sort(), files, imageBytes: image.length };
}

/**
 * A layer's image as the store keeps it once written (`layer-images/`), so that placing it again — after an
 * eviction from a node cache, in another home sharing the store — is a link, not a write. Named by the digest of the
 * manifest it was made from and by the writer's ids (a built layer's inodes are the writer's): a manifest replaced
 * later names another image, and `gcStore` drops the old one. `<name>.json` (what it holds) is written after the
 * image, both flushed: it is there only when the image is complete.
 */
export interface StoredLayerImage extends LayerImageResult {
  /** Written by this call (false: it was there). */
  written: boolean;
}

interface StoredImageRecord {
  key: LayerKey;
  manifestSha256: string;
  trees: string[];
  files: number;
  imageBytes: number;
}

export const layerImagesDir = (store: Store): string => join(store.root, "layer-images");

/** The stored image of layer `key` as its manifest is now, written into the store first if it is not there. */
export async function storeLayerImage(store: Store, key: LayerKey): Promise<StoredLayerImage> {
  const started = performance.now();
  const found = await findStoredLayerImage(store, key);
  if (found) return found;
  // One reading of the manifest for both the image and the digest that names it.
  const text = await fsp.readFile(manifestPath(store, key), "utf8").catch((e: unknown) => {
    throw errCode(e) === "ENOENT" ? new NotFoundError(`layer ${key} not found in store ${store.root}`) : e;
  });
  const manifest = parseManifest(text, key);
  const image = layerImage(manifest);
  const manifestSha256 = sha256Hex(text);
  const { path, record } = storedPaths(store, manifestSha256);
  const described = describe(manifest, image);
  const entry: StoredImageRecord = { key, manifestSha256, ...described };
  // Shared, as an ingest's: gc (exclusive) clears tmp/ and drops images without a record, which these writes pass by.
  const lock = await lockFile(store.lockPath, { shared: true });
  try {
    await fsp.mkdir(layerImagesDir(store), { recursive: true });
    await writeFileAtomic(path, image, store.tmpDir, 0o444);
    await writeFileAtomic(record, `${JSON.stringify(entry)}\n`, store.tmpDir);
  } finally {
    await lock.release();
  }
  return { ...described, path, written: true, durationMs: performance.now() - started };
}

/** The stored image of layer `key`'s current manifest, if one was written (and is whole). */
export async function findStoredLayerImage(store: Store, key: LayerKey): Promise<StoredLayerImage | undefined> {
  const started = performance.now();
  let text: string;
  try {
    text = await fsp.readFile(manifestPath(store, key), "utf8");
  } catch {
    return undefined;
  }
  const { path, record } = storedPaths(store, sha256Hex(text));
  let entry: StoredImageRecord;
  try {
    entry = JSON.parse(await fsp.readFile(record, "utf8")) as StoredImageRecord;
    if (entry.key !== key || (await fsp.stat(path)).size !== entry.imageBytes) return undefined;
  } catch {
    return undefined;
  }
  const { trees, files, imageBytes } = entry;
  return { path, trees, files, imageBytes, written: false, durationMs: performance.now() - started };
}

/** Why layer `key`'s stored image is not what its manifest gives now (the same tree gives the same bytes), if so. */
export async function storedLayerImageProblem(store: Store, key: LayerKey): Promise<string | undefined> {
  const stored = await findStoredLayerImage(store, key);
  if (!stored) return undefined;
  const expected = layerImage(await readManifest(store, key));
  if (!expected.equals(await fsp.readFile(stored.path)))
    return `${stored.path} differs from the image its manifest gives (remove it: the next placement writes it again)`;
  return undefined;
}

/** Stored images whose layer is gone or whose manifest changed since (their record names the manifest's digest). */
export async function staleLayerImages(store: Store): Promise<string[]> {
  const dir = layerImagesDir(store);
  const names = await fsp.readdir(dir).catch(() => [] as string[]);
  const live = new Set<string>();
  for (const name of names.filter((n) => n.endsWith(".json"))) {
    const found = await readStoredRecord(join(dir, name));
    const current = found && (await fsp.readFile(manifestPath(store, found.key), "utf8").catch(() => undefined));
    if (found && current !== undefined && sha256Hex(current) === found.manifestSha256) {
      const stem = name.slice(0, -".json".length);
      live.add(name).add(`${stem}.erofs`);
    }
  }
  return names.filter((n) => !live.has(n)).map((n) => join(dir, n));
}

async function readStoredRecord(path: string): Promise<StoredImageRecord | undefined> {
  try {
    const r = JSON.parse(await fsp.readFile(path, "utf8")) as StoredImageRecord;
    return isLayerKey(r.key) && typeof r.manifestSha256 === "string" ? r : undefined;
  } catch {
    return undefined;
  }
}

function storedPaths(store: Store, manifestSha256: string): { path: string; record: string } {
  const stem = join(layerImagesDir(store), `${manifestSha256}-${process.getuid?.() ?? 0}`);
  return { path: `${stem}.erofs`, record: `${stem}.json` };
}

const sha256Hex = (text: string): string => createHash("sha256").update(text).digest("hex");

/** What a materialized tree could not hold either: refused before anything is written. */
function checkEntry(key: LayerKey, path: string, name: string, target?: Buffer): void {
  const why =
    name.length > MAX_NAME
      ? `a name longer than ${MAX_NAME} bytes`
      : target && (target.length === 0 || target.length > MAX_SYMLINK)
        ? `a symlink target of ${target.length} bytes`
        : undefined;
  if (why)
    throw new InvalidInputError(`layer ${key}: ${JSON.stringify(displayName(Buffer.from(path, "latin1")))} has ${why}`);
}

/**
 * The image's bytes: a root directory (0555) holding one directory per tree. A built layer's inodes are owned by this
 * process's user, as its materialized dirs and symlinks are (and its files, links to objects this user's store
 * wrote); an image's tree by the image's own ids.
 */
export function layerImage(manifest: LayerManifest): Buffer {
  const self = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  const root = dirNode(0o555, self);
  for (const [name, tree] of Object.entries(manifest.trees))
    root.entries.push({ name, node: treeNode(manifest.key, tree, tree.owner ? imageInodes : builtInodes(self)) });
  return erofsImage(root);
}

type Ids = { uid: number; gid: number };

/** What a tree's inodes carry: materializeTree's rules (materialize.ts), one set per kind of tree. */
interface TreeInodes {
  dirMode(mode: number): number;
  /** A directory's or symlink's owner, from its entry (the tree's top: the tree's owner). */
  owner(ids: Partial<Ids>): Ids;
  file(e: FileEntry, gitIndex: boolean): ErofsFile;
}

/** A built layer: read-only, this user's, a git index one second newer than its work tree. */
const builtInodes = (self: Ids): TreeInodes => ({
  dirMode: readOnlyDirMode,
  owner: () => self,
  file: (e, gitIndex) => ({
    kind: "file",
    mode: objectMode(e.object),
    uid: self.uid,
    gid: self.gid,
    mtimeSec: gitIndex ? GIT_INDEX_MTIME_SEC : NORMALIZED_MTIME_SEC,
    size: e.size,
    redirect: objectRedirect(e.object),
  }),
});

/** An image's root filesystem: each inode its own owner; a file its object's mode, owner and mtime (objects.ts). */
const imageInodes: TreeInodes = {
  dirMode: imageDirMode,
  owner: (ids) => ({ uid: ids.uid ?? 0, gid: ids.gid ?? 0 }),
  file: (e) => {
    const a = imageFileAttrs(e.object);
    if (!a) throw new InvalidInputError(`object ${e.object} of an image's tree has no owner`);
    return {
      kind: "file",
      // At most 0777 by its id already; masked again: no setuid, setgid or sticky bit ever reaches an image.
      mode: a.mode & 0o777,
      uid: a.uid,
      gid: a.gid,
      mtimeSec: a.mtimeSec ?? NORMALIZED_MTIME_SEC,
      size: e.size,
      redirect: objectRedirect(e.object),
    };
  },
};

function dirNode(mode: number, ids: Ids): ErofsDir {
  return { kind: "dir", mode, uid: ids.uid, gid: ids.gid, mtimeSec: NORMALIZED_MTIME_SEC, entries: [] };
}

/** One tree, as materializeTree would place it. */
function treeNode(key: LayerKey, tree: TreeManifest, inodes: TreeInodes): ErofsDir {
  const top = dirNode(inodes.dirMode(tree.mode), inodes.owner(tree.owner ?? {}));
  const dirs = new Map<string, ErofsDir>([["", top]]);
  // Files later entries link to, by path: the only ones looked up again.
  const linked = new Map<string, ErofsFile | undefined>();
  for (const e of tree.entries) if (e.type === "hardlink") linked.set(byteString(e.target), undefined);
  for (const e of tree.entries) {
    const path = byteString(e.path);
    const slash = path.lastIndexOf("/");
    const parent = dirs.get(slash < 0 ? "" : path.slice(0, slash))!;
    const name = path.slice(slash + 1);
    const target = e.type === "symlink" ? decodeName(e.target) : undefined;
    checkEntry(key, path, name, target);
    if (e.type === "dir") {
      const d = dirNode(inodes.dirMode(e.mode), inodes.owner(e));
      dirs.set(path, d);
      parent.entries.push({ name, node: d });
    } else if (e.type === "file") {
      const f = inodes.file(e, path === ".git/index" || path.endsWith("/.git/index"));
      if (linked.has(path)) linked.set(path, f);
      parent.entries.push({ name, node: f });
    } else if (e.type === "symlink") {
      const { uid, gid } = inodes.owner(e);
      const node: ErofsSymlink = {
        kind: "symlink",
        mode: 0o777,
        uid,
        gid,
        mtimeSec: NORMALIZED_MTIME_SEC,
        target: target!,
      };
      parent.entries.push({ name, node });
    } else parent.entries.push({ name, node: linked.get(byteString(e.target))! });
  }
  return top;
}

/** A path's bytes as a string of one character per byte (latin1): an ASCII name is its own. */
function byteString(name: EncodedName): string {
  return typeof name === "string" && !NON_ASCII.test(name) ? name : pathKey(decodeName(name));
}
const NON_ASCII = /[^\x00-\x7f]/;
