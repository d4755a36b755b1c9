/**
 * The files of an image archive, read without extracting it: a tar (`docker save`, `podman save`, an oci-archive;
 * gzip or zstd compressed too) is indexed once by our own tar reader and its members read back by byte range; an
 * OCI layout directory is read in place, refusing symlinks. Member names are only ever keys: nothing in an archive
 * is written anywhere by its name.
 */
import { createReadStream, createWriteStream, lstatSync } from "node:fs";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { ImageInvalidError, InvalidInputError, NotFoundError } from "../../errors.js";
import { readTar } from "../../util/tar.js";
import { scratchName } from "../store/fsutil.js";
import { cleanPath } from "../store/index.js";
import { decompress } from "./layer-stream.js";

export interface ArchiveFiles {
  readonly describe: string;
  has(name: string): boolean;
  size(name: string): number;
  /** A whole (small) member; refused past `max` bytes. */
  read(name: string, max: number): Promise<Buffer>;
  stream(name: string): AsyncIterable<Buffer>;
  close(): Promise<void>;
}

interface Member {
  offset: number;
  size: number;
}

const MAX_LINK_HOPS = 16;

/** Open `path`: a directory (OCI layout) or a tar archive (decompressed into `scratchDir` first if compressed). */
export async function openArchiveFiles(path: string, scratchDir: string): Promise<ArchiveFiles> {
  const st = await fsp.stat(path).catch(() => undefined);
  if (!st) throw new NotFoundError(`no such file or directory: ${path}`);
  if (st.isDirectory()) return directoryFiles(path);
  if (!st.isFile()) throw new InvalidInputError(`${path} is neither an archive nor a directory`);
  const head = Buffer.alloc(4);
  const fh = await fsp.open(path, "r");
  await fh.read(head, 0, 4, 0).finally(() => fh.close());
  const compressed = (head[0] === 0x1f && head[1] === 0x8b) || head.readUInt32LE(0) === 0xfd2fb528;
  if (!compressed) return tarFiles(path, path, undefined);
  const plain = join(scratchDir, scratchName("archive"));
  try {
    await pipeline(decompress(createReadStream(path) as AsyncIterable<Buffer>, path), createWriteStream(plain));
    return await tarFiles(plain, path, plain);
  } catch (e) {
    await fsp.rm(plain, { force: true });
    throw e;
  }
}

async function tarFiles(file: string, describe: string, scratch: string | undefined): Promise<ArchiveFiles> {
  const members = new Map<string, Member>();
  const links = new Map<string, { target: string; hard: boolean }>();
  try {
    await readTar(createReadStream(file) as AsyncIterable<Buffer>, async (h) => {
      const name = cleanPath(h.name, describe).toString("latin1");
      if (h.kind === "file") members.set(name, { offset: h.dataOffset, size: h.size });
      else if (h.kind === "symlink" || h.kind === "hardlink")
        links.set(name, { target: h.linkName.toString("latin1"), hard: h.kind === "hardlink" });
    });
  } catch (e) {
    if (scratch) await fsp.rm(scratch, { force: true });
    if (e instanceof InvalidInputError) throw new ImageInvalidError(`${describe}: ${e.message}`);
    throw e;
  }
  const find = (name: string): Member | undefined => {
    let current = name;
    for (let hop = 0; hop <= MAX_LINK_HOPS; hop++) {
      const m = members.get(current);
      if (m) return m;
      const link = links.get(current);
      if (!link) return undefined;
      // An old `docker save` links a repeated layer to its first copy: "../<id>/layer.tar".
      const base = link.hard || link.target.startsWith("/") ? "" : current.split("/").slice(0, -1).join("/");
      current = normalizeName(base ? `${base}/${link.target}` : link.target);
    }
    return undefined;
  };
  const member = (name: string): Member => {
    const m = find(name);
    if (!m) throw new ImageInvalidError(`${describe} has no ${name}`);
    return m;
  };
  return {
    describe,
    has: (name) => find(name) !== undefined,
    size: (name) => member(name).size,
    read: async (name, max) => {
      const m = member(name);
      if (m.size > max) throw new ImageInvalidError(`${describe}: ${name} is over ${max} bytes`);
      const fh = await fsp.open(file, "r");
      try {
        const buf = Buffer.alloc(m.size);
        const { bytesRead } = await fh.read(buf, 0, m.size, m.offset);
        if (bytesRead !== m.size) throw new ImageInvalidError(`${describe}: ${name} is cut short`);
        return buf;
      } finally {
        await fh.close();
      }
    },
    stream: (name) => {
      const m = member(name);
      if (m.size === 0) return (async function* () {})();
      return createReadStream(file, { start: m.offset, end: m.offset + m.size - 1, highWaterMark: 1 << 20 });
    },
    close: async () => {
      if (scratch) await fsp.rm(scratch, { force: true });
    },
  };
}

/** Resolve "." and ".." in a member name (inside the archive's own namespace: it cannot climb above its root). */
function normalizeName(name: string): string {
  const out: string[] = [];
  for (const part of name.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") out.pop();
    else out.push(part);
  }
  return out.join("/");
}

function directoryFiles(dir: string): ArchiveFiles {
  const pathOf = (name: string): string => {
    const clean = normalizeName(name);
    if (clean !== name.replace(/^\.\//, "")) throw new ImageInvalidError(`${dir}: unsafe name ${JSON.stringify(name)}`);
    return join(dir, clean);
  };
  const regular = (name: string): { path: string; size: number } => {
    const path = pathOf(name);
    const st = lstatSync(path, { throwIfNoEntry: false });
    if (!st) throw new ImageInvalidError(`${dir} has no ${name}`);
    if (!st.isFile()) throw new ImageInvalidError(`${dir}: ${name} is not a regular file (symlinks are refused)`);
    return { path, size: st.size };
  };
  return {
    describe: dir,
    has: (name) => lstatSync(pathOf(name), { throwIfNoEntry: false })?.isFile() ?? false,
    size: (name) => regular(name).size,
    read: async (name, max) => {
      const { path, size } = regular(name);
      if (size > max) throw new ImageInvalidError(`${dir}: ${name} is over ${max} bytes`);
      return fsp.readFile(path);
    },
    stream: (name) => createReadStream(regular(name).path, { highWaterMark: 1 << 20 }),
    close: async () => {},
  };
}
