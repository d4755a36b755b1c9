/**
 * `RemoteSandbox`: a sandbox on a minisandbox server, with the shape of the in-process `Sandbox` (E2B-like):
 * `commands.run`, `sessions`, `files`, `evaluate`, `diff`, `close` / `await using`.
 */
import { readFileSync, statSync } from "node:fs";
import { basename } from "node:path";
import type { RunOptions, RunResult } from "../session/bash-session.js";
import type { Limits } from "../sandbox/limits.js";
import type { LimitHit } from "../sandbox/exec.js";
import { NotFoundError } from "../util/errors.js";
import { HttpClient } from "./http.js";
import { readTokenFile } from "./token-file.js";
import { zipDirectory } from "./zip.js";

export interface ConnectOptions {
  /** Server base URL, e.g. "http://127.0.0.1:8000". */
  url: string;
  /**
   * The server's token (sent as X-API-Key). Default: the token file `serve` writes, `<home>/server/token`, with the
   * home resolved as the CLI does (`home`, then MINISANDBOX_HOME, then the per-user default).
   */
  apiKey?: string;
  /** minisandbox home whose token file to read when `apiKey` is not given. */
  home?: string;
  /** Client-side limit for each HTTP request (default: none; commands carry their own timeouts). */
  requestTimeoutMs?: number;
}

export interface RemoteSandboxCreateOptions extends ConnectOptions {
  /** Host directory (on the server) mounted copy-on-write at /testbed. */
  dir?: string;
  /** Dataset instance (the server's `--dataset`). */
  instanceId?: string;
  /** Environment key (a built layer). */
  envKey?: string;
  network?: boolean;
  limits?: Pick<Limits, "memoryBytes" | "pids" | "cpuSeconds" | "diskBytes">;
  /** The server closes the sandbox after this long (TTL). */
  timeoutMs?: number;
  /** ... or after this long without requests. */
  idleTimeoutMs?: number;
  env?: Record<string, string>;
  cwd?: string;
  labels?: Record<string, string>;
}

/** What the server says about a sandbox (GET /sandboxes/:id). */
export interface SandboxInfo {
  id: string;
  runtime_url: string;
  created_at: string;
  expires_at: string | null;
  idle_timeout_seconds: number | null;
  last_active_at: string;
  busy: boolean;
  source: "dir" | "instance" | "env_key" | "empty";
  dir: string | null;
  instance_id: string | null;
  env_key: string | null;
  network: boolean;
  limits: { memory_bytes: number | null; pids: number | null; cpu_seconds: number | null; disk_bytes: number | null };
  labels: Record<string, string>;
  sessions: string[];
  default: boolean;
  meta: Record<string, unknown>;
}

export interface RemoteExecOptions {
  timeoutMs?: number;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  mergeOutput?: boolean;
  outputLimitBytes?: number;
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

/** The same options as an in-process session's `run`. */
export type RemoteRunOptions = RunOptions;

interface Observation {
  output: string;
  exit_code: number | null;
  expect_string: string;
}

const seconds = (ms: number | undefined): number | null => (ms === undefined ? null : ms / 1000);

/** The given key, else the home's token file. */
const keyFor = (o: ConnectOptions): string | undefined => o.apiKey ?? readTokenFile(o.home);

/** One named bash session of a remote sandbox. */
export class RemoteSession {
  constructor(
    private readonly sessions: RemoteSessions,
    readonly name: string,
  ) {}
  run(command: string, opts?: RemoteRunOptions): Promise<RunResult> {
    return this.sessions.run(this.name, command, opts);
  }
  interrupt(opts?: { timeoutMs?: number; retries?: number; expect?: string[] }): Promise<RunResult> {
    return this.sessions.interrupt(this.name, opts);
  }
  close(): Promise<void> {
    return this.sessions.close(this.name);
  }
}

export class RemoteSessions {
  constructor(private readonly rt: HttpClient) {}

  /** Start a persistent bash; `output` is what its startup printed. */
  async create(
    name = "default",
    opts: { startupSource?: string[]; startupTimeoutMs?: number } = {},
  ): Promise<{ session: RemoteSession; output: string }> {
    const r = await this.rt.json<{ output: string }>(
      "POST",
      "/create_session",
      {
        startup_source: opts.startupSource ?? [],
        session: name,
        session_type: "bash",
        startup_timeout: (opts.startupTimeoutMs ?? 10_000) / 1000,
      },
      { what: `create session ${name}` },
    );
    return { session: new RemoteSession(this, name), output: r.output };
  }

  get(name = "default"): RemoteSession {
    return new RemoteSession(this, name);
  }

  async run(name: string, command: string, opts: RemoteRunOptions = {}): Promise<RunResult> {
    const r = await this.rt.json<Observation>(
      "POST",
      "/run_in_session",
      {
        command,
        session: name,
        timeout: seconds(opts.timeoutMs),
        is_interactive_command: opts.interactive ?? false,
        is_interactive_quit: opts.interactiveQuit ?? false,
        check: opts.check ?? "raise",
        error_msg: opts.errorMsg ?? "",
        expect: opts.expect ?? [],
        action_type: "bash",
      },
      { what: `run in session ${name}` },
    );
    return { output: r.output, exitCode: r.exit_code, expectString: r.expect_string };
  }

  async interrupt(
    name = "default",
    opts: { timeoutMs?: number; retries?: number; expect?: string[] } = {},
  ): Promise<RunResult> {
    const r = await this.rt.json<Observation>(
      "POST",
      "/run_in_session",
      {
        session: name,
        timeout: (opts.timeoutMs ?? 200) / 1000,
        n_retry: opts.retries ?? 3,
        expect: opts.expect ?? [],
        action_type: "bash_interrupt",
      },
      { what: `interrupt session ${name}` },
    );
    return { output: r.output, exitCode: r.exit_code, expectString: r.expect_string };
  }

  async close(name = "default"): Promise<void> {
    await this.rt.json(
      "POST",
      "/close_session",
      { session: name, session_type: "bash" },
      { what: `close session ${name}` },
    );
  }

  /** Close every session (the sandbox stays). */
  async closeAll(): Promise<void> {
    await this.rt.json("POST", "/close", undefined, { what: "close sessions" });
  }
}

export class RemoteFiles {
  constructor(
    private readonly rt: HttpClient,
    private readonly api: HttpClient,
    private readonly id: string,
    private readonly exec: (cmd: string[]) => Promise<RemoteExecResult>,
  ) {}

  /** Text of a file (UTF-8; `\r\n` becomes `\n`, as SWE-ReX's read_file does). */
  async read(path: string, opts: { encoding?: string; errors?: string } = {}): Promise<string> {
    const r = await this.rt.json<{ content: string }>(
      "POST",
      "/read_file",
      { path, encoding: opts.encoding ?? null, errors: opts.errors ?? null },
      { what: `read ${path}` },
    );
    return r.content;
  }

  /** Bytes of a file, unchanged. */
  async readBytes(path: string): Promise<Buffer> {
    const res = await this.api.fetch("GET", `/sandboxes/${this.id}/files?path=${encodeURIComponent(path)}`, undefined, {
      what: `read ${path}`,
    });
    if (!res.ok) await this.api.read(res, `read ${path}`);
    return Buffer.from(await res.arrayBuffer());
  }

  /** Write a file (parents created). Binary content goes through /upload. */
  async write(path: string, content: string | Buffer): Promise<void> {
    if (typeof content === "string") {
      await this.rt.json("POST", "/write_file", { content, path }, { what: `write ${path}` });
      return;
    }
    await this.send(content, basename(path) || "file", path, false);
  }

  /** Copy a local file or directory into the sandbox at `target` (a directory travels as a zip). */
  async upload(localPath: string, target: string): Promise<void> {
    if (statSync(localPath).isDirectory())
      await this.send(zipDirectory(localPath), "zipped_transfer.zip", target, true);
    else await this.send(readFileSync(localPath), basename(localPath), target, false);
  }

  private async send(data: Buffer, filename: string, target: string, unzip: boolean): Promise<void> {
    const form = new FormData();
    form.append("file", new Blob([data]), filename);
    form.append("target_path", target);
    form.append("unzip", unzip ? "true" : "false");
    const res = await this.rt.fetch("POST", "/upload", form, { what: `upload to ${target}` });
    await this.rt.read(res, `upload to ${target}`);
  }

  async exists(path: string): Promise<boolean> {
    return (await this.exec(["/usr/bin/test", "-e", path])).exitCode === 0;
  }

  async mkdir(path: string): Promise<void> {
    const r = await this.exec(["/bin/mkdir", "-p", "--", path]);
    if (r.exitCode !== 0) throw new NotFoundError(`mkdir ${path} failed: ${r.stderr.trim()}`);
  }

  async remove(path: string): Promise<void> {
    const r = await this.exec(["/bin/rm", "-rf", "--", path]);
    if (r.exitCode !== 0) throw new NotFoundError(`remove ${path} failed: ${r.stderr.trim()}`);
  }
}

export class RemoteSandbox implements AsyncDisposable {
  readonly id: string;
  /** SWE-ReX runtime URL of this sandbox (give it to a `RemoteRuntime`). */
  readonly runtimeUrl: string;
  readonly commands: { run: (cmd: string | string[], opts?: RemoteExecOptions) => Promise<RemoteExecResult> };
  readonly sessions: RemoteSessions;
  readonly files: RemoteFiles;
  private closed = false;

  private constructor(
    private readonly api: HttpClient,
    readonly info: SandboxInfo,
    apiKey: string | undefined,
    requestTimeoutMs: number | undefined,
  ) {
    this.id = info.id;
    this.runtimeUrl = info.runtime_url;
    const rt = new HttpClient(`${api.base}/sandboxes/${info.id}`, apiKey, requestTimeoutMs);
    this.commands = { run: (cmd, o) => this.exec(cmd, o) };
    this.sessions = new RemoteSessions(rt);
    this.files = new RemoteFiles(rt, api, info.id, (cmd) => this.exec(cmd));
  }

  /** Create a sandbox on the server. */
  static async create(o: RemoteSandboxCreateOptions): Promise<RemoteSandbox> {
    const apiKey = keyFor(o);
    const api = new HttpClient(o.url, apiKey, o.requestTimeoutMs);
    const body: Record<string, unknown> = {};
    if (o.dir !== undefined) body.dir = o.dir;
    if (o.instanceId !== undefined) body.instance_id = o.instanceId;
    if (o.envKey !== undefined) body.env_key = o.envKey;
    if (o.network !== undefined) body.network = o.network;
    if (o.limits) {
      body.limits = {
        memory_bytes: o.limits.memoryBytes,
        pids: o.limits.pids,
        cpu_seconds: o.limits.cpuSeconds,
        disk_bytes: o.limits.diskBytes,
      };
    }
    if (o.timeoutMs !== undefined) body.ttl_seconds = o.timeoutMs / 1000;
    if (o.idleTimeoutMs !== undefined) body.idle_timeout_seconds = o.idleTimeoutMs / 1000;
    if (o.env) body.env = o.env;
    if (o.cwd) body.cwd = o.cwd;
    if (o.labels) body.labels = o.labels;
    const info = await api.json<SandboxInfo>("POST", "/sandboxes", body, { what: "create sandbox" });
    return new RemoteSandbox(api, info, apiKey, o.requestTimeoutMs);
  }

  /** Attach to an existing sandbox by id. */
  static async connect(o: ConnectOptions & { id: string }): Promise<RemoteSandbox> {
    const apiKey = keyFor(o);
    const api = new HttpClient(o.url, apiKey, o.requestTimeoutMs);
    const info = await api.json<SandboxInfo>("GET", `/sandboxes/${encodeURIComponent(o.id)}`, undefined, {
      what: `sandbox ${o.id}`,
    });
    return new RemoteSandbox(api, info, apiKey, o.requestTimeoutMs);
  }

  static async list(o: ConnectOptions): Promise<SandboxInfo[]> {
    const api = new HttpClient(o.url, keyFor(o), o.requestTimeoutMs);
    return (await api.json<{ sandboxes: SandboxInfo[] }>("GET", "/sandboxes", undefined, { what: "list sandboxes" }))
      .sandboxes;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Fresh server-side information (sessions, last activity...). */
  refresh(): Promise<SandboxInfo> {
    return this.api.json<SandboxInfo>("GET", `/sandboxes/${this.id}`, undefined, { what: `sandbox ${this.id}` });
  }

  async isAlive(): Promise<boolean> {
    try {
      const r = await this.api.json<{ is_alive: boolean }>("GET", `/sandboxes/${this.id}/is_alive`, undefined, {
        timeoutMs: 5000,
      });
      return r.is_alive;
    } catch {
      return false;
    }
  }

  /** One command in a fresh process: a string runs under `bash -c`, an array as is. A timeout gives exit 124. */
  async exec(cmd: string | string[], o: RemoteExecOptions = {}): Promise<RemoteExecResult> {
    const r = await this.api.json<{
      exit_code: number;
      stdout: string;
      stderr: string;
      timed_out: boolean;
      truncated: boolean;
      limit: LimitHit | null;
      signal: string | null;
      duration_ms: number;
    }>(
      "POST",
      `/sandboxes/${this.id}/exec`,
      {
        command: cmd,
        timeout_ms: o.timeoutMs,
        cwd: o.cwd,
        env: o.env,
        stdin: o.stdin,
        merge_output: o.mergeOutput,
        output_limit_bytes: o.outputLimitBytes,
      },
      { what: "exec" },
    );
    return {
      exitCode: r.exit_code,
      stdout: r.stdout,
      stderr: r.stderr,
      timedOut: r.timed_out,
      truncated: r.truncated,
      ...(r.limit ? { limit: r.limit } : {}),
      ...(r.signal ? { signal: r.signal } : {}),
      durationMs: r.duration_ms,
    };
  }

  /** Grade the workspace against its instance's tests (instance sandboxes; the server's provider decides the shape). */
  async evaluate<T = unknown>(): Promise<T> {
    const r = await this.api.json<{ result: T }>("POST", `/sandboxes/${this.id}/evaluate`, undefined, {
      what: "evaluate",
    });
    return r.result;
  }

  /** The workspace's changes as a patch (e.g. `git diff` of /testbed). */
  async diff(): Promise<string> {
    return (await this.api.json<{ diff: string }>("GET", `/sandboxes/${this.id}/diff`, undefined, { what: "diff" }))
      .diff;
  }

  /** Delete the sandbox on the server. Idempotent; a sandbox already gone is not an error. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.api.json("DELETE", `/sandboxes/${this.id}`, undefined, { what: `delete sandbox ${this.id}` });
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
