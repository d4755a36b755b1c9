import { readFileSync, readdirSync } from "node:fs";

/** Start time of a process (clock ticks since boot), used to tell a live process from a reused pid. */
export function processStartTime(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[19]);
  } catch {
    return undefined;
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
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(name));
      children.set(ppid, list);
    } catch {
      /* exited meanwhile */
    }
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
