/**
 * One-shot commands of a remote sandbox, answered in the in-process `ExecResult` shape: the native `/exec` route, or,
 * with output callbacks or `background: true`, `/exec/stream` (output as it is written; a handle whose `kill()`
 * disconnects, which makes the server kill the command's whole process tree).
 */
import { InvalidInputError, SandboxError } from "../errors.js";
import type { LimitHit } from "../sandbox/exec.js";
import { type InOf, native, WireValidationError } from "../wire/index.js";
import { errorFromResponse } from "./errors.js";
import type { HttpClient } from "./http.js";

export interface RemoteExecOptions {
  timeoutMs?: number;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  mergeOutput?: boolean;
  outputLimitBytes?: number;
  /** Output as the command writes it (text, UTF-8). */
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

/** `ExecResult` of the in-process API, minus the raw byte buffers. */
export interface RemoteExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
  limit?: LimitHit;
  signal?: string;
  durationMs: number;
}

/** A command running in the background (`commands.run(cmd, { background: true })`). */
export interface RemoteCommandHandle {
  /** Output so far. */
  readonly stdout: string;
  readonly stderr: string;
  /** The result once the command ends; after `kill()`, exit code 137 and signal SIGKILL with the output so far. */
  wait(): Promise<RemoteExecResult>;
  /** Stop the command and its whole process tree; false when it had already ended. */
  kill(): Promise<boolean>;
}

/** What the server would refuse anyway, refused before sending: one line naming the option. */
export function checkExecOptions(o: RemoteExecOptions): void {
  const positive = (v: number | undefined, field: string, integer: boolean): void => {
    if (v === undefined) return;
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v)))
      throw new InvalidInputError(`${field} must be a positive ${integer ? "integer" : "number"}, got ${String(v)}`, {
        field,
      });
  };
  positive(o.timeoutMs, "timeoutMs", false);
  positive(o.outputLimitBytes, "outputLimitBytes", true);
}

function requestBody(cmd: string | string[], o: RemoteExecOptions): InOf<typeof native.ExecRequest> {
  checkExecOptions(o);
  if (Array.isArray(cmd) && cmd.length === 0) throw new InvalidInputError("command: empty argv", { field: "command" });
  return {
    command: cmd,
    timeout_ms: o.timeoutMs,
    cwd: o.cwd,
    env: o.env,
    stdin: o.stdin,
    merge_output: o.mergeOutput,
    output_limit_bytes: o.outputLimitBytes,
  };
}

function resultOf(r: native.ExecResponse, stdout?: string, stderr?: string): RemoteExecResult {
  const { limit, signal, ...rest } = native.ExecResponse.toCamel(r);
  return {
    ...rest,
    stdout: stdout ?? rest.stdout,
    stderr: stderr ?? rest.stderr,
    ...(limit ? { limit } : {}),
    ...(signal ? { signal } : {}),
  };
}

export async function remoteExec(
  api: HttpClient,
  id: string,
  cmd: string | string[],
  o: RemoteExecOptions = {},
): Promise<RemoteExecResult> {
  if (o.onStdout || o.onStderr) return (await remoteStart(api, id, cmd, o)).wait();
  return remoteExecAt(api, `/sandboxes/${id}/exec`, cmd, o);
}

/** The same without streaming, against any route speaking `ExecRequest` / `ExecResponse` (a rollout's too). */
export async function remoteExecAt(
  api: HttpClient,
  path: string,
  cmd: string | string[],
  o: RemoteExecOptions = {},
): Promise<RemoteExecResult> {
  return resultOf(await api.call("POST", path, native.ExecResponse, requestBody(cmd, o)));
}

/** The NDJSON answer of `/exec/stream`, read as it arrives: output to the callbacks, then the result. */
class StreamedRun {
  stdout = "";
  stderr = "";
  killed = false;
  finished = false;
  private readonly started = performance.now();

  constructor(
    private readonly o: RemoteExecOptions,
    private readonly what: string,
  ) {}

  private onLine(text: string): native.ExecResponse | undefined {
    let parsed: ReturnType<typeof native.ExecStreamLine.parse>;
    try {
      parsed = native.ExecStreamLine.parse(JSON.parse(text), ["response"]);
    } catch (e) {
      const why = e instanceof WireValidationError ? e.message : (e as Error).message;
      throw new SandboxError(`${this.what}: the server's stream does not match the wire contract (${why})`);
    }
    if (parsed.stdout !== undefined) {
      this.stdout += parsed.stdout;
      this.o.onStdout?.(parsed.stdout);
    }
    if (parsed.stderr !== undefined) {
      this.stderr += parsed.stderr;
      this.o.onStderr?.(parsed.stderr);
    }
    if (parsed.error) throw errorFromResponse(500, parsed.error, this.what);
    return parsed.result;
  }

  private async lines(body: ReadableStream<Uint8Array>): Promise<native.ExecResponse | undefined> {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return undefined;
      buffered += value;
      for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
        const result = buffered.slice(0, nl).trim() ? this.onLine(buffered.slice(0, nl)) : undefined;
        buffered = buffered.slice(nl + 1);
        if (result) return result;
      }
    }
  }

  async read(body: ReadableStream<Uint8Array>): Promise<RemoteExecResult> {
    try {
      const result = await this.lines(body);
      if (result) return resultOf(result, this.stdout, this.stderr);
    } catch (e) {
      if (!this.killed) throw e;
    } finally {
      this.finished = true;
    }
    if (!this.killed) throw new SandboxError(`${this.what}: the server closed the stream before the command's result`);
    const { stdout, stderr } = this;
    const durationMs = performance.now() - this.started;
    return { exitCode: 137, signal: "SIGKILL", stdout, stderr, timedOut: false, truncated: false, durationMs };
  }
}

/** Start a command whose output streams; resolves once the server has started it. */
export async function remoteStart(
  api: HttpClient,
  id: string,
  cmd: string | string[],
  o: RemoteExecOptions = {},
): Promise<RemoteCommandHandle> {
  const body = requestBody(cmd, o);
  const ac = new AbortController();
  const what = "exec";
  const res = await api.fetch("POST", `/sandboxes/${id}/exec/stream`, JSON.stringify(body), {
    headers: { "content-type": "application/json" },
    signal: ac.signal,
    what,
  });
  if (!res.ok || !res.body) {
    await api.read(res, native.ExecStreamLine, what);
    throw new SandboxError(`${what}: the server sent no output stream`);
  }
  const run = new StreamedRun(o, what);
  const reading = run.read(res.body);
  reading.catch(() => undefined); // awaited by wait(); never an unhandled rejection
  return {
    get stdout() {
      return run.stdout;
    },
    get stderr() {
      return run.stderr;
    },
    wait: () => reading,
    async kill() {
      if (run.finished) return false;
      run.killed = true;
      ac.abort();
      await reading.catch(() => undefined);
      return true;
    },
  };
}
