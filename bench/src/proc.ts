/** Host processes for the baselines: timed runs and memory of a sandbox's processes. */
import { spawn } from "node:child_process";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { cgroupTreePids } from "../../src/sandbox/limits.js";
import { parentPid } from "../../src/sandbox/procfs.js";

export interface TimedRun {
  /** Spawn -> first byte on stdout (NaN when nothing came). */
  firstOutputMs: number;
  /** Spawn -> exit. */
  exitMs: number;
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The clean environment every baseline command starts from (never the bench's own, which may set
 * PYTHONDONTWRITEBYTECODE). */
export const CLEAN_ENV: Record<string, string> = {
  PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  LANG: "C.UTF-8",
  HOME: "/root",
};

export function timedRun(
  cmd: string,
  args: readonly string[],
  opts: { env?: Record<string, string>; input?: string; timeoutMs?: number } = {},
): Promise<TimedRun> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let first = NaN;
    const child = spawn(cmd, args, { env: opts.env ?? CLEAN_ENV, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => {
      if (Number.isNaN(first)) first = performance.now() - t0;
      out.push(b);
    });
    child.stderr.on("data", (b: Buffer) => err.push(b));
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs) : undefined;
    child.on("error", (e) => {
      if (timer) clearTimeout(timer);
      reject(e);
    });
    child.on("close", (code) => {
      if (timer) clearTimeout(timer);
      resolve({
        firstOutputMs: first,
        exitMs: performance.now() - t0,
        code,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      });
    });
    child.stdin.on("error", () => {});
    child.stdin.end(opts.input ?? "");
  });
}

/** Like timedRun, but a non-zero exit is an error carrying the output's tail. */
export async function mustRun(
  cmd: string,
  args: readonly string[],
  opts: Parameters<typeof timedRun>[2] = {},
): Promise<TimedRun> {
  const r = await timedRun(cmd, args, opts);
  if (r.code !== 0) {
    const tail = (r.stderr || r.stdout).trim().split("\n").slice(-15).join("\n");
    throw new Error(`${[cmd, ...args].join(" ").slice(0, 300)} failed (exit ${r.code}): ${tail}`);
  }
  return r;
}

function pidNs(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return undefined;
  }
}

/** RSS and PSS of one process (kB figures from smaps_rollup, in bytes). */
export function memoryOf(pid: number): { rss: number; pss: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    const kb = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0) * 1024;
    return { rss: kb("Rss"), pss: kb("Pss") };
  } catch {
    return undefined;
  }
}

export interface ProcessTable {
  pids: number[];
  ppid: Map<number, number>;
  ns: Map<number, string>;
}

export function processTable(): ProcessTable {
  const pids = readdirSync("/proc")
    .filter((n) => /^\d+$/.test(n))
    .map(Number);
  const table: ProcessTable = { pids, ppid: new Map(), ns: new Map() };
  for (const p of pids) {
    const pp = parentPid(p);
    const ns = pidNs(p);
    if (pp !== undefined) table.ppid.set(p, pp);
    if (ns) table.ns.set(p, ns);
  }
  return table;
}

/**
 * The processes that make up one sandbox: everything in its pid namespace (pid 1, sessions' shells) plus the host-side
 * parents holding them (the bwrap monitor, each session's enter helper) and the host-side processes in its pids
 * cgroup, never the bench process itself.
 */
export function sandboxProcesses(pid1: number, table: ProcessTable, pidsCgroup?: string): number[] {
  const ns = pidNs(pid1);
  if (!ns) return [];
  const inside = table.pids.filter((p) => table.ns.get(p) === ns);
  const set = new Set(inside);
  for (const p of inside) {
    const parent = table.ppid.get(p);
    if (parent && parent !== process.pid && table.ns.get(parent) !== ns) set.add(parent);
  }
  // Host-side processes in the sandbox's groups, e.g. the next command's helper, waiting in them.
  if (pidsCgroup) for (const p of cgroupTreePids(pidsCgroup)) if (p !== process.pid) set.add(p);
  return [...set];
}

/**
 * Processes whose command line mentions any of `texts` (podman's cleanup of a removed container runs on after `rm`;
 * a server's leftovers name its home or a sandbox id).
 */
export function processesMentioning(...texts: string[]): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, "utf8");
      if (texts.some((t) => cmd.includes(t))) found.push(Number(name));
    } catch {
      /* gone */
    }
  }
  return found;
}

function cpuTimes(): { busy: number; total: number } {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - f[3]! - f[4]!, total };
}

/** Until the CPUs are nearly idle for a moment (the last run's teardown, e.g. namespaces freed), at most `maxMs`. */
export async function untilQuiet(maxMs = 3000, windowMs = 100, idleShare = 0.9): Promise<void> {
  const until = performance.now() + maxMs;
  let last = cpuTimes();
  while (performance.now() < until) {
    await new Promise((r) => setTimeout(r, windowMs));
    const now = cpuTimes();
    const total = now.total - last.total;
    if (total > 0 && 1 - (now.busy - last.busy) / total >= idleShare) return;
    last = now;
  }
}
