/**
 * What a live sandbox uses right now, read from the host's /proc and its cgroups (found from its pid 1): memory,
 * CPU time of its processes, how many there are, and what its newest process runs. Read-only; a sandbox that ends
 * meanwhile reads as zeros.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { cgroupTreePids } from "./limits.js";
import { processStat } from "./procfs.js";

export interface SandboxUsage {
  /** The memory cgroup's usage (processes, page cache, tmpfs writes); null without a memory cgroup. */
  memoryBytes: number | null;
  /** User + system CPU time of its live processes, in clock ticks (USER_HZ, 100 per second on Linux). */
  cpuTicks: number;
  processes: number;
  /** Command line of its newest process that is not the sandbox's own machinery ("" when idle). */
  command: string;
}

export const CLOCK_TICKS_PER_SECOND = 100;

/** The sandbox's own machinery: launcher, pid 1, the helpers that enter commands, a session's terminal. */
const MACHINERY = new Set(["bwrap", "sandbox-init", "msb-helper", "script"]);

/** Where a process's memory and pids cgroups are (cgroup v1), from /proc/<pid>/cgroup. */
export function cgroupDirsOf(pid: number): { memory?: string; pids?: string } {
  const out: { memory?: string; pids?: string } = {};
  let text = "";
  try {
    text = readFileSync(`/proc/${pid}/cgroup`, "utf8");
  } catch {
    return out;
  }
  for (const line of text.split("\n")) {
    const [, controllers, path] = line.split(":");
    if (!controllers || !path || path === "/") continue;
    for (const c of controllers.split(","))
      if (c === "memory" || c === "pids") out[c] = join("/sys/fs/cgroup", c, path);
  }
  return out;
}

function readNumber(path: string): number | null {
  try {
    return Number(readFileSync(path, "utf8").trim());
  } catch {
    return null;
  }
}

function commandLine(pid: number, max = 400): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0+$/, "").replace(/\0/g, " ").slice(0, max);
  } catch {
    return "";
  }
}

/** Usage of the sandbox whose cgroups are `dirs` (from `cgroupDirsOf(pid1)`, which does not change). */
export function sandboxUsage(dirs: { memory?: string; pids?: string }): SandboxUsage {
  const memoryBytes = dirs.memory ? readNumber(join(dirs.memory, "memory.usage_in_bytes")) : null;
  const pids = dirs.pids ? cgroupTreePids(dirs.pids) : [];
  let cpuTicks = 0;
  let processes = 0;
  const comms = new Map<number, { comm: string; ppid: number; start: number }>();
  for (const pid of pids) {
    const st = processStat(pid);
    if (!st) continue;
    const f = st.fields;
    processes++;
    cpuTicks += Number(f[11]) + Number(f[12]);
    comms.set(pid, { comm: st.comm, ppid: Number(f[1]), start: Number(f[19]) });
  }
  // A session's shell (the child of its terminal) is machinery too; what it runs is not.
  const isMachinery = (p: { comm: string; ppid: number }): boolean =>
    MACHINERY.has(p.comm) || comms.get(p.ppid)?.comm === "script";
  let newest: number | undefined;
  for (const [pid, p] of comms)
    if (!isMachinery(p) && (newest === undefined || p.start >= comms.get(newest)!.start)) newest = pid;
  return { memoryBytes, cpuTicks, processes, command: newest === undefined ? "" : commandLine(newest) };
}
