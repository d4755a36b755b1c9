/**
 * A small zip writer (deflate, Unix modes, symlinks, UTF-8 names; no ZIP64, so under 4 GiB and 65535 entries):
 * what `/upload` with `unzip=true` expects, as SWE-ReX's client sends it (`shutil.make_archive`).
 */
import { lstatSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { crc32, deflateRawSync } from "node:zlib";

export interface ZipEntry {
  /** Path inside the archive ("a/b.txt"; directories may end with "/"). Not validated: tests build bad ones. */
  name: string;
  type?: "file" | "dir" | "symlink";
  /** File bytes, or the link target for a symlink. */
  data?: Buffer | string;
  /** Permission bits (default 0o644 files, 0o755 dirs, 0o777 links). */
  mode?: number;
}

export function buildZip(entries: ZipEntry[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  if (entries.length > 0xffff) throw new Error("too many entries for a zip without ZIP64");
  for (const e of entries) {
    const type = e.type ?? (e.name.endsWith("/") ? "dir" : "file");
    const name = Buffer.from(type === "dir" && !e.name.endsWith("/") ? `${e.name}/` : e.name, "utf8");
    const raw = typeof e.data === "string" ? Buffer.from(e.data, "utf8") : (e.data ?? Buffer.alloc(0));
    const deflate = type === "file" && raw.length > 64;
    const body = deflate ? deflateRawSync(raw) : raw;
    if (offset + body.length > 0xffffffff) throw new Error("archive too large for a zip without ZIP64");
    const fmt = type === "dir" ? 0o040000 : type === "symlink" ? 0o120000 : 0o100000;
    const mode = fmt | (e.mode ?? (type === "dir" ? 0o755 : type === "symlink" ? 0o777 : 0o644));
    const crc = crc32(raw);
    const method = deflate ? 8 : 0;
    const flags = 0x0800; // UTF-8 names
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(flags, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt16LE(0, 10); // time
    local.writeUInt16LE(0x21, 12); // date: 1980-01-01
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(body.length, 18);
    local.writeUInt32LE(raw.length, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(0, 28);
    locals.push(local, name, body);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE((3 << 8) | 20, 4); // made by: Unix
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(flags, 8);
    central.writeUInt16LE(method, 10);
    central.writeUInt16LE(0, 12);
    central.writeUInt16LE(0x21, 14);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(body.length, 20);
    central.writeUInt32LE(raw.length, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt16LE(0, 30);
    central.writeUInt16LE(0, 32);
    central.writeUInt16LE(0, 34);
    central.writeUInt16LE(0, 36);
    central.writeUInt32LE(((mode << 16) | (type === "dir" ? 0x10 : 0)) >>> 0, 38);
    central.writeUInt32LE(offset, 42);
    centrals.push(central, name);
    offset += local.length + name.length + body.length;
  }
  const cd = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}

/** Zip a host directory (its contents, not the directory itself); symlinks are stored as links. */
export function zipDirectory(dir: string): Buffer {
  const entries: ZipEntry[] = [];
  const walk = (rel: string): void => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const abs = join(dir, r);
      const st = lstatSync(abs);
      if (st.isSymbolicLink()) entries.push({ name: r, type: "symlink", data: readlinkSync(abs) });
      else if (st.isDirectory()) {
        entries.push({ name: `${r}/`, type: "dir", mode: st.mode & 0o777 });
        walk(r);
      } else if (st.isFile()) entries.push({ name: r, type: "file", data: readFileSync(abs), mode: st.mode & 0o777 });
    }
  };
  walk("");
  return buildZip(entries);
}
