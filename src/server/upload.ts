/**
 * Archive uploads (`/upload` with `unzip=true`). Every entry is validated before anything is written: names that
 * are absolute or contain `..`, duplicates, paths through a symlink entry, symlinks whose target leaves the
 * archive root, encrypted entries and archives over the size budget are rejected, naming the offending entries.
 * A valid archive is then extracted into a fresh host temp dir (exclusive creates, symlinks last), from where the
 * caller copies it into the sandbox through `sandbox.files`.
 */
import { createWriteStream, mkdirSync, statSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { Readable } from "node:stream";
import * as yauzl from "yauzl";
import { MinisandboxError } from "../errors.js";
import { PyError, pyRepr } from "./pycompat.js";

export interface ZipLimits {
  /** Sum of uncompressed sizes. */
  maxUnpackedBytes: number;
  maxEntries: number;
  /** Unpacked bytes per byte of archive, above `ratioFloorBytes` (a zip bomb unpacks to ~1000x its size). */
  maxRatio: number;
  ratioFloorBytes: number;
}

export const DEFAULT_ZIP_LIMITS: ZipLimits = {
  maxUnpackedBytes: 1024 ** 3,
  maxEntries: 10_000,
  maxRatio: 100,
  ratioFloorBytes: 16 * 1024 ** 2,
};

interface PlannedEntry {
  entry: yauzl.Entry;
  /** Normalized relative path ("a/b"). */
  path: string;
  type: "file" | "dir" | "symlink";
  mode: number;
  linkTarget?: string;
}

const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;
const S_IFDIR = 0o040000;

function rejected(problems: string[], code = "invalid_input"): PyError {
  const shown = problems.slice(0, 10).join("; ") + (problems.length > 10 ? `; … (${problems.length - 10} more)` : "");
  return new PyError("builtins.ValueError", `upload rejected, nothing was extracted: ${shown}`, {}, code);
}

async function readSmall(zip: yauzl.ZipFile, entry: yauzl.Entry, max: number): Promise<string> {
  const stream: Readable = await zip.openReadStreamPromise(entry);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of stream as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > max) {
      stream.destroy();
      throw rejected([`symlink ${pyRepr(entry.fileNameRaw.toString("utf8"))} has a target longer than ${max} bytes`]);
    }
    chunks.push(c);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** Where a relative symlink target lands, following other symlinks of the archive; null if it leaves the root. */
function resolveInside(fromDir: string[], target: string, links: Map<string, string>): string[] | null {
  let budget = 40;
  const walk = (base: string[], rel: string): string[] | null => {
    if (rel.startsWith("/")) return null;
    const stack = [...base];
    for (const part of rel.split("/")) {
      if (part === "" || part === ".") continue;
      if (part === "..") {
        if (stack.length === 0) return null;
        stack.pop();
        continue;
      }
      stack.push(part);
      const t = links.get(stack.join("/"));
      if (t !== undefined) {
        if (--budget < 0) return null;
        stack.pop();
        const r = walk(stack, t);
        if (!r) return null;
        stack.splice(0, stack.length, ...r);
      }
    }
    return stack;
  };
  return walk(fromDir, target);
}

/** What an archive of `archiveBytes` may unpack to, and why. */
function unpackBudget(limits: ZipLimits, archiveBytes: number): { bytes: number; why: string } {
  const byRatio = Math.max(limits.ratioFloorBytes, limits.maxRatio * archiveBytes);
  if (byRatio < limits.maxUnpackedBytes)
    return { bytes: byRatio, why: `${limits.maxRatio} times its ${archiveBytes} bytes (expansion limit)` };
  return { bytes: limits.maxUnpackedBytes, why: `${limits.maxUnpackedBytes} bytes` };
}

/** Read and validate every entry of the zip at `file`; throws PyError (ValueError / BadZipFile) on any problem. */
async function plan(
  zip: yauzl.ZipFile,
  limits: ZipLimits,
  archiveBytes: number,
): Promise<{ entries: PlannedEntry[]; total: number }> {
  const entries: PlannedEntry[] = [];
  const problems: string[] = [];
  const budget = unpackBudget(limits, archiveBytes);
  let total = 0;
  const seen = new Set<string>();
  for await (const entry of zip.eachEntry()) {
    if (entries.length >= limits.maxEntries)
      throw rejected([`more than ${limits.maxEntries} entries`], "upload_too_large");
    const raw = yauzl.getFileNameLowLevel(entry.generalPurposeBitFlag, entry.fileNameRaw, entry.extraFields, true);
    const shown = pyRepr(raw);
    const unixMode = entry.versionMadeBy >> 8 === 3 ? entry.externalFileAttributes >>> 16 : 0;
    const isDir = raw.endsWith("/") || (unixMode & S_IFMT) === S_IFDIR;
    const isLink = (unixMode & S_IFMT) === S_IFLNK;
    if (raw.includes("\0")) problems.push(`entry ${shown} has a NUL byte in its name`);
    if (raw.startsWith("/")) problems.push(`entry ${shown} is an absolute path`);
    const parts = raw.split("/").filter((p) => p !== "" && p !== ".");
    if (parts.includes("..")) problems.push(`entry ${shown} contains '..' and would be written outside the target`);
    if (entry.isEncrypted()) problems.push(`entry ${shown} is encrypted`);
    const path = parts.join("/");
    if (path === "" && !isDir) problems.push(`entry ${shown} has an empty name`);
    if (path !== "" && seen.has(path)) problems.push(`entry ${shown} appears twice`);
    seen.add(path);
    total += entry.uncompressedSize;
    if (total > budget.bytes) throw rejected([`archive unpacks to more than ${budget.why}`], "upload_too_large");
    const planned: PlannedEntry = {
      entry,
      path,
      type: isLink ? "symlink" : isDir ? "dir" : "file",
      mode: unixMode & 0o777,
    };
    if (isLink && !problems.length) planned.linkTarget = await readSmall(zip, entry, 4096);
    if (path !== "") entries.push(planned);
  }
  const links = new Map(entries.filter((e) => e.type === "symlink").map((e) => [e.path, e.linkTarget ?? ""]));
  for (const e of entries) {
    const parts = e.path.split("/");
    for (let i = 1; i < parts.length; i++) {
      const prefix = parts.slice(0, i).join("/");
      if (links.has(prefix)) problems.push(`entry ${pyRepr(e.path)} lies under the symlink entry ${pyRepr(prefix)}`);
    }
    if (e.type === "symlink") {
      const t = e.linkTarget ?? "";
      if (t === "" || t.includes("\0")) problems.push(`symlink ${pyRepr(e.path)} has an invalid target`);
      else if (t.startsWith("/")) problems.push(`symlink ${pyRepr(e.path)} points to the absolute path ${pyRepr(t)}`);
      else if (!resolveInside(parts.slice(0, -1), t, links))
        problems.push(`symlink ${pyRepr(e.path)} -> ${pyRepr(t)} points outside the target`);
    }
  }
  if (problems.length) throw rejected(problems);
  return { entries, total };
}

/**
 * Validate the zip at `file` completely, then extract it into `dest` (an empty host directory the caller made).
 * Nothing is written when validation fails. Declared sizes are checked against the budget before anything is
 * written, and yauzl checks every entry's real size against its declared one while extracting.
 */
export async function extractZipChecked(
  file: string,
  dest: string,
  limits: ZipLimits = DEFAULT_ZIP_LIMITS,
  beforeWrite?: (unpackedBytes: number) => void,
): Promise<number> {
  const archiveBytes = statSync(file).size;
  let zip: yauzl.ZipFile;
  try {
    zip = await yauzl.openPromise(file, {
      lazyEntries: true,
      decodeStrings: false,
      autoClose: false,
      validateEntrySizes: true,
    });
  } catch (e) {
    throw new PyError("zipfile.BadZipFile", `File is not a zip file (${(e as Error).message})`);
  }
  try {
    let entries: PlannedEntry[];
    try {
      const planned = await plan(zip, limits, archiveBytes);
      entries = planned.entries;
      beforeWrite?.(planned.total);
    } catch (e) {
      if (e instanceof MinisandboxError) throw e;
      throw new PyError("zipfile.BadZipFile", `Bad zip file: ${(e as Error).message}`);
    }
    for (const e of entries) {
      const target = join(dest, e.path);
      if (e.type === "dir") mkdirSync(target, { recursive: true, mode: e.mode ? e.mode | 0o700 : 0o755 });
    }
    for (const e of entries) {
      if (e.type !== "file") continue;
      const target = join(dest, e.path);
      mkdirSync(join(target, ".."), { recursive: true });
      const stream = await zip.openReadStreamPromise(e.entry);
      // "wx": never through an existing file or symlink.
      await pipeline(stream, createWriteStream(target, { flags: "wx", mode: e.mode || 0o644 }));
    }
    for (const e of entries) {
      if (e.type !== "symlink") continue;
      const target = join(dest, e.path);
      mkdirSync(join(target, ".."), { recursive: true });
      symlinkSync(e.linkTarget!, target);
    }
    return entries.length;
  } catch (e) {
    if (e instanceof MinisandboxError) throw e;
    throw new PyError("zipfile.BadZipFile", `Bad zip file: ${(e as Error).message}`);
  } finally {
    zip.close();
  }
}
