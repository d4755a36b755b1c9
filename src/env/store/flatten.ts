/**
 * An image's layers (diff records, lowest first) -> one layer manifest: its root filesystem, tree "rootfs", whiteouts
 * and opaque directories applied in order. Everything happens on the manifests in memory: no file is read or
 * written, and a path is only ever resolved inside the image (a symlink in a parent path is followed the way a
 * container runtime unpacking in a chroot follows it, absolute targets from the image's root, ".." stopping there),
 * so no layer can reach outside the tree whatever its links say. The key is the layers' OCI chain id.
 */
import { createHash } from "node:crypto";
import { ImageInvalidError } from "../../errors.js";
import type { LayerKey } from "../types.js";
import { NORMALIZED_MTIME_SEC } from "./fsutil.js";
import { readDiff, type DiffEntry, type DiffRecord } from "./layer-diff.js";
import type { ObjectId, Store } from "./layout.js";
import {
  hasLayer,
  MANIFEST_FORMAT,
  readManifest,
  validateManifest,
  writeManifest,
  type LayerManifest,
  type ManifestEntry,
  type Xattrs,
} from "./manifest.js";
import { decodeName, displayName, encodeName, type EncodedName } from "./names.js";

export const ROOTFS_TREE = "rootfs";

interface Inode {
  object: ObjectId;
  size: number;
  mode: number;
  xattrs?: Xattrs;
}
interface DirNode {
  t: "d";
  mode: number;
  uid: number;
  gid: number;
  xattrs?: Xattrs;
  kids: Map<string, Node>;
}
type Node = DirNode | { t: "f"; ino: Inode } | { t: "l"; target: EncodedName; uid: number; gid: number };

/** OCI chain id of layers given by diff id: the first diff id, then sha256("<chain> <next diff id>") per layer. */
export function chainId(diffIds: readonly string[]): string {
  let chain = diffIds[0]!;
  for (const d of diffIds.slice(1)) chain = `sha256:${createHash("sha256").update(`${chain} ${d}`).digest("hex")}`;
  return chain;
}

export function rootfsKey(diffIds: readonly string[]): LayerKey {
  return `rootfs-${chainId(diffIds).slice(7)}`;
}

/**
 * A layer made from a root filesystem (`rootfs-<chain>`), named `<what>-<chain>` (an image's chronological testbed
 * history: `testbed-git-<version>`): it goes with the root filesystem when `removeImage` removes that.
 */
export function derivedKey(rootfs: LayerKey, what: string): LayerKey {
  return `${what}-${rootfs.replace(/^rootfs-/, "")}`;
}

/** Whether `key` was made from `rootfs` (`derivedKey`). */
export function isDerivedFrom(key: LayerKey, rootfs: LayerKey): boolean {
  const chain = rootfs.replace(/^rootfs-/, "");
  const what = key.slice(0, -chain.length - 1);
  return key !== rootfs && key.endsWith(`-${chain}`) && /^testbed-git-\d+(-[0-9a-f]{12})?$/.test(what);
}

/** What the root filesystem's manifest leaves out of host inodes, counted (README "Images"). */
export interface NotApplied {
  setid: number;
  xattrs: number;
  specials: number;
}

/**
 * Write (unless the store has it) the root filesystem layer of these layers, and give its manifest; the caller holds
 * the store lock. `manifest`: what `rootfsManifest` gave for them (made while something else was waited for).
 */
export async function flattenImage(
  store: Store,
  diffIds: readonly string[],
  manifest?: LayerManifest,
): Promise<{ key: LayerKey; created: boolean; manifest: LayerManifest }> {
  if (diffIds.length === 0) throw new ImageInvalidError("an image without layers has no root filesystem");
  const key = rootfsKey(diffIds);
  if (await hasLayer(store, key)) return { key, created: false, manifest: await readManifest(store, key) };
  const made = manifest?.key === key ? manifest : await rootfsManifest(store, diffIds);
  await writeManifest(store, made);
  return { key, created: true, manifest: made };
}

/**
 * The root filesystem's manifest of these layers, made and validated in memory (nothing written); `known`: diff
 * records the caller holds already (a layer just unpacked, before its record is on disk).
 */
export async function rootfsManifest(
  store: Store,
  diffIds: readonly string[],
  known?: ReadonlyMap<string, DiffRecord>,
): Promise<LayerManifest> {
  if (diffIds.length === 0) throw new ImageInvalidError("an image without layers has no root filesystem");
  const key = rootfsKey(diffIds);
  const root: DirNode = { t: "d", mode: 0o755, uid: 0, gid: 0, kids: new Map() };
  const notApplied: NotApplied = { setid: 0, xattrs: 0, specials: 0 };
  for (const [i, diffId] of diffIds.entries()) {
    const diff = known?.get(diffId) ?? (await readDiff(store, diffId));
    applyLayer(root, diff, `layer ${i + 1} (${diffId})`, notApplied);
  }
  const manifest: LayerManifest = {
    format: MANIFEST_FORMAT,
    key,
    mtime: { policy: "fixed", epochSec: NORMALIZED_MTIME_SEC },
    trees: {
      [ROOTFS_TREE]: { mode: root.mode, owner: { uid: root.uid, gid: root.gid }, entries: emit(root, notApplied) },
    },
    meta: { image: { diffIds: [...diffIds], notApplied: { ...notApplied } } },
  };
  validateManifest(manifest, key);
  return manifest;
}

function applyLayer(root: DirNode, diff: DiffRecord, what: string, notApplied: NotApplied): void {
  // Whiteouts and opaque markers hide what lower layers hold, never what this layer adds: they go first.
  for (const e of diff.entries) {
    if (e.type === "whiteout") {
      const { parent, name } = split(decodeName(e.path));
      resolveDir(root, parent, false, what)?.kids.delete(name);
    } else if (e.type === "opaque") resolveDir(root, decodeName(e.path), false, what)?.kids.clear();
  }
  for (const e of diff.entries) {
    if (e.type !== "whiteout" && e.type !== "opaque") applyEntry(root, e, what, notApplied);
  }
}

function applyEntry(root: DirNode, e: DiffEntry, what: string, notApplied: NotApplied): void {
  const path = decodeName(e.path);
  if (path.length === 0) {
    if (e.type !== "dir") throw new ImageInvalidError(`${what}: the root is not a directory`);
    Object.assign(root, { mode: e.mode, uid: e.uid, gid: e.gid, xattrs: e.xattrs });
    return;
  }
  const { parent, name } = split(path);
  const dir = resolveDir(root, parent, true, what)!;
  const existing = dir.kids.get(name);
  switch (e.type) {
    case "dir":
      if (existing?.t === "d") Object.assign(existing, { mode: e.mode, uid: e.uid, gid: e.gid, xattrs: e.xattrs });
      else dir.kids.set(name, { t: "d", mode: e.mode, uid: e.uid, gid: e.gid, xattrs: e.xattrs, kids: new Map() });
      return;
    case "file":
      dir.kids.set(name, { t: "f", ino: { object: e.object, size: e.size, mode: e.mode, xattrs: e.xattrs } });
      return;
    case "symlink":
      dir.kids.set(name, { t: "l", target: e.target, uid: e.uid, gid: e.gid });
      return;
    case "hardlink":
      dir.kids.set(name, hardlinkNode(root, e.target, path, what));
      return;
    case "special":
      notApplied.specials++;
      dir.kids.delete(name);
      return;
  }
}

/** A hard link shares its target's inode: an earlier file of this layer or a lower one, found inside the image. */
function hardlinkNode(root: DirNode, target: EncodedName, path: Buffer, what: string): Node {
  const t = split(decodeName(target));
  const node = resolveDir(root, t.parent, false, what)?.kids.get(t.name);
  const shown = `${JSON.stringify(displayName(path))} -> ${JSON.stringify(displayName(target))}`;
  if (node === undefined) throw new ImageInvalidError(`${what}: hard link ${shown} points to nothing in the image`);
  if (node.t === "d") throw new ImageInvalidError(`${what}: hard link ${shown} points to a directory`);
  return node.t === "f" ? { t: "f", ino: node.ino } : { ...node };
}

function split(path: Buffer): { parent: Buffer; name: string } {
  const slash = path.lastIndexOf(0x2f);
  return {
    parent: slash < 0 ? Buffer.alloc(0) : path.subarray(0, slash),
    name: path.subarray(slash + 1).toString("latin1"),
  };
}

const MAX_SYMLINK_HOPS = 40;

/**
 * The directory at `path` inside the image, following symlinks as the kernel would inside a chroot. With `create`,
 * missing directories are made (0755, root), as unpacking `a/b/c` without `a/b` does; a file in the way is an error.
 * Without it, undefined when the path leads nowhere (a whiteout of something absent is a no-op).
 */
function resolveDir(root: DirNode, path: Buffer, create: boolean, what: string): DirNode | undefined {
  const stack: DirNode[] = [root];
  const todo = components(path).reverse();
  let hops = 0;
  while (todo.length > 0) {
    const part = todo.pop()!;
    const here = stack[stack.length - 1]!;
    if (part === ".") continue;
    if (part === "..") {
      if (stack.length > 1) stack.pop();
      continue;
    }
    let next = here.kids.get(part);
    if (next === undefined) {
      if (!create) return undefined;
      next = { t: "d", mode: 0o755, uid: 0, gid: 0, kids: new Map() };
      here.kids.set(part, next);
    }
    if (next.t === "d") stack.push(next);
    else if (next.t === "l") {
      if (++hops > MAX_SYMLINK_HOPS)
        throw new ImageInvalidError(`${what}: too many symlinks resolving ${JSON.stringify(displayName(path))}`);
      const target = decodeName(next.target);
      if (target[0] === 0x2f) stack.length = 1;
      todo.push(...components(target).reverse());
    } else if (create) {
      throw new ImageInvalidError(`${what}: ${JSON.stringify(displayName(path))}: a file is in the way of a directory`);
    } else return undefined;
  }
  return stack[stack.length - 1];
}

function components(path: Buffer): string[] {
  return path
    .toString("latin1")
    .split("/")
    .filter((p) => p.length > 0);
}

// Names here are latin1 strings of their bytes: pure ASCII is its own UTF-8, so it is its encoded name.
const ASCII = /^[\x00-\x7f]*$/;

/** Pre-order entries, names in byte order; the first path of a shared inode is its file, the others hard links. */
function emit(root: DirNode, notApplied: NotApplied): ManifestEntry[] {
  const out: ManifestEntry[] = [];
  const firstPath = new Map<Inode, EncodedName>();
  const walk = (dir: DirNode, prefix: string): void => {
    for (const name of [...dir.kids.keys()].sort()) {
      const node = dir.kids.get(name)!;
      const rel = prefix ? `${prefix}/${name}` : name;
      const path = ASCII.test(rel) ? rel : encodeName(Buffer.from(rel, "latin1"));
      if (node.t === "d") {
        out.push({ path, type: "dir", mode: node.mode, uid: node.uid, gid: node.gid, ...xattrs(node, notApplied) });
        walk(node, rel);
      } else if (node.t === "l") out.push({ path, type: "symlink", target: node.target, uid: node.uid, gid: node.gid });
      else {
        const first = firstPath.get(node.ino);
        if (first !== undefined) {
          out.push({ path, type: "hardlink", target: first });
          continue;
        }
        firstPath.set(node.ino, path);
        const { object, size, mode } = node.ino;
        if (mode & 0o6000) notApplied.setid++;
        out.push({ path, type: "file", mode, object, size, ...xattrs(node.ino, notApplied) });
      }
    }
  };
  walk(root, "");
  return out;
}

function xattrs(x: { xattrs?: Xattrs }, notApplied: NotApplied): { xattrs?: Xattrs } {
  if (!x.xattrs || Object.keys(x.xattrs).length === 0) return {};
  notApplied.xattrs++;
  return { xattrs: x.xattrs };
}
