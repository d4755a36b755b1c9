/**
 * A streaming tar reader: ustar, GNU (long names and link names, base-256 numbers) and pax (path, linkpath, size,
 * uid, gid, mtime, `SCHILY.xattr.*` / `LIBARCHIVE.xattr.*`), i.e. everything OCI image layers use. Its input is
 * untrusted (store packs, image layers, archives made inside sandboxes): reading the stream ourselves means no entry
 * ever touches the filesystem except as the caller decides — no symlink or hard link tricks, unlike tar(1).
 */
import { TarFormatError } from "../errors.js";

export interface TarHeader {
  /** Raw name bytes (after GNU long-name / pax overrides). */
  name: Buffer;
  /** "file" and "dir" are the only kinds a pack may contain; everything else is reported by its kind. */
  kind: "file" | "dir" | "hardlink" | "symlink" | "device" | "fifo" | "other";
  size: number;
  /** Permission bits as archived (setuid, setgid and sticky included: callers decide what to keep). */
  mode: number;
  /** Target of a symlink or hard link (raw bytes). */
  linkName: Buffer;
  uid: number;
  gid: number;
  /** Modification time in whole seconds (pax fractions dropped). */
  mtimeSec: number;
  /** Device numbers of a "device" entry (0 otherwise); `char` tells character from block devices. */
  device: { major: number; minor: number; char: boolean };
  /** Extended attributes from pax records (`security.capability`, `user.*`...), values as raw bytes. */
  xattrs: Map<string, Buffer>;
  /** Offset of the entry's data in the (uncompressed) stream: an archive can be indexed and read back by range. */
  dataOffset: number;
}

const BLOCK = 512;
const MAX_META_BYTES = 1 << 20;

/** Reads exact byte counts from an async stream of chunks. */
class ChunkReader {
  private pending: Buffer = Buffer.alloc(0);
  /** Bytes handed out so far (read, taken or skipped). */
  position = 0;
  constructor(private readonly source: AsyncIterator<Buffer>) {}

  /** Exactly n bytes; null on a clean end of stream before any byte; throws when the stream ends midway. */
  async read(n: number): Promise<Buffer | null> {
    while (this.pending.length < n) {
      const next = await this.source.next();
      if (next.done) {
        if (this.pending.length === 0) return null;
        throw new TarFormatError("truncated archive");
      }
      this.pending = this.pending.length === 0 ? next.value : Buffer.concat([this.pending, next.value]);
    }
    const out = this.pending.subarray(0, n);
    this.pending = this.pending.subarray(n);
    this.position += n;
    return out;
  }

  /** Yield exactly n bytes as they arrive, without buffering them all. */
  async *take(n: number): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (this.pending.length === 0) {
        const next = await this.source.next();
        if (next.done) throw new TarFormatError("truncated archive (entry data cut short)");
        this.pending = next.value;
      }
      const part = this.pending.subarray(0, Math.min(left, this.pending.length));
      this.pending = this.pending.subarray(part.length);
      left -= part.length;
      this.position += part.length;
      yield part;
    }
  }

  async skip(n: number): Promise<void> {
    for await (const _ of this.take(n));
  }
}

/**
 * Call onEntry for each entry. The body iterable yields exactly `size` bytes; whatever onEntry leaves unread is
 * skipped. Rejects with TarFormatError on corrupt headers, truncation, or a missing end-of-archive marker.
 */
export async function readTar(
  source: AsyncIterable<Buffer>,
  onEntry: (header: TarHeader, body: AsyncIterable<Buffer>) => Promise<void>,
): Promise<void> {
  const r = new ChunkReader(source[Symbol.asyncIterator]());
  let longName: Buffer | undefined;
  let longLink: Buffer | undefined;
  let pax: Pax = {};
  for (;;) {
    const block = await r.read(BLOCK);
    if (block === null) throw new TarFormatError("truncated archive (no end-of-archive marker)");
    if (isZero(block)) {
      const second = await r.read(BLOCK);
      if (second === null || !isZero(second))
        throw new TarFormatError("truncated archive (incomplete end-of-archive marker)");
      return;
    }
    checkChecksum(block);
    const flag = block[156] === 0 ? "0" : String.fromCharCode(block[156]!);
    const size = parseNumber(block, 124, 12);
    if (flag === "L" || flag === "K" || flag === "x" || flag === "g") {
      if (size > MAX_META_BYTES) throw new TarFormatError("oversized tar metadata entry");
      const data = size === 0 ? Buffer.alloc(0) : await r.read(size);
      if (data === null) throw new TarFormatError("truncated archive");
      await r.skip((BLOCK - (size % BLOCK)) % BLOCK);
      if (flag === "L") longName = cString(data);
      else if (flag === "K") longLink = cString(data);
      else if (flag === "x") pax = parsePax(data);
      continue;
    }
    const header = buildHeader(block, flag, size, pax, longName, longLink, r.position);
    longName = undefined;
    longLink = undefined;
    pax = {};
    // Only regular files carry data for the caller; other entries' data (if any) is skipped.
    const dataSize = header.kind === "file" ? header.size : size;
    let unread = header.kind === "file" ? dataSize : 0;
    const body = (async function* () {
      for await (const chunk of r.take(unread)) {
        unread -= chunk.length;
        yield chunk;
      }
    })();
    await onEntry(header, body);
    await r.skip(header.kind === "file" ? unread : dataSize);
    await r.skip((BLOCK - (dataSize % BLOCK)) % BLOCK);
  }
}

function buildHeader(
  block: Buffer,
  flag: string,
  size: number,
  pax: Pax,
  longName: Buffer | undefined,
  longLink: Buffer | undefined,
  dataOffset: number,
): TarHeader {
  return {
    name: pax.path ?? longName ?? headerName(block),
    kind: kindOf(flag),
    size: pax.size ?? size,
    mode: parseNumber(block, 100, 8) & 0o7777,
    linkName: pax.linkpath ?? longLink ?? cString(block.subarray(157, 257)),
    uid: pax.uid ?? parseNumber(block, 108, 8),
    gid: pax.gid ?? parseNumber(block, 116, 8),
    mtimeSec: pax.mtime ?? parseNumber(block, 136, 12),
    device:
      flag === "3" || flag === "4"
        ? { major: parseNumber(block, 329, 8), minor: parseNumber(block, 337, 8), char: flag === "3" }
        : { major: 0, minor: 0, char: false },
    xattrs: pax.xattrs ?? new Map(),
    dataOffset,
  };
}

function kindOf(flag: string): TarHeader["kind"] {
  switch (flag) {
    case "0":
    case "7":
      return "file";
    case "5":
      return "dir";
    case "1":
      return "hardlink";
    case "2":
      return "symlink";
    case "3":
    case "4":
      return "device";
    case "6":
      return "fifo";
    default:
      return "other";
  }
}

function isZero(b: Buffer): boolean {
  for (const byte of b) if (byte !== 0) return false;
  return true;
}

function cString(b: Buffer): Buffer {
  const nul = b.indexOf(0);
  return nul < 0 ? b : b.subarray(0, nul);
}

function headerName(block: Buffer): Buffer {
  const name = cString(block.subarray(0, 100));
  // POSIX ustar ("ustar\0") splits long names into prefix + name; GNU ("ustar  ") uses those bytes otherwise.
  if (block.subarray(257, 263).toString("latin1") === "ustar\0") {
    const prefix = cString(block.subarray(345, 500));
    if (prefix.length > 0) return Buffer.concat([prefix, Buffer.from("/"), name]);
  }
  return name;
}

function checkChecksum(block: Buffer): void {
  const stored = parseNumber(block, 148, 8);
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : block[i]!;
  if (sum !== stored) throw new TarFormatError("corrupt tar header (bad checksum)");
}

/** Octal, or GNU base-256 when the high bit of the first byte is set (sizes over 8 GiB). */
function parseNumber(block: Buffer, off: number, len: number): number {
  const field = block.subarray(off, off + len);
  if (field[0]! & 0x80) {
    let v = field[0]! & 0x7f;
    for (let i = 1; i < len; i++) v = v * 256 + field[i]!;
    if (!Number.isSafeInteger(v)) throw new TarFormatError("tar number out of range");
    return v;
  }
  const text = field
    .toString("latin1")
    .replace(/[\0 ]+$/, "")
    .replace(/^ +/, "");
  if (!/^[0-7]*$/.test(text)) throw new TarFormatError("corrupt tar header (bad number)");
  return text === "" ? 0 : parseInt(text, 8);
}

interface Pax {
  path?: Buffer;
  linkpath?: Buffer;
  size?: number;
  uid?: number;
  gid?: number;
  mtime?: number;
  xattrs?: Map<string, Buffer>;
}

const PAX_NUMBERS = { size: "size", uid: "uid", gid: "gid" } as const;

function parsePax(data: Buffer): Pax {
  const out: Pax = {};
  let pos = 0;
  while (pos < data.length) {
    const space = data.indexOf(0x20, pos);
    const len = space < 0 ? NaN : parseInt(data.subarray(pos, space).toString("latin1"), 10);
    if (!Number.isInteger(len) || len <= 0 || pos + len > data.length) throw new TarFormatError("corrupt pax header");
    const record = data.subarray(space + 1, pos + len - 1);
    const eq = record.indexOf(0x3d);
    if (eq < 0) throw new TarFormatError("corrupt pax header");
    const key = record.subarray(0, eq).toString("latin1");
    const value = record.subarray(eq + 1);
    if (key === "path") out.path = value;
    else if (key === "linkpath") out.linkpath = value;
    else if (key in PAX_NUMBERS) out[PAX_NUMBERS[key as keyof typeof PAX_NUMBERS]] = paxInteger(key, value);
    else if (key === "mtime") out.mtime = Math.floor(paxNumber(key, value));
    else if (key.startsWith("SCHILY.xattr.")) setXattr(out, key.slice(13), value);
    else if (key.startsWith("LIBARCHIVE.xattr."))
      setXattr(out, decodeURIComponent(key.slice(17)), Buffer.from(value.toString("latin1"), "base64"));
    pos += len;
  }
  return out;
}

function setXattr(pax: Pax, name: string, value: Buffer): void {
  pax.xattrs ??= new Map();
  pax.xattrs.set(name, value);
}

function paxNumber(key: string, value: Buffer): number {
  const n = Number(value.toString("latin1"));
  if (!Number.isFinite(n) || n < 0 || n > Number.MAX_SAFE_INTEGER) throw new TarFormatError(`corrupt pax ${key}`);
  return n;
}

function paxInteger(key: string, value: Buffer): number {
  const n = paxNumber(key, value);
  if (!Number.isSafeInteger(n)) throw new TarFormatError(`corrupt pax ${key}`);
  return n;
}
