/**
 * Cross-process file locks with kernel flock(2) semantics, via util-linux `flock(1)` (Node has no flock).
 * A small child holds the lock until we close its stdin; if this process dies, the pipe closes and the kernel
 * releases the lock — no stale lock files to detect or break. Costs one spawn (~10 ms): use on cold paths only.
 */
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { TimeoutError } from "../../errors.js";

export interface FileLock {
  readonly path: string;
  release(): Promise<void>;
}

export interface LockOptions {
  /** Shared (reader) lock instead of exclusive. */
  shared?: boolean;
  /** Give up after this long (default: wait 10 minutes). */
  timeoutMs?: number;
}

const BUSY_EXIT = 75;

/** Wait for the lock; throws TimeoutError after timeoutMs. */
export async function lockFile(path: string, opts: LockOptions = {}): Promise<FileLock> {
  const timeoutMs = opts.timeoutMs ?? 600_000;
  const lock = await spawnLock(path, opts.shared ?? false, ["-w", String(timeoutMs / 1000)]);
  if (!lock) throw new TimeoutError(`timed out after ${timeoutMs} ms waiting for lock ${path}`);
  return lock;
}

/** Take the lock only if it is free right now; null when another holder has it. */
export function tryLockFile(path: string, opts: Pick<LockOptions, "shared"> = {}): Promise<FileLock | null> {
  return spawnLock(path, opts.shared ?? false, ["-n"]);
}

function spawnLock(path: string, shared: boolean, waitArgs: string[]): Promise<FileLock | null> {
  mkdirSync(dirname(path), { recursive: true });
  const args = [
    shared ? "-s" : "-x",
    ...waitArgs,
    "-E",
    String(BUSY_EXIT),
    path,
    "sh",
    "-c",
    "echo locked; exec cat >/dev/null",
  ];
  const child = spawn("flock", args, { stdio: ["pipe", "pipe", "pipe"] });
  const exited = new Promise<number | null>((r) => child.once("close", (code) => r(code)));
  return new Promise<FileLock | null>((resolve, reject) => {
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    child.once("error", (e) => reject(new Error(`cannot run flock(1) for ${path}: ${e.message}`)));
    child.stdout.once("data", () => {
      // Held: stop this child from keeping the event loop alive; our exit closes its stdin and frees the lock.
      const streams = [child.stdin, child.stdout, child.stderr] as unknown as {
        ref?: () => void;
        unref?: () => void;
      }[];
      child.unref();
      for (const s of streams) s.unref?.();
      let released = false;
      resolve({
        path,
        async release() {
          if (released) return;
          released = true;
          // Keep the loop alive until the child is gone, or `await release()` could end the process early.
          child.ref();
          for (const s of streams) s.ref?.();
          child.stdin.end();
          await exited;
        },
      });
    });
    void exited.then((code) => {
      if (code === BUSY_EXIT) resolve(null);
      else reject(new Error(`flock ${path} failed (exit ${code}): ${stderr.trim()}`));
    });
  });
}
