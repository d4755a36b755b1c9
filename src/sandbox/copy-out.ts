import { lstatSync, mkdirSync, rmSync, symlinkSync } from "node:fs";
import { open, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { InvalidInputError, LimitError, SandboxError, TarFormatError } from "../errors.js";
import { readTar, type TarHeader } from "../util/tar.js";

/** What a copy out of a sandbox wrote, and what it refused to. */
export interface CopyOutReport {
  files: number;
  dirs: number;
  symlinks: number;
  bytes: number;
  /** Entries that are not data (devices, FIFOs, sockets...), by path inside the archive. */
  skipped: { path: string; kind: string }[];
}

/** Permission bits that may leave a sandbox: rwx for owner, group, other. Never setuid, setgid or sticky. */
const DATA_MODE = 0o777;
/** What an entry costs the host besides its data (a header; a directory takes a block): counted against the cap. */
const ENTRY_COST = 512;
const DIR_COST = 4096;

function newReport(): CopyOutReport & { cost: number } {
  return { files: 0, dirs: 0, symlinks: 0, bytes: 0, skipped: [], cost: 0 };
}

/** A relative path inside the target, or undefined for the archive's root entry; `..` and absolute names refused. */
function entryPath(name: Buffer): string | undefined {
  const text = name.toString("utf8");
  if (text.includes("\0")) throw new InvalidInputError("archive entry with a NUL in its name");
  const parts = text.split("/").filter((p) => p !== "" && p !== ".");
  if (text.startsWith("/") || parts.includes("..")) throw new InvalidInputError(`unsafe archive entry ${text}`);
  return parts.length ? parts.join("/") : undefined;
}

/** No component below `root` may be a symlink: an earlier entry must never redirect a later write. */
function checkParents(root: string, rel: string): void {
  const parts = rel.split("/");
  let at = root;
  for (const part of parts.slice(0, -1)) {
    at = join(at, part);
    const st = lstatSync(at, { throwIfNoEntry: false });
    if (!st) mkdirSync(at, { mode: 0o755 });
    else if (!st.isDirectory() || st.isSymbolicLink()) throw new InvalidInputError(`archive writes through ${at}`);
  }
}

type Tally = CopyOutReport & { cost: number };

async function writeEntry(root: string, h: TarHeader, body: AsyncIterable<Buffer>, r: Tally, max: number) {
  r.cost += ENTRY_COST + (h.kind === "dir" ? DIR_COST : 0) + (h.kind === "file" ? h.size : 0);
  if (r.cost > max) throw new LimitError(`copy out: more than ${max} bytes (entries count too)`);
  const rel = entryPath(h.name);
  if (rel === undefined) return;
  checkParents(root, rel);
  const target = join(root, rel);
  if (h.kind === "dir") {
    if (!lstatSync(target, { throwIfNoEntry: false })) mkdirSync(target, { mode: (h.mode & DATA_MODE) | 0o700 });
    r.dirs++;
  } else if (h.kind === "symlink") {
    rmSync(target, { force: true });
    symlinkSync(h.linkName.toString("utf8"), target);
    r.symlinks++;
  } else if (h.kind === "file") {
    rmSync(target, { force: true });
    // wx: a fresh file, never an existing one (or whatever a symlink there would point at).
    const fh = await open(target, "wx", h.mode & DATA_MODE);
    try {
      for await (const chunk of body) {
        r.bytes += chunk.length;
        await fh.write(chunk);
      }
    } finally {
      await fh.close();
    }
    r.files++;
  } else {
    r.skipped.push({ path: rel, kind: h.kind });
  }
}

export const extractUntrusted = {
  /** One regular file's bytes (already bounded) written at `hostTarget`, parents created. */
  async singleFile(bytes: Buffer, hostTarget: string): Promise<CopyOutReport> {
    mkdirSync(dirname(hostTarget), { recursive: true });
    rmSync(hostTarget, { force: true });
    await writeFile(hostTarget, bytes, { flag: "wx", mode: 0o644 });
    return { files: 1, dirs: 0, symlinks: 0, bytes: bytes.length, skipped: [] };
  },

  /**
   * A tar stream made inside a sandbox, extracted under `hostTarget` by reading it ourselves: nothing but regular
   * files, directories and symlinks is created, nothing is written through a symlink, nothing keeps the sandbox's
   * ownership or special permission bits, and more than `max` bytes of file data stops the copy.
   */
  async tree(stream: Readable, hostTarget: string, max: number, label: string): Promise<CopyOutReport> {
    mkdirSync(hostTarget, { recursive: true });
    const tally = newReport();
    try {
      await readTar(stream, (h, body) => writeEntry(hostTarget, h, body, tally, max));
    } catch (e) {
      if (e instanceof TarFormatError) throw new SandboxError(`copy of ${label} failed: ${e.message}`);
      throw e;
    }
    const { cost: _cost, ...report } = tally;
    return report;
  },
};
