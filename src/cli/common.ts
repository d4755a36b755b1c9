import type { Command } from "commander";
import { parseSize } from "../util/size.js";
import type { Limits } from "../sandbox/limits.js";
import { BuildError, errCode, errorCode, InvalidInputError } from "../errors.js";
import { spawn } from "node:child_process";
import { explainBuildFailure, renderBuildFailure } from "../env/build-diagnosis.js";
import { statSync } from "node:fs";
import { resolve } from "node:path";
import type { BindMount } from "../sandbox/plan.js";
import type { SandboxOptions } from "../sandbox/sandbox.js";

/** Options shared by every command that starts a sandbox. */
export interface SandboxCliOptions {
  dir?: string;
  network?: boolean;
  memory?: string;
  pids?: string;
  cpu?: string;
  cpus?: string;
  disk?: string;
  timeout?: string;
  env: string[];
  cwd?: string;
  uid?: string;
  /** False with --no-seccomp. */
  seccomp?: boolean;
  python?: string;
}

export function addSandboxOptions(cmd: Command): Command {
  return cmd
    .option("--dir <DIR>", "host directory mounted copy-on-write at /testbed")
    .option("--network", "share the host network (default: loopback only)")
    .option("--memory <SIZE>", "memory limit, e.g. 512M, 2G")
    .option("--pids <N>", "maximum number of processes")
    .option("--cpu <SECONDS>", "CPU time limit per process")
    .option("--cpus <N>", "CPUs the whole sandbox may use at most, e.g. 0.5 or 2 (default: a fair share, no ceiling)")
    .option("--disk <SIZE>", "size of the writable layer (default 8G)")
    .option("--timeout <SECONDS>", "wall-clock timeout")
    .option("--env <K=V>", "environment variable (repeatable)", collect, [] as string[])
    .option("--cwd <PATH>", "working directory inside")
    .option("--uid <UID>", "user id inside (default 0)")
    .option("--python <VERSION>", "a host Python (e.g. 3.11) first on PATH as python, python3, pip")
    .option("--no-seccomp", "turn the seccomp profile off for this sandbox (weaker isolation; said on stderr)");
}

/** `HOST[:PATH][:ro]`: a host directory shared at PATH (default: the same path), read-only with `:ro`. */
export function parseBind(spec: string): BindMount {
  const parts = spec.split(":");
  const readOnly = parts.length > 1 && parts[parts.length - 1] === "ro";
  if (readOnly) parts.pop();
  if (parts.length > 2 || !parts[0])
    throw new InvalidInputError(`--bind expects HOST[:PATH][:ro], got ${JSON.stringify(spec)}`, { field: "--bind" });
  const source = resolve(parts[0]);
  const target = parts[1] ?? source;
  if (!target.startsWith("/"))
    throw new InvalidInputError(`--bind: the path inside must be absolute, got ${target}`, { field: "--bind" });
  let isDir = false;
  try {
    isDir = statSync(source).isDirectory();
  } catch {
    /* reported below */
  }
  if (!isDir) throw new InvalidInputError(`--bind: ${source} is not a directory on this host`, { field: "--bind" });
  return { source, target, readOnly };
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
    cpus: o.cpus === undefined ? undefined : parsePositive(o.cpus, "--cpus"),
  };
}

/** The sandbox flags as the sandbox's options (exec and shell; the timeout is each command's to place). */
export function sandboxOptionsFrom(o: SandboxCliOptions, home: string): SandboxFlagOptions {
  return {
    home,
    network: o.network,
    limits: limitsFrom(o),
    env: parseEnvPairs(o.env),
    cwd: o.cwd,
    uid: o.uid ? Number(o.uid) : undefined,
    seccomp: o.seccomp,
  };
}

type SandboxFlagOptions = Pick<SandboxOptions, "home" | "network" | "limits" | "env" | "cwd" | "uid" | "seccomp">;

export function timeoutMsFrom(o: { timeout?: string }): number | undefined {
  if (o.timeout === undefined) return undefined;
  return parsePositive(o.timeout, "--timeout", { what: "seconds" }) * 1000;
}

/** A usage error of the parser (unknown option, missing value...) as one line with where to look. */
export function usageError(text: string): string {
  const line = text
    .replace(/^error: /, "")
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)
    .join(" ");
  return `minisandbox: ${line} (see --help)\n`;
}

/** Bad input (exit 2): what the caller gave is wrong or names something that is not there. */
const BAD_INPUT = new Set([
  "invalid_input",
  "validation_failed",
  "not_found",
  "sandbox_not_found",
  "checkpoint_not_found",
  "image_not_found",
]);

/** The exit status for an error: 2 for bad input, 1 for everything else (a failure of the work itself). */
export function exitCodeFor(e: unknown): number {
  if (e instanceof InvalidInputError) return 2;
  if (e instanceof Error && BAD_INPUT.has(errorCode(e))) return 2;
  const sys = errCode(e);
  return sys === "ENOENT" || sys === "ENOTDIR" || sys === "EISDIR" ? 2 : 1;
}

/** Print an error the way every command does: the cause in one line (a build failure: cause, fix, log), exit code. */
export function fail(e: unknown): never {
  const msg =
    e instanceof BuildError
      ? renderBuildFailure(explainBuildFailure(e), false)
      : String(e instanceof Error ? e.message : e);
  process.stderr.write(`minisandbox: ${msg}\n`);
  if (process.env.MINISANDBOX_DEBUG && e instanceof Error) process.stderr.write(`${e.stack}\n`);
  process.exit(exitCodeFor(e));
}

/** Hand a file or URL to the desktop's browser (`xdg-open`, macOS `open`); without one, say what to open. */
export function openInBrowser(target: string): void {
  const opener = process.platform === "darwin" ? "open" : "xdg-open";
  const say = (): void =>
    void process.stderr.write(`minisandbox: no browser to open here (${opener}); open ${target}\n`);
  try {
    const child = spawn(opener, [target], { detached: true, stdio: "ignore" });
    child.once("error", say);
    child.unref();
  } catch {
    say();
  }
}
