/** Small filesystem and process helpers shared by the store and the node cache. */
import { randomBytes } from "node:crypto";
import { closeSync, fsync, openSync } from "node:fs";
import { processStartTime as procStartTime } from "../../sandbox/procfs.js";
import * as fsp from "node:fs/promises";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { run } from "../../util/run.js";
import { errCode } from "../../errors.js";

/** Every file, dir and symlink of a layer carries this mtime (2000-01-01T00:00:00Z); see README "mtimes". */
export const NORMALIZED_MTIME_SEC = 946684800;

let scratchBase: { pid: number; nonce: string } | undefined;
let scratchCount = 0;

/**
 * Unique scratch name carrying our pid, so leftovers of dead processes can be recognised: a random nonce drawn
 * once per process, then a hex counter (one name per object written, so no random bytes per name; readers match hex).
 */
export function scratchName(prefix: string): string {
  if (scratchBase?.pid !== process.pid) scratchBase = { pid: process.pid, nonce: randomBytes(6).toString("hex") };
  return `${prefix}-${scratchBase.pid}-${scratchBase.nonce}${(scratchCount++).toString(16)}`;
}

/**
 * Remove what writers that are gone left in a scratch dir (names from scratchName carry the pid): a pull killed
 * midway leaves the object it was writing. Entries of live processes (or that do not parse) are left alone.
 */
export async function sweepDeadScratch(dir: string): Promise<number> {
  let removed = 0;
  for (const name of await fsp.readdir(dir).catch(() => [] as string[])) {
    const pid = Number(/^[a-z-]+-(\d+)-[0-9a-f]{12}/.exec(name)?.[1]);
    if (!pid || processAlive(pid)) continue;
    await removeTree(join(dir, name));
    removed++;
  }
  return removed;
}

/** Start time of a process in clock ticks since boot, as recorded in lease and marker names; undefined if gone. */
export function processStartTime(pid: number): string | undefined {
  const ticks = procStartTime(pid);
  return ticks === undefined ? undefined : String(ticks);
}

/** Our own identity as recorded in leases and markers: pid plus start time, so a reused pid is not mistaken. */
export function selfIdentity(): { pid: number; startTime: string } {
  return { pid: process.pid, startTime: processStartTime(process.pid) ?? "0" };
}

/** Is this process alive? With startTime, also checks it is the same process (pids get reused). */
export function processAlive(pid: number, startTime?: string): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (e) {
    if (errCode(e) !== "EPERM") return false;
  }
  if (startTime === undefined || startTime === "0") return true;
  return processStartTime(pid) === startTime;
}

export async function exists(path: string): Promise<boolean> {
  try {
    await fsp.lstat(path);
    return true;
  } catch (e) {
    if (errCode(e) === "ENOENT") return false;
    throw e;
  }
}

export async function fsyncDir(dir: string): Promise<void> {
  await fsyncPath(dir);
}

/** Write a file so readers see either the old or the complete new content, also across a crash. */
export async function writeFileAtomic(
  path: string,
  data: string | Buffer,
  scratchDir: string,
  mode = 0o644,
): Promise<void> {
  const tmp = join(scratchDir, scratchName("write"));
  const fh = await fsp.open(tmp, "wx", mode);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await fsp.rename(tmp, path);
  } catch (e) {
    await fsp.rm(tmp, { force: true });
    throw e;
  }
  await fsyncDir(dirname(path));
}

/**
 * Flush every file written so far on the filesystem holding `path` (syncfs). One call after writing many
 * objects is far cheaper than an fsync per object, and it must precede writing the manifest that names them.
 */
export async function syncFilesystem(path: string): Promise<void> {
  const r = await run("sync", ["-f", path]);
  if (r.code !== 0) await run("sync", []);
}

/** Up to this many new files are fsynced one by one (with their directories); more take one syncfs. */
const FSYNC_EACH_MAX = 64;

/**
 * Make `files` durable before a record names them. A few (a repository's next image brings a handful of new
 * files) are fsynced one by one, so that nothing else written on the filesystem — another tool's gigabytes — is
 * waited for; many take one syncfs, far cheaper than thousands of fsyncs.
 */
export async function syncFiles(files: readonly string[], fsPath: string): Promise<void> {
  if (files.length > FSYNC_EACH_MAX) return syncFilesystem(fsPath);
  try {
    await fsyncAll([...files, ...new Set(files.map((f) => dirname(f)))]);
  } catch {
    await syncFilesystem(fsPath); // a file we may not open (an image's mode 000 one, unprivileged)
  }
}

/**
 * fsync of every path at once: all are opened first, so that the syncs then run on the thread pool without this
 * thread's help (it may be busy meanwhile: a root filesystem is flattened while its last layer is synced).
 */
async function fsyncAll(paths: readonly string[]): Promise<void> {
  const fds: number[] = [];
  try {
    for (const p of paths) fds.push(openSync(p, "r"));
    const synced = await Promise.allSettled(
      fds.map((fd) => new Promise<void>((ok, no) => fsync(fd, (e) => (e ? no(e) : ok())))),
    );
    const failed = synced.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) throw failed.reason;
  } finally {
    for (const fd of fds) closeSync(fd);
  }
}

async function fsyncPath(path: string): Promise<void> {
  const fh = await fsp.open(path, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** rm -rf that also works on read-only trees when we are not root (dirs 0555 forbid unlinking children). */
export async function removeTree(path: string): Promise<void> {
  try {
    await fsp.rm(path, { recursive: true, force: true });
    return;
  } catch (e) {
    const code = errCode(e);
    if (code !== "EACCES" && code !== "EPERM") throw e;
  }
  await makeDirsWritable(path);
  await fsp.rm(path, { recursive: true, force: true });
}

async function makeDirsWritable(path: string): Promise<void> {
  try {
    if (!(await fsp.lstat(path)).isDirectory()) return;
    await fsp.chmod(path, 0o700);
    for (const name of await fsp.readdir(path)) await makeDirsWritable(join(path, name));
  } catch (e) {
    if (errCode(e) !== "ENOENT") throw e;
  }
}

/** Run fn over items with at most `limit` in flight; rejects with the first error once in-flight work settles. */
export async function mapLimit<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failed: { error: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        await fn(items[i]!, i);
      } catch (error) {
        failed ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  if (failed) throw failed.error;
}

/**
 * For loops of many tiny synchronous fs calls (3-4x faster than fs/promises for small files): returns a
 * function to await between items; it yields to the event loop once every `sliceMs` so servers stay responsive.
 */
export function yielder(sliceMs = 10): () => Promise<void> {
  let last = performance.now();
  return async () => {
    if (performance.now() - last < sliceMs) return;
    await new Promise<void>((r) => setImmediate(r));
    last = performance.now();
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
