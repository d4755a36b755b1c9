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
  /** Names as byte strings (each character one byte, latin1): sorting them sorts the bytes. */
  entries: { name: string; node: ErofsNode }[];
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
/** What Linux (and so materialization) allows: a name of 255 bytes, a symlink target shorter than a page. */
export const MAX_NAME = 255;
export const MAX_SYMLINK = 4095;
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
  /** Inline xattrs (a metacopy file's two), in bytes. */
  xattrLen: number;
  /** Directories: their blocks of entries. */
  blocks?: DirBlock[];
  /** Directory or symlink data size. */
  dataLen: number;
  layout: number;
  /** Bytes after the inode and its xattrs: the inline tail, or the chunk map. */
  inlineLen: number;
  fullBlocks: number;
  /** First full block, or, for a chunk-based file, its chunk format. */
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
    const len = INODE_SIZE + p.xattrLen + p.inlineLen;
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

const byName = (a: { name: string }, b: { name: string }): number => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

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
      xattrLen: 0,
      dataLen: 0,
      layout: Layout.flatPlain,
      inlineLen: 0,
      fullBlocks: 0,
      blockAddr: 0,
    };
    seen.set(node, p);
    out.push(p);
    if (node.kind !== "dir") continue;
    node.entries.sort(byName);
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
    p.xattrLen = XATTR_HEADER + xattrLen(METACOPY, 0) + xattrLen(REDIRECT, Buffer.byteLength(n.redirect));
    // One chunk covers the whole file; its address is "none" (a hole).
    const bits = Math.min(Math.max(BLOCK_BITS, Math.ceil(Math.log2(n.size))), BLOCK_BITS + MAX_CHUNK_FORMAT);
    p.inlineLen = 4 * Math.ceil(n.size / 2 ** bits);
    p.layout = Layout.chunkBased;
    p.blockAddr = bits - BLOCK_BITS;
    return;
  }
  if (n.kind === "dir") {
    p.blocks = dirBlocks(n);
    p.dataLen = (p.blocks.length - 1) * BLOCK + p.blocks[p.blocks.length - 1]!.used;
  } else p.dataLen = n.target.length;
  const tail = p.dataLen % BLOCK;
  if (tail > 0 && INODE_SIZE + p.xattrLen + tail <= BLOCK) {
    p.layout = Layout.flatInline;
    p.fullBlocks = (p.dataLen - tail) / BLOCK;
    p.inlineLen = tail;
  } else p.fullBlocks = Math.ceil(p.dataLen / BLOCK);
}

interface DirBlock {
  entries: { name: string; node: ErofsNode | "." | ".." }[];
  used: number;
}

function dirBlocks(d: ErofsDir): DirBlock[] {
  const all: DirBlock["entries"] = [
    { name: ".", node: "." as const },
    { name: "..", node: ".." as const },
    ...d.entries,
  ].sort(byName);
  const blocks: DirBlock[] = [{ entries: [], used: 0 }];
  for (const e of all) {
    const need = DIRENT_SIZE + e.name.length;
    if (e.name.length === 0 || e.name.length > MAX_NAME) throw new Error(`a name of ${e.name.length} bytes`);
    if (blocks[blocks.length - 1]!.used + need > BLOCK) blocks.push({ entries: [], used: 0 });
    const b = blocks[blocks.length - 1]!;
    b.entries.push(e);
    b.used += need;
  }
  return blocks;
}

/**
 * A directory's data, written where it goes: the full blocks at blockAddr, the tail (if inline) after the inode.
 * Each block: dirents (nid, name offset, type), then the names.
 */
function writeDir(image: Buffer, p: Placed, nids: Map<ErofsNode, number>, inlineAt: number): void {
  const d = p.node as ErofsDir;
  p.blocks!.forEach((b, i) => {
    const base = i < p.fullBlocks ? (p.blockAddr + i) * BLOCK : inlineAt;
    let nameOff = DIRENT_SIZE * b.entries.length;
    b.entries.forEach((e, k) => {
      const node = e.node === "." ? d : e.node === ".." ? p.parent : e.node;
      const at = base + k * DIRENT_SIZE;
      writeU64(image, nids.get(node)!, at);
      image.writeUInt16LE(nameOff, at + 8);
      image.writeUInt8(FileType[node.kind], at + 10);
      image.write(e.name, base + nameOff, "latin1");
      nameOff += e.name.length;
    });
  });
}

/** Inline xattrs: a 12-byte header, then entries (name without its "trusted." prefix, value), each 4-byte aligned. */
const XATTR_HEADER = 12;
const METACOPY = "overlay.metacopy";
const REDIRECT = "overlay.redirect";
const xattrLen = (name: string, valueLen: number): number => roundUp(4 + name.length + valueLen, 4);

function writeXattr(image: Buffer, at: number, name: string, value: string): number {
  const valueLen = Buffer.byteLength(value);
  image.writeUInt8(name.length, at);
  image.writeUInt8(XATTR_INDEX_TRUSTED, at + 1);
  image.writeUInt16LE(valueLen, at + 2);
  image.write(name, at + 4, "latin1");
  image.write(value, at + 4 + name.length);
  return at + xattrLen(name, valueLen);
}

/** Little-endian 64-bit, from a safe integer. */
function writeU64(image: Buffer, n: number, at: number): void {
  image.writeUInt32LE(n % 2 ** 32, at);
  image.writeUInt32LE(Math.floor(n / 2 ** 32), at + 4);
}

function writeInode(image: Buffer, p: Placed, nids: Map<ErofsNode, number>): void {
  const n = p.node;
  const at = p.nid * SLOT;
  image.writeUInt16LE(1 | (p.layout << 1), at); // extended inode
  image.writeUInt16LE(p.xattrLen ? (p.xattrLen - XATTR_HEADER) / 4 + 1 : 0, at + 2);
  image.writeUInt16LE(TypeBits[n.kind] | (n.mode & 0o7777), at + 4);
  writeU64(image, n.kind === "file" ? n.size : p.dataLen, at + 8);
  if (p.layout === Layout.chunkBased) image.writeUInt16LE(p.blockAddr, at + 16);
  else image.writeUInt32LE(p.blockAddr, at + 16);
  image.writeUInt32LE(p.index + 1, at + 20);
  image.writeUInt32LE(n.uid, at + 24);
  image.writeUInt32LE(n.gid, at + 28);
  writeU64(image, n.mtimeSec, at + 32);
  image.writeUInt32LE(p.nlink, at + 44);
  const after = at + INODE_SIZE + p.xattrLen;
  if (n.kind === "file") {
    if (p.layout !== Layout.chunkBased) return;
    writeXattr(image, writeXattr(image, at + INODE_SIZE + XATTR_HEADER, METACOPY, ""), REDIRECT, n.redirect!);
    image.fill(0xff, after, after + p.inlineLen); // each chunk's address 0xffffffff: no block (a hole)
  } else if (n.kind === "dir") writeDir(image, p, nids, after);
  else {
    const inBlocks = p.fullBlocks * BLOCK;
    n.target.copy(image, p.blockAddr * BLOCK, 0, Math.min(inBlocks, n.target.length));
    if (p.layout === Layout.flatInline) n.target.copy(image, after, inBlocks);
  }
}

function writeSuper(image: Buffer, placed: Placed[], blocks: number): void {
  const s = SUPER_OFFSET;
  const chunked = placed.some((p) => p.layout === Layout.chunkBased);
  image.writeUInt32LE(MAGIC, s);
  image.writeUInt8(BLOCK_BITS, s + 12);
  image.writeUInt16LE(placed[0]!.nid, s + 14);
  writeU64(image, placed.length, s + 16);
  image.writeUInt32LE(blocks, s + 36);
  image.writeUInt32LE(chunked ? FEATURE_INCOMPAT_CHUNKED_FILE : 0, s + 80);
}
