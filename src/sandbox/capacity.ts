import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { DEFAULT_DISK_BYTES, DEFAULT_PIDS, type Limits } from "./limits.js";

/** What this machine has for sandboxes, read when asked: memory, process ids, CPUs. */
export interface HostCapacity {
  /** MemAvailable (/proc/meminfo), in bytes. */
  memAvailableBytes: number;
  /** The kernel's ceiling on process ids (kernel.pid_max, and kernel.threads-max when lower). */
  pidMax: number;
  cpus: number;
}

function readNumber(path: string): number | undefined {
  try {
    const n = Number(readFileSync(path, "utf8").trim());
    return Number.isFinite(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

export function hostCapacity(): HostCapacity {
  let memAvailableBytes = 0;
  try {
    const kb = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync("/proc/meminfo", "utf8"))?.[1];
    memAvailableBytes = Number(kb ?? 0) * 1024;
  } catch {
    /* not Linux: no budget */
  }
  const pidMax = Math.min(
    readNumber("/proc/sys/kernel/pid_max") ?? 32_768,
    readNumber("/proc/sys/kernel/threads-max") ?? Number.MAX_SAFE_INTEGER,
  );
  return { memAvailableBytes, pidMax, cpus: availableParallelism() };
}

/** What sandboxes may use together: memory and process ids, less what the host itself keeps. */
export interface HostBudget {
  memoryBytes: number;
  pids: number;
}

/** The host keeps a tenth of its available memory (at least 1 GiB) and an eighth of its pids (at least 4096). */
export function hostBudget(cap: HostCapacity = hostCapacity()): HostBudget {
  const memoryBytes = cap.memAvailableBytes - Math.max(1024 ** 3, Math.floor(cap.memAvailableBytes / 10));
  const pids = cap.pidMax - Math.max(4096, Math.floor(cap.pidMax / 8));
  return { memoryBytes: Math.max(0, memoryBytes), pids: Math.max(0, pids) };
}

/** The smallest share a default sandbox gets: enough for a test suite of a real repository. */
export const SANDBOX_SHARE = { memoryBytes: 1024 ** 3, pids: 512 };

/** Sandboxes a host admits by default: as many as get SANDBOX_SHARE each from the budget (at least 1). */
export function defaultAdmitted(budget: HostBudget = hostBudget()): number {
  return Math.max(
    1,
    Math.min(Math.floor(budget.memoryBytes / SANDBOX_SHARE.memoryBytes), Math.floor(budget.pids / SANDBOX_SHARE.pids)),
  );
}

export type Maxima = Required<Pick<Limits, "memoryBytes" | "pids" | "diskBytes">>;

/**
 * Per-sandbox maxima (and defaults) derived from the machine, so that `admitted` sandboxes at their maxima fit it:
 * memory × admitted within the memory budget (tmpfs pages, /dev/shm and /tmp included, count in a sandbox's memory),
 * pids × admitted within the process-id budget; disk at most the default budget. (A CPU quota, when asked for, is
 * at most the host's CPUs; without one each sandbox has its fair share.)
 */
export function derivedMaxima(admitted: number, budget: HostBudget = hostBudget()): Maxima {
  const n = Math.max(1, admitted);
  return {
    memoryBytes: Math.max(16 * 1024 ** 2, Math.floor(budget.memoryBytes / n / 1024 ** 2) * 1024 ** 2),
    pids: Math.max(16, Math.min(DEFAULT_PIDS, Math.floor(budget.pids / n))),
    diskBytes: DEFAULT_DISK_BYTES,
  };
}

/**
 * Sandboxes started beside others at once by default (fresh rewards, gold checks, a server's grading and diffing):
 * the machine's CPUs, at least 2; their tests are CPU-bound, so more at once would only share the same cores.
 */
export function defaultBesideSandboxes(): number {
  return Math.max(2, availableParallelism());
}
