/**
 * Layer -> metadata image: the layer's trees as an EROFS image (`erofs.ts`) whose files name their store objects,
 * so that overlayfs, given the image and the store's objects/ as a data-only layer, shows exactly what
 * materializeLayer would have made (same modes, owners, times, symlinks, hard links) without one file per entry on
 * disk. Built only from a validated manifest of the local store: never from anything a sandbox wrote.
 */
import * as fsp from "node:fs/promises";
import { performance } from "node:perf_hooks";
import type { LayerKey } from "../types.js";
import { InvalidInputError } from "../../errors.js";
import { type ErofsDir, type ErofsFile, erofsImage, MAX_NAME, MAX_SYMLINK } from "./erofs.js";
import { NORMALIZED_MTIME_SEC } from "./fsutil.js";
import { objectMode, type ObjectId, type Store } from "./layout.js";
import { readManifest, type LayerManifest, type TreeManifest } from "./manifest.js";
import { GIT_INDEX_MTIME_SEC, readOnlyDirMode } from "./materialize.js";
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

/** Write layer `key`'s image to `dest` (a new file, read-only). */
export async function writeLayerImage(store: Store, key: LayerKey, dest: string): Promise<LayerImageResult> {
  const started = performance.now();
  const manifest = await readManifest(store, key);
  const image = layerImage(manifest);
  await fsp.writeFile(dest, image, { flag: "wx", mode: 0o444 });
  let files = 0;
  for (const t of Object.values(manifest.trees)) for (const e of t.entries) if (e.type === "file") files++;
  return {
    path: dest,
    trees: Object.keys(manifest.trees).sort(),
    files,
    imageBytes: image.length,
    durationMs: performance.now() - started,
  };
}

/** An OCI image's root filesystem: owners and modes of its own (see README "Images"), not written as an image yet. */
export const hasImageTrees = (m: LayerManifest): boolean => Object.values(m.trees).some((t) => t.owner !== undefined);

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
 * The image's bytes: a root directory (0555) holding one directory per tree. Everything is owned by this process's
 * user, as materialized dirs and symlinks are (and its files, links to objects this user's store wrote).
 */
export function layerImage(manifest: LayerManifest): Buffer {
  if (hasImageTrees(manifest))
    throw new InvalidInputError(`layer ${manifest.key} is an image's root filesystem: it is materialized, not imaged`);
  const ids = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  const root = dirNode(0o555, ids);
  for (const [name, tree] of Object.entries(manifest.trees))
    root.entries.push({ name, node: treeNode(manifest.key, tree, ids) });
  return erofsImage(root);
}

type Ids = { uid: number; gid: number };

function dirNode(mode: number, ids: Ids): ErofsDir {
  return { kind: "dir", mode, uid: ids.uid, gid: ids.gid, mtimeSec: NORMALIZED_MTIME_SEC, entries: [] };
}

/** One tree, as materializeTree would place it (files with their object's mode; a git index one second newer). */
function treeNode(key: LayerKey, tree: TreeManifest, ids: Ids): ErofsDir {
  const top = dirNode(readOnlyDirMode(tree.mode), ids);
  const dirs = new Map<string, ErofsDir>([["", top]]);
  const files = new Map<string, ErofsFile>();
  for (const e of tree.entries) {
    const path = byteString(e.path);
    const slash = path.lastIndexOf("/");
    const parent = dirs.get(slash < 0 ? "" : path.slice(0, slash))!;
    const name = path.slice(slash + 1);
    const target = e.type === "symlink" ? decodeName(e.target) : undefined;
    checkEntry(key, path, name, target);
    if (e.type === "dir") {
      const d = dirNode(readOnlyDirMode(e.mode), ids);
      dirs.set(path, d);
      parent.entries.push({ name, node: d });
    } else if (e.type === "file") {
      const gitIndex = path === ".git/index" || path.endsWith("/.git/index");
      const f: ErofsFile = {
        kind: "file",
        mode: objectMode(e.object),
        uid: ids.uid,
        gid: ids.gid,
        mtimeSec: gitIndex ? GIT_INDEX_MTIME_SEC : NORMALIZED_MTIME_SEC,
        size: e.size,
        redirect: objectRedirect(e.object),
      };
      files.set(path, f);
      parent.entries.push({ name, node: f });
    } else if (target) {
      const node = { kind: "symlink" as const, mode: 0o777, ...ids, mtimeSec: NORMALIZED_MTIME_SEC, target };
      parent.entries.push({ name, node });
    } else parent.entries.push({ name, node: files.get(byteString(e.target))! });
  }
  return top;
}

/** A path's bytes as a string of one character per byte (latin1): an ASCII name is its own. */
function byteString(name: EncodedName): string {
  return typeof name === "string" && !NON_ASCII.test(name) ? name : pathKey(decodeName(name));
}
const NON_ASCII = /[^\x00-\x7f]/;
