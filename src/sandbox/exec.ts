import { spawn } from "node:child_process";
import { CappedBuffer } from "./output.js";

/** Which limit ended a command, when one did. */
export type LimitHit = "memory" | "pids" | "cpu" | "timeout";

export interface ExecResult {
  /** Exit status; 124 after a timeout (as coreutils `timeout`), 128+N after signal N. */
  exitCode: number;
  stdout: string;
  stderr: string;
  /** Raw bytes (binary output survives here; `stdout` is its UTF-8 decoding). */
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
  timedOut: boolean;
  /** Output went over the limit: head and tail were kept with a marker in between. */
  truncated: boolean;
  limit?: LimitHit;
  signal?: NodeJS.Signals;
  durationMs: number;
}

export interface ExecOptions {
  cwd?: string;
  env?: Record<string, string>;
  /** Bytes for stdin; stdin is closed otherwise. */
  stdin?: string | Buffer;
  timeoutMs?: number;
  /** Cap per stream; head and tail are kept. */
  outputLimitBytes?: number;
  /** Merge stderr into stdout: the command gets one descriptor for both, so the order of its writes is kept. */
  mergeOutput?: boolean;
  /** Run as this user inside (default: the sandbox's). */
  uid?: number;
  gid?: number;
  /** Aborting kills the command's whole process tree (e.g. its HTTP client went away); the result still comes. */
  signal?: AbortSignal;
  /** Streamed as it arrives (the CLI prints live). */
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
}

export const DEFAULT_OUTPUT_LIMIT = 16 * 1024 * 1024;
const DRAIN_GRACE_MS = 250;

export interface SpawnedCommand {
  argv: string[];
  /** Kills the whole process tree of this command. */
  killTree: (rootPid: number) => Promise<void>;
  /** Reads which limit was hit (from cgroup counters), after exit. */
  limitHit: () => LimitHit | undefined;
  cleanup: () => void;
}

/** Run an already-built argv (see enterArgv) and collect its result. */
export function runCommand(cmd: SpawnedCommand, opts: ExecOptions): Promise<ExecResult> {
  const started = performance.now();
  const limit = opts.outputLimitBytes ?? DEFAULT_OUTPUT_LIMIT;
  const out = new CappedBuffer(limit);
  const err = opts.mergeOutput ? out : new CappedBuffer(limit);
  const [bin, ...args] = cmd.argv;
  return new Promise((resolve, reject) => {
    const child = spawn(bin!, args, { stdio: ["pipe", "pipe", "pipe"], env: {} });
    let timedOut = false;
    const timer =
      opts.timeoutMs !== undefined
        ? setTimeout(() => {
            timedOut = true;
            void cmd.killTree(child.pid!);
          }, opts.timeoutMs)
        : undefined;
    const abort = (): void => void cmd.killTree(child.pid!);
    if (opts.signal?.aborted) abort();
    else opts.signal?.addEventListener("abort", abort, { once: true });
    child.stdout!.on("data", (b: Buffer) => {
      out.push(b);
      opts.onStdout?.(b);
    });
    child.stderr!.on("data", (b: Buffer) => {
      err.push(b);
      (opts.mergeOutput ? opts.onStdout : opts.onStderr)?.(b);
    });
    child.stdin!.on("error", () => {});
    child.stdin!.end(opts.stdin ?? "");
    child.on("error", (e) => {
      if (timer) clearTimeout(timer);
      cmd.cleanup();
      reject(e);
    });
    // A background child may keep stdout open forever: after the command itself exits, give the pipes a short
    // grace to drain, then stop reading (the child lives on, as after `docker exec`, until close()).
    let drain: NodeJS.Timeout | undefined;
    child.on("exit", (code, signal) => {
      drain = setTimeout(() => {
        child.stdout!.destroy();
        child.stderr!.destroy();
        child.emit("close", code, signal);
      }, DRAIN_GRACE_MS);
    });
    let settled = false;
    child.on("close", (code, signal) => {
      if (settled) return;
      settled = true;
      if (drain) clearTimeout(drain);
      if (timer) clearTimeout(timer);
      opts.signal?.removeEventListener("abort", abort);
      void finish(code, signal).then(resolve, reject);
    });

    const finish = async (code: number | null, signal: NodeJS.Signals | null): Promise<ExecResult> => {
      // A resource limit explains a timeout better than the timeout itself (a fork bomb spins until killed).
      const limitHit = cmd.limitHit() ?? (signal === "SIGXCPU" ? "cpu" : timedOut ? "timeout" : undefined);
      // A command stopped by a limit is stopped whole: what it left running (a fork bomb's tail) dies with it.
      if (limitHit === "pids" || limitHit === "memory") await cmd.killTree(child.pid!);
      cmd.cleanup();
      const so = out.toBuffer();
      const se = opts.mergeOutput ? Buffer.alloc(0) : err.toBuffer();
      return {
        exitCode: timedOut ? 124 : (code ?? 128 + signalNumber(signal)),
        stdout: so.toString("utf8"),
        stderr: se.toString("utf8"),
        stdoutBytes: so,
        stderrBytes: se,
        timedOut,
        truncated: out.truncated || err.truncated,
        ...(limitHit ? { limit: limitHit } : {}),
        ...(signal ? { signal } : {}),
        durationMs: performance.now() - started,
      };
    };
  });
}

const SIGNALS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGABRT: 6,
  SIGKILL: 9,
  SIGSEGV: 11,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGXCPU: 24,
  SIGXFSZ: 25,
};

function signalNumber(signal: NodeJS.Signals | null): number {
  return signal ? (SIGNALS[signal] ?? 0) : 0;
}
