import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runOk } from "../util/run.js";
import { systemEntries } from "./host.js";
import { isSameProcessAlive, processStartTime } from "./procfs.js";

/** The writable places of a sandbox, as its scratch holds them. Overlays' upper dirs are under `upper/<i>`. */
export const WRITABLE_PLACES = ["upper", "root", "tmp", "home", "shm"] as const;

/**
 * A copy of a sandbox's writable state, from which forks start: its overlays' upper dirs become their topmost
 * lowers (already in the sandbox's ids), its `/`, /tmp, home and /dev/shm seed their scratch. Reference-counted: it
 * is removed when the last sandbox started from it closes (or, after a crash, by the reaper).
 */
export class Snapshot {
  private refs = 1;
  private constructor(readonly dir: string) {}

  /** Copy the writable places of a running sandbox, read through its launcher's mount namespace. */
  static async take(snapshotsDir: string, name: string, holderPid: number, scratch: string): Promise<Snapshot> {
    const dir = join(snapshotsDir, name);
    // Walkable (not readable) by others: the fork's root, an unprivileged host uid, seeds itself from it.
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    writeFileSync(join(dir, ".owner"), JSON.stringify({ pid: process.pid, start: processStartTime(process.pid) }));
    const from = `/proc/${holderPid}/root${scratch}`;
    try {
      // -a never follows a symlink; the sandbox is frozen meanwhile, so nothing can be swapped under the copy.
      await runOk("cp", ["-a", "--", ...WRITABLE_PLACES.map((p) => `${from}/${p}`), dir]);
      // The merged-/usr symlinks bwrap put in `/` are made again for the fork (bwrap will not overwrite them).
      for (const e of systemEntries()) if (e.symlinkTo) rmSync(join(dir, "root", e.path), { force: true });
    } catch (e) {
      rmSync(dir, { recursive: true, force: true });
      throw e;
    }
    return new Snapshot(dir);
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
