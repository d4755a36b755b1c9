import { mkdir } from "node:fs/promises";
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, totalmem } from "node:os";
import { join } from "node:path";
import { InvalidInputError, SandboxError } from "../errors.js";

/** Resource limits of a sandbox. Every field is optional; absent means the default (see `withDefaults`). */
export interface Limits {
  /** Memory (RSS + page cache + tmpfs writes) in bytes, for the whole sandbox (cgroup memory controller). */
  memoryBytes?: number;
  /** Number of processes and threads in the whole sandbox (cgroup pids controller). */
  pids?: number;
  /** CPU seconds per process (RLIMIT_CPU). */
  cpuSeconds?: number;
  /** Every writable place together: `/`, /tmp, /dev/shm, home and the copy-on-write layers (one tmpfs). */
  diskBytes?: number;
  /** Max open files per process (RLIMIT_NOFILE). */
  openFiles?: number;
  /**
   * CPUs the whole sandbox may use at most (a CFS quota: 0.5 is half of one CPU's time). Without it the sandbox has
   * no ceiling, only its fair share: every sandbox weighs the same against the others (cgroup cpu.shares).
   */
  cpus?: number;
}

export const DEFAULT_DISK_BYTES = 8 * 1024 ** 3;
export const DEFAULT_PIDS = 4096;
/** Half the host's memory, at most 8 GiB: enough for a test suite, never the whole machine. */
export const DEFAULT_MEMORY_BYTES = Math.min(8 * 1024 ** 3, Math.floor(totalmem() / 2));

/** The kernel's own ceiling for pids.max (PID_MAX_LIMIT on 64-bit): anything above is an EINVAL. */
export const KERNEL_MAX_PIDS = 4_194_304;

const LIMIT_RULES: Record<keyof Limits, { min: number; max: number; integer: boolean; unit: string }> = {
  memoryBytes: { min: 16 * 1024 ** 2, max: Number.MAX_SAFE_INTEGER, integer: true, unit: "bytes" },
  pids: { min: 1, max: KERNEL_MAX_PIDS, integer: true, unit: "processes" },
  cpuSeconds: { min: 1, max: Number.MAX_SAFE_INTEGER, integer: false, unit: "seconds" },
  diskBytes: { min: 1024 ** 2, max: Number.MAX_SAFE_INTEGER, integer: true, unit: "bytes" },
  openFiles: { min: 16, max: 1024 ** 2, integer: true, unit: "files" },
  cpus: { min: 0.01, max: availableParallelism(), integer: false, unit: "CPUs" },
};

/** Refuse what the kernel would reject (or silently misread): every field named, with what it must be. */
export function validateLimits(limits: unknown): Limits {
  if (limits === undefined || limits === null) return {};
  if (typeof limits !== "object" || Array.isArray(limits)) throw new InvalidInputError("limits must be an object");
  for (const [key, value] of Object.entries(limits)) {
    const rule = LIMIT_RULES[key as keyof Limits];
    if (!rule)
      throw new InvalidInputError(`limits.${key}: unknown limit (known: ${Object.keys(LIMIT_RULES).join(", ")})`);
    if (value === undefined) continue;
    const ok =
      typeof value === "number" &&
      Number.isFinite(value) &&
      value >= rule.min &&
      value <= rule.max &&
      (!rule.integer || Number.isInteger(value));
    if (!ok) {
      const what = rule.integer ? "an integer" : "a number";
      const range = rule.max === Number.MAX_SAFE_INTEGER ? `>= ${rule.min}` : `from ${rule.min} to ${rule.max}`;
      throw new InvalidInputError(
        `limits.${key} must be ${what} of ${rule.unit} ${range}, got ${JSON.stringify(value) ?? String(value)}`,
        { field: `limits.${key}` },
      );
    }
  }
  return limits as Limits;
}

/**
 * The size of the tmpfs that holds every writable place (`diskBytes`). Its pages are memory, charged to the
 * sandbox's memory group: where memory is limited it stops an eighth (at least 32 MiB) short of that limit, so that
 * filling it ends in "No space left on device", never in the out-of-memory killer, which could only take processes
 * (the pages are nobody's) until it takes pid 1.
 */
export function scratchBytes(limits: Limits, memoryEnforced: boolean): number {
  const disk = limits.diskBytes ?? DEFAULT_DISK_BYTES;
  if (!memoryEnforced || !limits.memoryBytes) return disk;
  const headroom = Math.max(32 * 1024 ** 2, Math.floor(limits.memoryBytes / 8));
  return Math.max(1024 ** 2, Math.min(disk, limits.memoryBytes - headroom));
}

/** The limits a sandbox runs with: the caller's, validated, over the defaults for disk, processes and memory. */
export function withDefaults(limits: Limits | undefined): Limits {
  const given = Object.entries(validateLimits(limits)).filter(([, v]) => v !== undefined);
  const defaults = { diskBytes: DEFAULT_DISK_BYTES, pids: DEFAULT_PIDS, memoryBytes: DEFAULT_MEMORY_BYTES };
  return { ...defaults, ...Object.fromEntries(given) };
}

const CGROUP_ROOT = "/sys/fs/cgroup";
/** The parent group of every sandbox's cgroups: shared by root, per user otherwise (a delegated subtree). */
const GROUP = process.getuid?.() === 0 ? "minisandbox" : `minisandbox-${process.getuid?.()}`;

/**
 * Which cgroup v1 controllers this process may use: root where they are mounted; another user where root delegated
 * its group to it (`/sys/fs/cgroup/{memory,pids}/minisandbox-<uid>`, owned by the user: see `minisandbox doctor`).
 */
export interface CgroupSupport {
  memory: boolean;
  pids: boolean;
  /** Freezes a sandbox while a fork copies its state. */
  freezer: boolean;
  /** A CPU share per sandbox (cpu.shares) and its optional quota (`cpus`). */
  cpu: boolean;
  /** CPU time used per sandbox (cpuacct.usage). */
  cpuacct: boolean;
}

let cached: CgroupSupport | undefined;

export function cgroupSupport(): CgroupSupport {
  if (cached) return cached;
  const usable = (ctl: string): boolean => {
    const dir = join(CGROUP_ROOT, ctl);
    try {
      if (!existsSync(join(dir, "cgroup.procs")) || !statSync(dir).isDirectory()) return false;
      mkdirSync(join(dir, GROUP), { recursive: true });
      // Delegated to us, or not: a group root left owned by someone else is not ours to use.
      accessSync(join(dir, GROUP), constants.W_OK);
      return true;
    } catch {
      return false;
    }
  };
  cached = {
    memory: usable("memory"),
    pids: usable("pids"),
    freezer: usable("freezer"),
    cpu: usable("cpu"),
    cpuacct: usable("cpuacct"),
  };
  return cached;
}

/** The cgroups of one sandbox; processes join them by writing their pid to `<dir>/cgroup.procs`. */
export interface SandboxCgroups {
  memory?: string;
  pids?: string;
  freezer?: string;
  cpu?: string;
  cpuacct?: string;
}

/** The cgroup v1 controllers a sandbox may have a group in, in the order processes join them. */
const CONTROLLERS = ["memory", "pids", "freezer", "cpu", "cpuacct"] as const;

/** CFS period of a `cpus` quota: the kernel's default, 100 ms. */
const CFS_PERIOD_US = 100_000;

/**
 * The sandbox's groups with their limits (see makeCgroups, setCgroupLimits). On failure, what was made is removed.
 */
export async function createCgroups(id: string, limits: Limits): Promise<SandboxCgroups> {
  const groups = await makeCgroups(id, { memory: Boolean(limits.memoryBytes) });
  try {
    setCgroupLimits(groups, limits);
  } catch (e) {
    await killSandboxCgroups(groups);
    throw e;
  }
  return groups;
}

/**
 * A sandbox's groups, no limit set yet: made off the event loop (a memory group's mkdir costs the kernel a
 * millisecond or more, and a group start makes many at once). A memory group only where asked (a sandbox with a
 * memory limit). The CPU groups are made once one of the groups pid 1 joins exists: a sandbox's CPU groups are never
 * without one of those, by which a reaper tells a live sandbox from a dead one's leftovers (`isLeftover`). On
 * failure, what was made is removed.
 */
export async function makeCgroups(id: string, want: { memory: boolean }): Promise<SandboxCgroups> {
  const support = cgroupSupport();
  const groups: SandboxCgroups = {};
  const dirOf = (ctl: (typeof CONTROLLERS)[number]): string => join(CGROUP_ROOT, ctl, GROUP, id);
  // The groups pid 1 joins (`cgroupDirs`); the pids group always (it is how a timeout finds a whole process tree).
  if (support.memory && want.memory) groups.memory = dirOf("memory");
  if (support.pids) groups.pids = dirOf("pids");
  if (support.freezer) groups.freezer = dirOf("freezer");
  const anchors = cgroupDirs(groups).map((dir) => mkdir(dir, { recursive: true }));
  // Whichever is made first (a pids or freezer mkdir is cheap, memory's is not).
  const anchored = anchors.length ? Promise.any(anchors).catch(() => undefined) : Promise.resolve();
  const cpuMade = anchored.then(async () => {
    if (support.cpu) groups.cpu = dirOf("cpu");
    // Where cpu and cpuacct are mounted together, the cpu group is the cpuacct group already.
    if (support.cpuacct && !(groups.cpu && sameController("cpu", "cpuacct"))) groups.cpuacct = dirOf("cpuacct");
    await Promise.all([groups.cpu, groups.cpuacct].filter(Boolean).map((d) => mkdir(d!, { recursive: true })));
    // Every sandbox weighs the same (the default 1024 shares): whatever one runs, another gets its fair share.
    if (groups.cpu) rebalanceCpuParent();
  });
  const failed = (await Promise.allSettled([...anchors, cpuMade])).find(
    (r): r is PromiseRejectedResult => r.status === "rejected",
  );
  if (failed) {
    await killSandboxCgroups(groups);
    throw failed.reason;
  }
  return groups;
}

/**
 * The limits, written into fresh groups (no limit of their own yet; a memory group where there is a memory limit)
 * before anything of the sandbox's runs in them: what is not limited keeps the kernel's default, none. Written in
 * place: a cgroup file is kernel memory (microseconds), never a disk, and a round trip through the thread pool each
 * would cost more than the writes.
 */
export function setCgroupLimits(groups: SandboxCgroups, limits: Limits): void {
  const { memory, pids, cpu } = groups;
  if (memory && limits.memoryBytes) {
    writeFileSync(join(memory, "memory.limit_in_bytes"), String(limits.memoryBytes));
    // Without a swap limit a hog would spill into swap instead of being stopped.
    const memsw = join(memory, "memory.memsw.limit_in_bytes");
    if (existsSync(memsw)) writeFileSync(memsw, String(limits.memoryBytes));
  }
  if (pids && limits.pids) writeFileSync(join(pids, "pids.max"), String(limits.pids));
  if (cpu && limits.cpus) {
    writeFileSync(join(cpu, "cpu.cfs_period_us"), String(CFS_PERIOD_US));
    writeFileSync(join(cpu, "cpu.cfs_quota_us"), String(Math.max(1000, Math.round(limits.cpus * CFS_PERIOD_US))));
  }
}

/** True when two controllers share one hierarchy (e.g. `cpu,cpuacct`, with `cpu` and `cpuacct` links to it). */
function sameController(a: string, b: string): boolean {
  try {
    return realpathSync(join(CGROUP_ROOT, a)) === realpathSync(join(CGROUP_ROOT, b));
  } catch {
    return false;
  }
}

/** Every group of a sandbox, in every controller. */
export function allCgroupDirs(groups: SandboxCgroups): string[] {
  return CONTROLLERS.map((ctl) => groups[ctl]).filter((d): d is string => Boolean(d));
}

/**
 * The cgroup directories the launch and pid 1 join, in that order. Not the CPU groups: only commands run the
 * sandbox's code, and they join those themselves (the launch's own work is the host's).
 */
export function cgroupDirs(groups: SandboxCgroups): string[] {
  return [groups.memory, groups.pids, groups.freezer].filter((d): d is string => Boolean(d));
}

/**
 * Sandboxes' CPU groups share one parent: it weighs as much as all of them together would at the top level
 * (1024 shares each, as each session of the host's does), so that sandboxes are fair to each other without losing
 * CPU to the host as a group. Recounted whenever a sandbox's group comes or goes (any process, any home).
 */
function rebalanceCpuParent(): void {
  const parent = join(CGROUP_ROOT, "cpu", GROUP);
  try {
    const children = readdirSync(parent, { withFileTypes: true }).filter((e) => e.isDirectory()).length;
    writeFileSync(join(parent, "cpu.shares"), String(Math.min(262_144, 1024 * Math.max(1, children))));
  } catch {
    /* no cpu controller, or the parent is gone */
  }
}

/** CPU time the sandbox's processes used, in nanoseconds (cpuacct; undefined without it). */
export function cpuUsageNs(groups: SandboxCgroups): number | undefined {
  const dir = groups.cpuacct ?? (groups.cpu && sameController("cpu", "cpuacct") ? groups.cpu : undefined);
  if (!dir) return undefined;
  try {
    return Number(readFileSync(join(dir, "cpuacct.usage"), "utf8"));
  } catch {
    return undefined;
  }
}

/** Let a frozen group go on (a frozen process cannot even die: thaw before killing). */
export function thaw(dir: string | undefined): void {
  if (!dir) return;
  try {
    writeFileSync(join(dir, "freezer.state"), "THAWED");
  } catch {
    /* gone */
  }
}

/** Stop every process of a freezer group where it stands (`thaw` lets them go on). */
export async function freeze(dir: string): Promise<void> {
  writeFileSync(join(dir, "freezer.state"), "FROZEN");
  // Idle processes freeze at once: look again soon, then every 2 ms (a busy one stops at its next scheduling point).
  for (let i = 0; readFileSync(join(dir, "freezer.state"), "utf8").trim() !== "FROZEN"; i++) {
    if (i > 600) {
      thaw(dir);
      throw new SandboxError("the sandbox's processes could not be frozen");
    }
    await new Promise((r) => (i < 100 ? setImmediate(r) : setTimeout(r, 2)));
  }
}

/** A child pids cgroup for one command, so that its whole tree (double forks included) can be killed. */
export function createCommandCgroup(groups: SandboxCgroups, name: string): string | undefined {
  const dir = commandCgroupPath(groups, name);
  if (dir) mkdirSync(dir, { recursive: true });
  return dir;
}

/** Where a command's own pids group `name` is (or will be: a waiting helper makes its own, `--new-cgroup`). */
export function commandCgroupPath(groups: SandboxCgroups, name: string): string | undefined {
  return groups.pids ? join(groups.pids, name) : undefined;
}

/** True when the processes of a cgroup tree (subgroups included) are among `allowed`. */
export function onlyProcesses(dir: string, allowed: number[]): boolean {
  if (!cgroupPids(dir).every((p) => allowed.includes(p))) return false;
  try {
    return readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .every((e) => onlyProcesses(join(dir, e.name), allowed));
  } catch {
    return false;
  }
}

export function cgroupPids(dir: string): number[] {
  try {
    return readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * SIGKILL everything in a cgroup (repeatedly, since a fork can race the kill) and remove it. Processes in `spareFirst`
 * (the host-side parents of entered commands: `msb-helper enter` or `nsenter`) die last: killed first, their children
 * would be orphaned to the host's init instead of being reaped by them.
 */
export async function killCgroup(dir: string, removeDir = true, spareFirst: number[] = []): Promise<void> {
  // No new process can start in the group from now on: a fork bomb cannot outrun the kill.
  try {
    writeFileSync(join(dir, "pids.max"), "0");
  } catch {
    /* not a pids group, or gone */
  }
  for (let round = 0; round < 50; round++) {
    const pids = cgroupTreePids(dir);
    if (pids.length === 0) break;
    const others = pids.filter((p) => !spareFirst.includes(p));
    for (const pid of others.length && round < 40 ? others : pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    }
    await new Promise((r) => setTimeout(r, round < 5 ? 2 : 20));
  }
  if (removeDir) removeCgroupTree(dir);
}

/**
 * Wait (bounded) until nothing is charged to a pids group any more: killed processes stay charged until they are
 * reaped (pid 1 reaps orphans), so a command started right after a killed fork bomb could be refused its forks by
 * the dead. Not a pids group: nothing to wait for.
 */
export async function waitPidsReleased(dir: string, timeoutMs = 2000): Promise<void> {
  for (const t0 = Date.now(); Date.now() - t0 < timeoutMs; await new Promise((r) => setTimeout(r, 10))) {
    let charged: number;
    try {
      charged = Number(readFileSync(join(dir, "pids.current"), "utf8"));
    } catch {
      return;
    }
    if (!(charged > 0)) return;
  }
}

/** Kill everything in a sandbox's cgroups (thawed first: frozen processes cannot die) and remove them. */
export async function killSandboxCgroups(groups: SandboxCgroups): Promise<void> {
  thaw(groups.freezer);
  for (const dir of [groups.pids, groups.memory, groups.freezer, groups.cpu, groups.cpuacct])
    if (dir) await killCgroup(dir, false);
  removeSandboxCgroups(groups);
}

/**
 * Remove a sandbox's (empty) groups: the CPU groups first, those pid 1 joins last, so that whatever an interrupted
 * removal leaves still has one of them (see `isLeftover`). Busy groups are left.
 */
export function removeSandboxCgroups(groups: SandboxCgroups): void {
  for (const dir of [groups.cpuacct, groups.cpu, groups.freezer, groups.memory, groups.pids])
    if (dir) removeCgroupTree(dir);
  if (groups.cpu) rebalanceCpuParent();
}

/** Processes of a cgroup and of all its subgroups. */
export function cgroupTreePids(dir: string): number[] {
  const out = cgroupPids(dir);
  try {
    for (const e of readdirSync(dir, { withFileTypes: true }))
      if (e.isDirectory()) out.push(...cgroupTreePids(join(dir, e.name)));
  } catch {
    /* gone */
  }
  return out;
}

/** rmdir a cgroup and its children, deepest first. Busy groups are left (the reaper retries). */
export function removeCgroupTree(dir: string): void {
  let entries: string[] = [];
  try {
    entries = readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return;
  }
  for (const e of entries) removeCgroupTree(join(dir, e));
  try {
    rmdirSync(dir);
  } catch {
    /* still busy or already gone */
  }
}

/** Counters that tell which limit stopped a command. */
export interface LimitCounters {
  oomKills: number;
  pidsRefused: number;
}

export function readCounters(groups: SandboxCgroups): LimitCounters {
  // cgroup v1 counts a refused fork in the group of the process that forked, which may be a command's subgroup.
  const pids = groups.pids ? sumOverTree(groups.pids, "pids.events", /max (\d+)/) : 0;
  return { oomKills: oomKills(groups), pidsRefused: pids };
}

/** The sandbox's OOM kills so far: one file (its memory group has no subgroups). */
export function oomKills(groups: SandboxCgroups): number {
  return groups.memory ? counter(join(groups.memory, "memory.oom_control"), /oom_kill (\d+)/) : 0;
}

/** Forks refused to the processes of one group (not its subgroups): a command's, whose group is its own. */
export function forksRefused(group: string): number {
  return counter(join(group, "pids.events"), /max (\d+)/);
}

function counter(file: string, re: RegExp): number {
  try {
    const m = re.exec(readFileSync(file, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

function sumOverTree(dir: string, file: string, re: RegExp): number {
  let total = counter(join(dir, file), re);
  try {
    for (const e of readdirSync(dir, { withFileTypes: true }))
      if (e.isDirectory()) total += sumOverTree(join(dir, e.name), file, re);
  } catch {
    /* gone */
  }
  return total;
}

/** Every sandbox's cgroups on this host (any process, any home), by sandbox id: for the reaper. */
export function listSandboxCgroups(): Map<string, SandboxCgroups> {
  const out = new Map<string, SandboxCgroups>();
  for (const ctl of CONTROLLERS) {
    const base = join(CGROUP_ROOT, ctl, GROUP);
    try {
      for (const e of readdirSync(base, { withFileTypes: true })) {
        if (!e.isDirectory()) continue;
        const groups = out.get(e.name) ?? {};
        groups[ctl] = join(base, e.name);
        out.set(e.name, groups);
      }
    } catch {
      /* controller absent */
    }
  }
  return out;
}

/**
 * True when a sandbox's groups are provably a dead sandbox's: no process in any of them, and none of the groups
 * pid 1 joins (memory, pids, freezer) holds it. Judged per sandbox, never per group: pid 1 stays in those for the
 * sandbox's whole life, but its CPU groups hold only running commands and waiting helpers, so they are empty
 * between two commands of a live sandbox. A sandbox's CPU groups never exist without one of pid 1's groups (made
 * after, removed before): CPU groups alone are leftovers where every sandbox has a pids or freezer group; elsewhere
 * nothing tells a live sandbox from a dead one, and they are left to the owner's home.
 */
export function isLeftover(groups: SandboxCgroups): boolean {
  if (allCgroupDirs(groups).some((dir) => cgroupTreePids(dir).length > 0)) return false;
  if (cgroupDirs(groups).length > 0) return true;
  const s = cgroupSupport();
  return s.pids || s.freezer;
}

/** The per-process limits (rlimits): CPU seconds, open files. Memory and processes are per sandbox (cgroups) only. */
export function rlimitArgs(limits: Limits): string[] {
  const args: string[] = [];
  // soft < hard: the soft limit delivers SIGXCPU (a clear status), the hard one a SIGKILL a second later.
  if (limits.cpuSeconds) args.push(`--cpu=${Math.ceil(limits.cpuSeconds)}:${Math.ceil(limits.cpuSeconds) + 1}`);
  if (limits.openFiles) args.push(`--nofile=${limits.openFiles}`);
  return args;
}

/** Which limits this host enforces for a sandbox: memory and processes need their cgroup controllers. */
export interface Enforcement {
  memory: boolean;
  pids: boolean;
  /** A fair CPU share per sandbox, and the `cpus` quota (cgroup cpu controller). */
  cpuShare: boolean;
  /** Always: one size-limited tmpfs holds every writable place. */
  disk: true;
  /** Per process (RLIMIT_CPU, RLIMIT_NOFILE). */
  cpu: true;
  openFiles: true;
}

export function enforcement(): Enforcement {
  const s = cgroupSupport();
  return { memory: s.memory, pids: s.pids, cpuShare: s.cpu, disk: true, cpu: true, openFiles: true };
}
