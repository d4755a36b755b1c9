/**
 * A read-only EROFS image holding metadata only (composefs-style): directories, symlinks, and files whose data lives
 * elsewhere. A file with a `redirect` is an overlayfs "metacopy" file (`trusted.overlay.metacopy`, and
 * `trusted.overlay.redirect` naming its data in a data-only lower layer): the image records its size, mode, owner
 * and time, and reads as a hole by itself; overlayfs reads its bytes from the data layer.
 *
 * Layout: block 0 holds the superblock (at byte 1024) and the first inodes; the metadata area (every inode, its
 * inline xattrs, a chunk map or the tail of its data) comes first, then the directories' and long symlinks' full
 * blocks. Inodes are all "extended" (64 bytes: 32-bit ids, their own mtime); no record crosses a block boundary.
 * Format: the kernel's fs/erofs/erofs_fs.h.
 */

/** One inode. A file node referenced by several directory entries is one inode with several names (hard links). */
export type ErofsNode = ErofsDir | ErofsFile | ErofsSymlink;
interface NodeAttrs {
  /** Permission bits (and setgid/sticky): the file type comes from the node's kind. */
  mode: number;
  uid: number;
  gid: number;
  mtimeSec: number;
}
export interface ErofsDir extends NodeAttrs {
  kind: "dir";
  entries: { name: Buffer; node: ErofsNode }[];
}
export interface ErofsFile extends NodeAttrs {
  kind: "file";
  size: number;
  /** Absolute path of the data in overlayfs's data-only lower layer (required unless size is 0). */
  redirect?: string;
}
export interface ErofsSymlink extends NodeAttrs {
  kind: "symlink";
  target: Buffer;
}

const BLOCK = 4096;
const BLOCK_BITS = 12;
const SUPER_OFFSET = 1024;
const MAGIC = 0xe0f5e1e2;
const INODE_SIZE = 64;
const SLOT = 32; // nid = byte offset in the metadata area / 32
const DIRENT_SIZE = 12;
const FEATURE_INCOMPAT_CHUNKED_FILE = 0x4;
const XATTR_INDEX_TRUSTED = 4;
const MAX_CHUNK_FORMAT = 31; // chunk size up to 2^(12+31) bytes
const Layout = { flatPlain: 0, flatInline: 2, chunkBased: 4 } as const;
const FileType = { file: 1, dir: 2, symlink: 7 } as const;
const TypeBits = { file: 0o100000, dir: 0o040000, symlink: 0o120000 } as const;

interface Placed {
  node: ErofsNode;
  index: number;
  nid: number;
  parent: ErofsDir;
  nlink: number;
  xattrs: Buffer;
  /** Directory blocks or symlink target. */
  data?: Buffer;
  layout: number;
  /** Bytes after the inode and its xattrs: the inline tail, or the chunk map. */
  inline: Buffer;
  fullBlocks: number;
  blockAddr: number;
}

const roundUp = (n: number, to: number): number => Math.ceil(n / to) * to;

/** The image's bytes; `root` is its root directory. The same tree gives the same bytes. */
export function erofsImage(root: ErofsDir): Buffer {
  const placed = collect(root);
  for (const p of placed) prepareData(p);
  // Metadata area: inodes in order, none crossing a block boundary.
  let cursor = SUPER_OFFSET + 128;
  for (const p of placed) {
    const len = INODE_SIZE + p.xattrs.length + p.inline.length;
    if ((cursor % BLOCK) + len > BLOCK) cursor = roundUp(cursor, BLOCK);
    p.nid = cursor / SLOT;
    cursor = roundUp(cursor + len, SLOT);
  }
  let block = roundUp(cursor, BLOCK) / BLOCK;
  for (const p of placed) {
    if (p.fullBlocks === 0) continue;
    p.blockAddr = block;
    block += p.fullBlocks;
  }
  const image = Buffer.alloc(block * BLOCK);
  const nids = new Map<ErofsNode, number>(placed.map((p) => [p.node, p.nid]));
  for (const p of placed) writeInode(image, p, nids);
  writeSuper(image, placed, block);
  return image;
}

/** Every inode once, parents before children; each directory's entries sorted by name (the kernel bisects them). */
function collect(root: ErofsDir): Placed[] {
  const seen = new Map<ErofsNode, Placed>();
  const out: Placed[] = [];
  const queue: { node: ErofsNode; parent: ErofsDir }[] = [{ node: root, parent: root }];
  for (let i = 0; i < queue.length; i++) {
    const { node, parent } = queue[i]!;
    const known = seen.get(node);
    if (known) {
      if (node.kind === "dir") throw new Error("a directory cannot have two names");
      known.nlink++;
      continue;
    }
    const p: Placed = {
      node,
      index: out.length,
      nid: 0,
      parent,
      nlink: 1,
      xattrs: Buffer.alloc(0),
      layout: Layout.flatPlain,
      inline: Buffer.alloc(0),
      fullBlocks: 0,
      blockAddr: 0,
    };
    seen.set(node, p);
    out.push(p);
    if (node.kind !== "dir") continue;
    node.entries.sort((a, b) => Buffer.compare(a.name, b.name));
    p.nlink = 2;
    for (const e of node.entries) {
      if (e.node.kind === "dir") p.nlink++;
      queue.push({ node: e.node, parent: node });
    }
  }
  return out;
}

/** Xattrs, data size and layout of one inode (directory contents need only names here; nids come later). */
function prepareData(p: Placed): void {
  const n = p.node;
  if (n.kind === "file") {
    if (n.size === 0) return;
    if (n.redirect === undefined) throw new Error("a file with data needs a redirect (data is never stored)");
    p.xattrs = xattrBody([
      ["overlay.metacopy", Buffer.alloc(0)],
      ["overlay.redirect", Buffer.from(n.redirect)],
    ]);
    // One chunk covers the whole file; its address is "none" (a hole).
    const bits = Math.min(Math.max(BLOCK_BITS, Math.ceil(Math.log2(n.size))), BLOCK_BITS + MAX_CHUNK_FORMAT);
    const chunks = Math.ceil(n.size / 2 ** bits);
    p.inline = Buffer.alloc(4 * chunks, 0xff); // each address 0xffffffff: no block
    p.layout = Layout.chunkBased;
    p.blockAddr = bits - BLOCK_BITS; // stored as the chunk format
    return;
  }
  const data = n.kind === "symlink" ? n.target : dirSize(n);
  const size = data.length;
  const tail = size % BLOCK;
  if (tail > 0 && INODE_SIZE + p.xattrs.length + tail <= BLOCK) {
    p.layout = Layout.flatInline;
    p.fullBlocks = (size - tail) / BLOCK;
    p.inline = Buffer.alloc(tail);
  } else p.fullBlocks = Math.ceil(size / BLOCK);
  p.data = data;
}

/** A zeroed buffer the size of a directory's contents: blocks of dirents then names, "." and ".." included. */
function dirSize(d: ErofsDir): Buffer {
  return Buffer.alloc(dirBlocks(d).reduce((n, b, i, all) => n + (i < all.length - 1 ? BLOCK : b.used), 0));
}

interface DirBlock {
  entries: { name: Buffer; node: ErofsNode | "." | ".." }[];
  used: number;
}

function dirBlocks(d: ErofsDir): DirBlock[] {
  const all: DirBlock["entries"] = [
    { name: Buffer.from("."), node: "." as const },
    { name: Buffer.from(".."), node: ".." as const },
    ...d.entries,
  ].sort((a, b) => Buffer.compare(a.name, b.name));
  const blocks: DirBlock[] = [{ entries: [], used: 0 }];
  for (const e of all) {
    const need = DIRENT_SIZE + e.name.length;
    if (blocks[blocks.length - 1]!.used + need > BLOCK) blocks.push({ entries: [], used: 0 });
    const b = blocks[blocks.length - 1]!;
    b.entries.push(e);
    b.used += need;
  }
  return blocks;
}

function fillDir(p: Placed, nids: Map<ErofsNode, number>): Buffer {
  const d = p.node as ErofsDir;
  const out = Buffer.alloc(p.data!.length);
  dirBlocks(d).forEach((b, i) => {
    const base = i * BLOCK;
    let nameOff = DIRENT_SIZE * b.entries.length;
    b.entries.forEach((e, k) => {
      const node = e.node === "." ? d : e.node === ".." ? p.parent : e.node;
      const at = base + k * DIRENT_SIZE;
      out.writeBigUInt64LE(BigInt(nids.get(node)!), at);
      out.writeUInt16LE(nameOff, at + 8);
      out.writeUInt8(FileType[node.kind], at + 10);
      e.name.copy(out, base + nameOff);
      nameOff += e.name.length;
    });
  });
  return out;
}

/** Inline xattrs: a 12-byte header, then entries (name without its "trusted." prefix, value), each 4-byte aligned. */
function xattrBody(attrs: [string, Buffer][]): Buffer {
  const parts: Buffer[] = [Buffer.alloc(12)];
  for (const [name, value] of attrs) {
    const n = Buffer.from(name);
    const e = Buffer.alloc(roundUp(4 + n.length + value.length, 4));
    e.writeUInt8(n.length, 0);
    e.writeUInt8(XATTR_INDEX_TRUSTED, 1);
    e.writeUInt16LE(value.length, 2);
    n.copy(e, 4);
    value.copy(e, 4 + n.length);
    parts.push(e);
  }
  return Buffer.concat(parts);
}

function writeInode(image: Buffer, p: Placed, nids: Map<ErofsNode, number>): void {
  const n = p.node;
  const at = p.nid * SLOT;
  const size = n.kind === "file" ? n.size : p.data!.length;
  image.writeUInt16LE(1 | (p.layout << 1), at); // extended inode
  image.writeUInt16LE(p.xattrs.length ? (p.xattrs.length - 12) / 4 + 1 : 0, at + 2);
  image.writeUInt16LE(TypeBits[n.kind] | (n.mode & 0o7777), at + 4);
  image.writeBigUInt64LE(BigInt(size), at + 8);
  if (p.layout === Layout.chunkBased) image.writeUInt16LE(p.blockAddr, at + 16);
  else image.writeUInt32LE(p.blockAddr, at + 16);
  image.writeUInt32LE(p.index + 1, at + 20);
  image.writeUInt32LE(n.uid, at + 24);
  image.writeUInt32LE(n.gid, at + 28);
  image.writeBigUInt64LE(BigInt(n.mtimeSec), at + 32);
  image.writeUInt32LE(p.nlink, at + 44);
  p.xattrs.copy(image, at + INODE_SIZE);
  const after = at + INODE_SIZE + p.xattrs.length;
  if (p.layout === Layout.chunkBased) {
    p.inline.copy(image, after);
    return;
  }
  if (!p.data) return;
  const data = n.kind === "dir" ? fillDir(p, nids) : p.data;
  const inBlocks = p.fullBlocks * BLOCK;
  data.copy(image, p.blockAddr * BLOCK, 0, Math.min(inBlocks, data.length));
  if (p.layout === Layout.flatInline) data.copy(image, after, inBlocks);
}

function writeSuper(image: Buffer, placed: Placed[], blocks: number): void {
  const s = SUPER_OFFSET;
  const chunked = placed.some((p) => p.layout === Layout.chunkBased);
  image.writeUInt32LE(MAGIC, s);
  image.writeUInt8(BLOCK_BITS, s + 12);
  image.writeUInt16LE(placed[0]!.nid, s + 14);
  image.writeBigUInt64LE(BigInt(placed.length), s + 16);
  image.writeUInt32LE(blocks, s + 36);
  image.writeUInt32LE(chunked ? FEATURE_INCOMPAT_CHUNKED_FILE : 0, s + 80);
}
