import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { allCgroupDirs, isLeftover, killSandboxCgroups, listSandboxCgroups, removeSandboxCgroups } from "./limits.js";
import { isSameProcessAlive, killQuietly } from "./procfs.js";
import { homeLayout } from "../util/home.js";
import { RUNTIME_DIR, RUNTIME_HOMES_DIR, readState, removeSandboxDirs, runtimeDirFor, sandboxPaths } from "./state.js";

export interface ReapReport {
  sandboxes: string[];
  cgroups: string[];
  /** Fork snapshots on disk whose owner died (forks of older versions wrote them; forks now copy in memory). */
  snapshots: string[];
}

/** Everything a home's dead owners left: sandboxes (processes, cgroups, scratch) and old fork snapshots. */
export async function reapHome(home: string): Promise<ReapReport> {
  const report = await reapLeftovers(homeLayout(home).sandboxes);
  report.snapshots = reapSnapshots(join(home, "snapshots"));
  return report;
}

const GRACE_MS = 60_000;

/**
 * Removes what sandboxes of dead owners left behind: their processes (should the kernel not have killed them
 * already), cgroups and scratch directories. Safe to run while other processes own live sandboxes in the same home.
 */
export async function reapLeftovers(sandboxesDir: string): Promise<ReapReport> {
  const report: ReapReport = { sandboxes: [], cgroups: [], snapshots: [] };
  let ids: string[] = [];
  try {
    ids = readdirSync(sandboxesDir);
  } catch {
    /* no home yet */
  }
  for (const id of ids) {
    const paths = sandboxPaths(sandboxesDir, id);
    const state = readState(paths);
    if (state && isSameProcessAlive(state.ownerPid, state.ownerStart)) continue;
    // A sandbox still starting has no state yet: give it time.
    if (!state && isYoung(paths.dir)) continue;
    if (state) {
      // By pid only while it is the same process: a pid the kernel reused may be anyone's, a neighbour's included.
      if (isSameProcessAlive(state.holderPid, state.holderStart)) killQuietly(state.holderPid);
      if (state.pid1Start !== undefined && isSameProcessAlive(state.pid1, state.pid1Start)) killQuietly(state.pid1);
      await killSandboxCgroups(state.cgroups);
    }
    unmountUnder(paths.dir);
    unmountUnder(paths.scratch);
    await removeSandboxDirs(paths);
    report.sandboxes.push(id);
  }
  // Root-mode scratch mount points whose sandbox directory is gone (a crash between the two removals).
  const runtime = runtimeDirFor(sandboxesDir);
  for (const id of existsSync(runtime) ? readdirSync(runtime) : []) {
    if (existsSync(join(sandboxesDir, id)) || isYoung(join(runtime, id))) continue;
    rmSync(join(runtime, id), { recursive: true, force: true });
    report.sandboxes.push(id);
  }
  if (process.getuid?.() === 0) report.sandboxes.push(...reapRemovedHomes());
  // Cgroups of sandboxes that are gone (any home's: an owner that died before its home was reaped, a removal cut
  // short). Each sandbox's groups are judged together: one group alone can be empty while its sandbox lives.
  for (const [id, groups] of listSandboxCgroups()) {
    if (existsSync(join(sandboxesDir, id))) continue;
    if (allCgroupDirs(groups).some(isYoung) || !isLeftover(groups)) continue;
    removeSandboxCgroups(groups);
    report.cgroups.push(...allCgroupDirs(groups).filter((dir) => !existsSync(dir)));
  }
  return report;
}

/**
 * Runtime directories of homes that no longer exist (removed after their owner died): no start of theirs will ever
 * reap them, so any home's start does. Only what lies under the runtime directory is touched, and only when its home,
 * its record and everything in it are older than the grace (a home being made has its directory by then).
 */
function reapRemovedHomes(): string[] {
  const removed: string[] = [];
  for (const name of existsSync(RUNTIME_HOMES_DIR) ? readdirSync(RUNTIME_HOMES_DIR) : []) {
    const record = join(RUNTIME_HOMES_DIR, name);
    let sandboxesDir: string;
    try {
      sandboxesDir = readFileSync(record, "utf8");
    } catch {
      continue;
    }
    const runtime = join(RUNTIME_DIR, name);
    if (runtimeDirFor(sandboxesDir) !== runtime || existsSync(sandboxesDir) || isYoung(record)) continue;
    const entries = existsSync(runtime) ? readdirSync(runtime) : [];
    if (isYoungIfThere(runtime) || entries.some((id) => isYoung(join(runtime, id)))) continue;
    unmountUnder(runtime);
    rmSync(runtime, { recursive: true, force: true });
    rmSync(record, { force: true });
    removed.push(...entries);
  }
  return removed;
}

function isYoungIfThere(path: string): boolean {
  return existsSync(path) && isYoung(path);
}

/** Made within the grace: a sandbox still starting (pid 1 not in its groups yet), or a snapshot being taken. */
function isYoung(path: string): boolean {
  try {
    return Date.now() - statSync(path).mtimeMs < GRACE_MS;
  } catch {
    return true;
  }
}

/** Mounts are made in private namespaces and never reach the host; this is a safety net should one ever appear. */
function unmountUnder(dir: string): void {
  let mounts: string[] = [];
  try {
    mounts = readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[4] ?? "")
      .filter((m) => m === dir || m.startsWith(`${dir}/`));
  } catch {
    return;
  }
  for (const m of mounts.sort((a, b) => b.length - a.length)) spawnSync("umount", ["-l", m]);
}

/** Snapshots (of older versions' forks) whose owning process died: nothing can use them any more. */
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
      if (isYoung(dir)) continue;
    }
    rmSync(dir, { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
}
