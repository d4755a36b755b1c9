import { createHash } from "node:crypto";
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { mkdir, rm, rmdir, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import type { SandboxCgroups } from "./limits.js";

/** What the reaper needs to clean a sandbox whose owner died: written when the sandbox starts. */
export interface SandboxState {
  id: string;
  ownerPid: number;
  ownerStart?: number;
  /** Host pid of the launcher (outer bwrap) and of the sandbox's pid 1. */
  holderPid: number;
  holderStart?: number;
  pid1: number;
  pid1Start?: number;
  /** The first host id of the sandbox's range (its root on the host). */
  hostUid: number;
  cgroups: SandboxCgroups;
  createdAt: string;
}

export interface SandboxPaths {
  dir: string;
  control: string;
  /** Mount point of the sandbox's scratch tmpfs (an empty directory on the host: the mount is private). */
  scratch: string;
  state: string;
}

/**
 * Root-mode scratch mount points live here, not in the home: root inside is an unprivileged host uid, which must be
 * able to walk the path to its scratch, and a home (e.g. under /root) need not be walkable by others.
 */
export const RUNTIME_DIR = "/run/minisandbox";

/** The runtime directory of one home's root-mode sandboxes. */
export function runtimeDirFor(sandboxesDir: string): string {
  return join(RUNTIME_DIR, createHash("sha256").update(sandboxesDir).digest("hex").slice(0, 16));
}

/**
 * Which home each runtime directory belongs to (`homes/<its name>` holds the sandboxes directory's path): the name is
 * a hash, and without this a home removed after a crash would leave its runtime directory to no reaper at all.
 */
export const RUNTIME_HOMES_DIR = join(RUNTIME_DIR, "homes");

export function sandboxPaths(sandboxesDir: string, id: string): SandboxPaths {
  const dir = join(sandboxesDir, id);
  const scratch = process.getuid?.() === 0 ? join(runtimeDirFor(sandboxesDir), id) : join(dir, "rw");
  return { dir, control: join(dir, "ctl"), scratch, state: join(dir, "state.json") };
}

export async function makeSandboxDirs(p: SandboxPaths): Promise<void> {
  const scratch = async (): Promise<void> => {
    for (let attempt = 0; ; attempt++) {
      try {
        return void (await mkdir(p.scratch, { mode: 0o755 }));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT" || attempt === 3) throw e;
      }
      // Its parent is missing: the first sandbox of its home (or of the process), or the home's last one just took
      // it (removeSandboxDirs). Root mode's runtime directories are walkable but not listable by others.
      const outside = !p.scratch.startsWith(`${p.dir}/`);
      await mkdir(dirname(p.scratch), { recursive: true, mode: outside ? 0o711 : 0o755 });
      if (outside) await registerRuntimeDir(dirname(p.scratch), dirname(p.dir));
    }
  };
  await Promise.all([mkdir(p.control, { recursive: true, mode: 0o755 }), scratch()]);
}

async function registerRuntimeDir(runtimeDir: string, sandboxesDir: string): Promise<void> {
  await mkdir(RUNTIME_HOMES_DIR, { recursive: true, mode: 0o700 });
  await writeFile(join(RUNTIME_HOMES_DIR, basename(runtimeDir)), sandboxesDir, { mode: 0o600 });
}

/**
 * Remove a sandbox's directories (state, control files, scratch mount point), off the event loop: each removal on a
 * busy disk takes milliseconds.
 */
export async function removeSandboxDirs(p: SandboxPaths): Promise<void> {
  await Promise.all([rm(p.dir, { recursive: true, force: true }), rm(p.scratch, { recursive: true, force: true })]);
  // Root mode: the home's runtime directory goes with its last sandbox (one still there keeps it: rmdir refuses; a
  // start racing this makes it again, see makeSandboxDirs).
  if (!p.scratch.startsWith(`${p.dir}/`)) await rmdir(dirname(p.scratch)).catch(() => undefined);
}

/**
 * Written in place (a few hundred bytes, no fsync: the page cache takes it at once), where two round trips through
 * the thread pool would cost a start more than the writes.
 */
export function writeState(p: SandboxPaths, state: SandboxState): void {
  const tmp = `${p.state}.tmp`;
  writeFileSync(tmp, JSON.stringify(state, null, 2));
  renameSync(tmp, p.state);
}

export function readState(p: SandboxPaths): SandboxState | undefined {
  try {
    return JSON.parse(readFileSync(p.state, "utf8")) as SandboxState;
  } catch {
    return undefined;
  }
}
