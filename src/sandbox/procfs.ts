import { readFileSync, readdirSync } from "node:fs";

/** A process's command name and the fields of /proc/<pid>/stat after it (field 3, the state, first), in one read. */
export function processStat(pid: number | string): { comm: string; fields: string[] } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    const end = stat.lastIndexOf(")");
    return { comm: stat.slice(stat.indexOf("(") + 1, end), fields: stat.slice(end + 2).split(" ") };
  } catch {
    return undefined;
  }
}

/** Fields of /proc/<pid>/stat after the command name; undefined once it exited. */
function statFields(pid: number | string): string[] | undefined {
  return processStat(pid)?.fields;
}

/** Start time of a process (clock ticks since boot), used to tell a live process from a reused pid. */
export function processStartTime(pid: number): number | undefined {
  const f = statFields(pid);
  return f ? Number(f[19]) : undefined;
}

export function parentPid(pid: number): number | undefined {
  const f = statFields(pid);
  return f ? Number(f[1]) : undefined;
}

/** The kernel's PF_EXITING: the task is on its way out (a killed namespace init stays so while it reaps the rest). */
const PF_EXITING = 0x4;

/**
 * The process is still running: not exiting (a killed namespace init stays so while it reaps the rest), not a
 * zombie, which `kill(pid, 0)` would still find.
 */
export function isRunning(pid: number): boolean {
  const f = statFields(pid);
  return f !== undefined && f[0] !== "Z" && f[0] !== "X" && (Number(f[6]) & PF_EXITING) === 0;
}

/** The process's command name ("" once it exited). */
export function commandName(pid: number | undefined): string {
  if (!pid) return "";
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
}

export function isSameProcessAlive(pid: number, startTime: number | undefined): boolean {
  const now = processStartTime(pid);
  return now !== undefined && (startTime === undefined || now === startTime);
}

/** Host pids of all descendants of `root` (not including it), from /proc. */
export function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const ppid = parentPid(Number(name));
    if (ppid === undefined) continue; // exited meanwhile
    const list = children.get(ppid) ?? [];
    list.push(Number(name));
    children.set(ppid, list);
  }
  const out: number[] = [];
  const stack = [...(children.get(root) ?? [])];
  while (stack.length) {
    const pid = stack.pop()!;
    out.push(pid);
    stack.push(...(children.get(pid) ?? []));
  }
  return out;
}

export function killQuietly(pid: number, signal: NodeJS.Signals = "SIGKILL"): void {
  try {
    process.kill(pid, signal);
  } catch {
    /* gone */
  }
}
