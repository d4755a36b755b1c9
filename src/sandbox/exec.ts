import type { Socket } from "node:net";
import { SandboxError } from "../errors.js";
import { CappedBuffer } from "./output.js";
import type { HelperProcess } from "./spawner.js";

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
/** Turns of the event loop a pipe is still read after the grace while data keeps coming (see stopWhenQuiet). */
const MAX_DRAIN_TURNS = 64;

export interface SpawnedCommand {
  /** The command's process, its stdio piped. */
  child: HelperProcess;
  /** Kills the whole process tree of this command. */
  killTree: (rootPid: number) => Promise<void>;
  /** Reads which limit was hit (from cgroup counters), after exit. */
  limitHit: () => LimitHit | undefined;
  cleanup: () => void;
  /**
   * Settles true once the helper reached the command (its exec), false when it ended without: then its status is
   * a failure of the helper's, never the command's result.
   */
  reached?: Promise<boolean>;
}

/** Output of one command, capped per stream (one buffer for both when merged). */
interface Capture {
  out: CappedBuffer;
  err: CappedBuffer;
}

function capture(child: HelperProcess, opts: ExecOptions): Capture {
  const limit = opts.outputLimitBytes ?? DEFAULT_OUTPUT_LIMIT;
  const out = new CappedBuffer(limit);
  const err = opts.mergeOutput ? out : new CappedBuffer(limit);
  child.stdout!.on("data", (b: Buffer) => {
    out.push(b);
    opts.onStdout?.(b);
  });
  child.stderr!.on("data", (b: Buffer) => {
    err.push(b);
    (opts.mergeOutput ? opts.onStdout : opts.onStderr)?.(b);
  });
  return { out, err };
}

/**
 * Reading stops once a turn of the event loop brought nothing more on `stream`. Each check runs after the loop polled
 * for I/O (setImmediate), so output already in the pipe is always read first, however late the loop runs: a grace
 * measured in time alone expires before a loaded loop ever polls, and would throw away what the command wrote.
 */
function stopWhenQuiet(stream: NodeJS.ReadableStream & { destroy(): void }, done: () => void): void {
  let seen = -1;
  let turns = 0;
  const check = (): void => {
    const now = (stream as Socket).bytesRead;
    // A background job still writing gets a bounded number of turns: it is not the command, and never ends.
    if ((stream as Socket).readableEnded || (now === seen && turns > 0) || turns >= MAX_DRAIN_TURNS) {
      stream.destroy();
      done();
      return;
    }
    seen = now;
    turns++;
    setImmediate(check);
  };
  setImmediate(check);
}

/**
 * "close" once the command itself exited and its pipes drained. A background child may keep stdout open forever:
 * after the exit the pipes get a short grace, then what is in them is read and reading stops (the child lives on,
 * as after `docker exec`).
 */
function onDone(child: HelperProcess, done: (code: number | null, signal: NodeJS.Signals | null) => void): void {
  let drain: NodeJS.Timeout | undefined;
  child.on("exit", (code, signal) => {
    drain = setTimeout(() => {
      let left = 2;
      const stopped = (): void => void (--left === 0 && child.emit("close", code, signal));
      stopWhenQuiet(child.stdout!, stopped);
      stopWhenQuiet(child.stderr!, stopped);
    }, DRAIN_GRACE_MS);
  });
  let settled = false;
  child.on("close", (code, signal) => {
    if (settled) return;
    settled = true;
    if (drain) clearTimeout(drain);
    done(code, signal);
  });
}

/** Collect the result of a started command (see Sandbox.exec). */
export function runCommand(cmd: SpawnedCommand, opts: ExecOptions): Promise<ExecResult> {
  const started = performance.now();
  const { child } = cmd;
  return new Promise((resolve, reject) => {
    const output = capture(child, opts);
    let timedOut = false;
    const kill = (): void => void cmd.killTree(child.pid!);
    const expire = (): void => {
      timedOut = true;
      kill();
    };
    const timer = opts.timeoutMs === undefined ? undefined : setTimeout(expire, opts.timeoutMs);
    if (opts.signal?.aborted) kill();
    else opts.signal?.addEventListener("abort", kill, { once: true });
    const stop = (): void => {
      if (timer) clearTimeout(timer);
      opts.signal?.removeEventListener("abort", kill);
    };
    child.stdin!.on("error", () => {});
    child.stdin!.end(opts.stdin ?? "");
    child.on("error", (e) => {
      stop();
      cmd.cleanup();
      reject(e);
    });
    onDone(child, (code, signal) => {
      stop();
      const ended = { code, signal, timedOut, pid: child.pid!, durationMs: () => performance.now() - started };
      notStarted(cmd, timedOut || opts.signal?.aborted === true, output)
        .then((e) => (e ? Promise.reject(e) : finish(cmd, opts, output, ended)))
        .then(resolve, reject);
    });
  });
}

/**
 * The error to throw when the helper ended before it reached the command (a fork refused, a cgroup gone...): nothing
 * of the command ran, and an exit status would pass for its own. One we killed (timeout, abort) gives its result.
 */
async function notStarted(cmd: SpawnedCommand, killed: boolean, { err }: Capture): Promise<SandboxError | undefined> {
  if (!cmd.reached || (await cmd.reached) || killed) return undefined;
  cmd.cleanup();
  return commandNotStarted(err.toBuffer().toString("utf8"));
}

/** A command whose helper failed before reaching it (`said`: the helper's stderr): nothing of it ran. */
export function commandNotStarted(said: string): SandboxError {
  const why = said.trim().split("\n").at(-1) || "it ended without a word";
  return new SandboxError(`the command did not start: ${why} (nothing of it ran; retry, or see the sandbox's limits)`);
}

/** The result, once the command ended: which limit stopped it (a stopped command is stopped whole), its output. */
async function finish(
  cmd: SpawnedCommand,
  opts: ExecOptions,
  { out, err }: Capture,
  e: { code: number | null; signal: NodeJS.Signals | null; timedOut: boolean; pid: number; durationMs: () => number },
): Promise<ExecResult> {
  // A resource limit explains a timeout better than the timeout itself (a fork bomb spins until killed).
  const limitHit = cmd.limitHit() ?? (e.signal === "SIGXCPU" ? "cpu" : e.timedOut ? "timeout" : undefined);
  if (limitHit === "pids" || limitHit === "memory") await cmd.killTree(e.pid);
  cmd.cleanup();
  const so = out.toBuffer();
  const se = opts.mergeOutput ? Buffer.alloc(0) : err.toBuffer();
  return {
    exitCode: e.timedOut ? 124 : (e.code ?? 128 + signalNumber(e.signal)),
    stdout: so.toString("utf8"),
    stderr: se.toString("utf8"),
    stdoutBytes: so,
    stderrBytes: se,
    timedOut: e.timedOut,
    truncated: out.truncated || err.truncated,
    ...(limitHit ? { limit: limitHit } : {}),
    ...(e.signal ? { signal: e.signal } : {}),
    durationMs: e.durationMs(),
  };
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
