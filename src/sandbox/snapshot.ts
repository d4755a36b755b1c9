import {
  chmodSync,
  chownSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statfsSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { LimitError } from "../errors.js";
import { runOk } from "../util/run.js";
import { systemEntries } from "./host.js";
import { isSameProcessAlive, processStartTime } from "./procfs.js";

/** The writable places of a sandbox, as its scratch holds them. Overlays' upper dirs are under `upper/<i>`. */
export const WRITABLE_PLACES = ["upper", "root", "tmp", "home", "shm"] as const;

/** Where a running sandbox's writable places are read from, and whose ids its files carry. */
export interface SnapshotSource {
  /** The launcher (holder) process: the scratch is read through its mount namespace. */
  holderPid: number;
  scratch: string;
  /** Root mode: the first host id of the sandbox's range, which owns every file copied. */
  owner?: number;
}

/** Disk a snapshot leaves free on the host: 5% of the filesystem, at most 1 GiB. */
export function diskReserve(totalBytes: number): number {
  return Math.min(1024 ** 3, Math.floor(totalBytes / 20));
}

/** Bytes being copied into snapshots right now, per filesystem (so that concurrent forks cannot overbook it). */
const booked = new Map<string, number>();

/**
 * A copy of a sandbox's writable state, from which forks start: its overlays' upper dirs become their topmost
 * lowers, its `/`, /tmp, home and /dev/shm seed their scratch. Written in owner-only directories, never with a
 * setuid or setgid bit or a file capability, and only when it fits in the host's free disk (it is at most the
 * sandbox's disk budget: a copy of the scratch's used blocks). Reference-counted: it is removed when the last sandbox
 * started from it closes (or, after a crash, by the reaper).
 */
export class Snapshot {
  private refs = 1;
  private constructor(
    readonly dir: string,
    /** The first host id of the range that owns its files (root mode). */
    readonly owner: number | undefined,
  ) {}

  /** Copy the writable places of a running (frozen) sandbox. */
  static async take(snapshotsDir: string, name: string, src: SnapshotSource): Promise<Snapshot> {
    const from = `/proc/${src.holderPid}/root${src.scratch}`;
    // Owner-only all the way: nothing of a sandbox's is for other local users to walk, run or read.
    mkdirSync(snapshotsDir, { recursive: true, mode: 0o700 });
    chmodSync(snapshotsDir, 0o700);
    const bytes = bookSpace(from, snapshotsDir);
    const dir = join(snapshotsDir, name);
    try {
      mkdirSync(dir, { mode: 0o700 });
      // Its own root, so that the fork's launch can walk it as the sandbox's (the directory above is root's alone).
      if (src.owner !== undefined) chownSync(dir, src.owner, src.owner);
      writeFileSync(join(dir, ".owner"), JSON.stringify({ pid: process.pid, start: processStartTime(process.pid) }));
      // -a never follows a symlink; the sandbox is frozen meanwhile, so nothing can be swapped under the copy.
      await runOk("cp", ["-a", "--", ...WRITABLE_PLACES.map((p) => `${from}/${p}`), dir]);
      // The merged-/usr symlinks bwrap put in `/` are made again for the fork (bwrap will not overwrite them).
      for (const e of systemEntries()) if (e.symlinkTo) rmSync(join(dir, "root", e.path), { force: true });
      for (const place of WRITABLE_PLACES) dropPrivileges(join(dir, place));
    } catch (e) {
      rmSync(dir, { recursive: true, force: true });
      throw e;
    } finally {
      booked.set(snapshotsDir, (booked.get(snapshotsDir) ?? 0) - bytes);
    }
    return new Snapshot(dir, src.owner);
  }

  upper(index: number): string {
    return join(this.dir, "upper", String(index));
  }

  acquire(): this {
    this.refs++;
    return this;
  }

  release(): void {
    if (--this.refs === 0) rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * The scratch's used bytes, booked against the free disk of the snapshots' filesystem (less its reserve and what
 * other snapshots in progress booked); a LimitError when they do not fit.
 */
function bookSpace(scratch: string, snapshotsDir: string): number {
  const s = statfsSync(scratch);
  const used = (s.blocks - s.bfree) * s.bsize;
  const d = statfsSync(snapshotsDir);
  const free = d.bavail * d.bsize - diskReserve(d.blocks * d.bsize) - (booked.get(snapshotsDir) ?? 0);
  if (used > free) {
    const mib = (n: number): string => `${Math.max(0, Math.round(n / 1024 ** 2))} MiB`;
    throw new LimitError(
      `fork: this sandbox's writable state (${mib(used)}) does not fit in the host's free disk for snapshots ` +
        `(${mib(free)} at ${snapshotsDir}, after what is kept free); free some disk or fork a smaller sandbox`,
    );
  }
  booked.set(snapshotsDir, (booked.get(snapshotsDir) ?? 0) + used);
  return used;
}

/**
 * Nothing in a snapshot may grant privileges on the host: setuid and setgid bits are cleared and file capabilities
 * removed (a chown by root drops `security.capability`, and the setuid/setgid bits of a file with it), links never
 * followed.
 */
function dropPrivileges(path: string): void {
  const st = lstatSync(path, { throwIfNoEntry: false });
  if (!st || st.isSymbolicLink()) return;
  if (st.isFile()) lchownSync(path, st.uid, st.gid);
  if (st.mode & 0o6000) chmodSync(path, st.mode & 0o1777);
  if (st.isDirectory()) for (const name of readdirSync(path)) dropPrivileges(join(path, name));
}

/** Snapshots whose owning process died (after a SIGKILL): nothing can use them any more. */
export function reapSnapshots(snapshotsDir: string): string[] {
  const removed: string[] = [];
  let names: string[] = [];
  try {
    names = readdirSync(snapshotsDir);
  } catch {
    return removed;
  }
  for (const name of names) {
    const dir = join(snapshotsDir, name);
    try {
      const owner = JSON.parse(readFileSync(join(dir, ".owner"), "utf8")) as { pid: number; start?: number };
      if (isSameProcessAlive(owner.pid, owner.start)) continue;
    } catch {
      // No owner file yet: a snapshot being taken right now, unless it is old.
      try {
        if (Date.now() - statSync(dir).mtimeMs < 60_000) continue;
      } catch {
        continue;
      }
    }
    rmSync(dir, { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
}
