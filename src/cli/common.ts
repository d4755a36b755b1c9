import type { Command } from "commander";
import { parseSize } from "../util/size.js";
import type { Limits } from "../sandbox/limits.js";
import { InvalidInputError } from "../errors.js";

/** Options shared by every command that starts a sandbox. */
export interface SandboxCliOptions {
  dir?: string;
  network?: boolean;
  memory?: string;
  pids?: string;
  cpu?: string;
  disk?: string;
  timeout?: string;
  env: string[];
  cwd?: string;
  uid?: string;
  /** False with --no-seccomp. */
  seccomp?: boolean;
}

export function addSandboxOptions(cmd: Command): Command {
  return cmd
    .option("--dir <DIR>", "host directory mounted copy-on-write at /testbed")
    .option("--network", "share the host network (default: loopback only)")
    .option("--memory <SIZE>", "memory limit, e.g. 512M, 2G")
    .option("--pids <N>", "maximum number of processes")
    .option("--cpu <SECONDS>", "CPU time limit per process")
    .option("--disk <SIZE>", "size of the writable layer (default 8G)")
    .option("--timeout <SECONDS>", "wall-clock timeout")
    .option("--env <K=V>", "environment variable (repeatable)", collect, [] as string[])
    .option("--cwd <PATH>", "working directory inside")
    .option("--uid <UID>", "user id inside (default 0)")
    .option("--no-seccomp", "turn the seccomp profile off for this sandbox (weaker isolation; said on stderr)");
}

export function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export function parseEnvPairs(pairs: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf("=");
    if (i <= 0) throw new InvalidInputError(`--env expects K=V, got ${JSON.stringify(p)}`, { field: "--env" });
    env[p.slice(0, i)] = p.slice(i + 1);
  }
  return env;
}

/**
 * A positive number given as `flag`'s value (an integer with `integer`); anything else is bad input, named
 * `${flag} expects <what>, got <value>` (default what: "a positive number" / "a positive integer").
 */
export function parsePositive(value: string, flag: string, opts: { integer?: boolean; what?: string } = {}): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0 || (opts.integer && !Number.isInteger(n))) {
    const what = opts.what ?? `a positive ${opts.integer ? "integer" : "number"}`;
    throw new InvalidInputError(`${flag} expects ${what}, got ${value}`, { field: flag });
  }
  return n;
}

export function limitsFrom(o: SandboxCliOptions): Limits {
  return {
    memoryBytes: o.memory ? parseSize(o.memory) : undefined,
    pids: o.pids === undefined ? undefined : parsePositive(o.pids, "--pids"),
    cpuSeconds: o.cpu === undefined ? undefined : parsePositive(o.cpu, "--cpu"),
    diskBytes: o.disk ? parseSize(o.disk) : undefined,
  };
}

export function timeoutMsFrom(o: { timeout?: string }): number | undefined {
  if (o.timeout === undefined) return undefined;
  return parsePositive(o.timeout, "--timeout", { what: "seconds" }) * 1000;
}

/** Print an error the way every command does: one clear line, no stack, non-zero exit. */
export function fail(e: unknown): never {
  const msg = e instanceof Error ? e.message : String(e);
  process.stderr.write(`minisandbox: ${msg}\n`);
  if (process.env.MINISANDBOX_DEBUG && e instanceof Error) process.stderr.write(`${e.stack}\n`);
  process.exit(e instanceof InvalidInputError ? 2 : 1);
}
