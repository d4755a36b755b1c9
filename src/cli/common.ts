import type { Command } from "commander";
import { parseSize } from "../util/size.js";
import type { Limits } from "../sandbox/limits.js";
import { MinisandboxError } from "../errors.js";

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
    .option("--uid <UID>", "user id inside (default 0)");
}

export function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export function parseEnvPairs(pairs: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf("=");
    if (i <= 0) throw new MinisandboxError("invalid_input", `--env expects K=V, got ${JSON.stringify(p)}`);
    env[p.slice(0, i)] = p.slice(i + 1);
  }
  return env;
}

export function limitsFrom(o: SandboxCliOptions): Limits {
  const int = (v: string | undefined, name: string): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0)
      throw new MinisandboxError("invalid_input", `${name} expects a positive number, got ${v}`);
    return n;
  };
  return {
    memoryBytes: o.memory ? parseSize(o.memory) : undefined,
    pids: int(o.pids, "--pids"),
    cpuSeconds: int(o.cpu, "--cpu"),
    diskBytes: o.disk ? parseSize(o.disk) : undefined,
  };
}

export function timeoutMsFrom(o: { timeout?: string }): number | undefined {
  if (o.timeout === undefined) return undefined;
  const s = Number(o.timeout);
  if (!Number.isFinite(s) || s <= 0)
    throw new MinisandboxError("invalid_input", `--timeout expects seconds, got ${o.timeout}`);
  return s * 1000;
}

/** Print an error the way every command does: one clear line, no stack, non-zero exit. */
export function fail(e: unknown): never {
  const msg = e instanceof Error ? e.message : String(e);
  process.stderr.write(`minisandbox: ${msg}\n`);
  if (process.env.MINISANDBOX_DEBUG && e instanceof Error) process.stderr.write(`${e.stack}\n`);
  process.exit(e instanceof MinisandboxError && e.code === "invalid_input" ? 2 : 1);
}
