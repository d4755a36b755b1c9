/**
 * `RemoteSandbox`: a sandbox on a minisandbox server, with the shape of the in-process `Sandbox` (E2B-like):
 * `commands.run`, `sessions`, `files`, `evaluate`, `diff`, `close` / `await using`. Requests and answers follow the
 * wire contract (src/wire); answers are camelCase, as in-process.
 */
import { InvalidInputError } from "../errors.js";
import { type Limits, validateLimits } from "../sandbox/limits.js";
import { type CamelOf, type InOf, native, swerex } from "../wire/index.js";
import { NotFoundError } from "./errors.js";
import { HttpClient } from "./http.js";
import {
  type RemoteCommandHandle,
  type RemoteExecOptions,
  type RemoteExecResult,
  remoteExec,
  remoteStart,
} from "./remote-exec.js";
import { RemoteFiles } from "./remote-files.js";
import { RemoteSessions } from "./remote-sessions.js";
import { readTokenFile } from "../wire/token-file.js";

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
  /** Host directory (on the server, under one of its --allow-dir roots) mounted copy-on-write at /testbed. */
  dir?: string;
  /** Dataset instance (the server's `--dataset`). */
  instanceId?: string;
  /** Environment key (a built layer). */
  envKey?: string;
  network?: boolean;
  limits?: Pick<Limits, "memoryBytes" | "pids" | "cpuSeconds" | "diskBytes" | "cpus">;
  /** The server closes the sandbox after this long (TTL). */
  timeoutMs?: number;
  /** ... or after this long without requests. */
  idleTimeoutMs?: number;
  env?: Record<string, string>;
  cwd?: string;
  labels?: Record<string, string>;
  /** A host Python on the server (e.g. "3.11"), first on PATH as python, python3, pip (not with an instance). */
  python?: string;
  /** A SWE-ReX client's `close()` on `runtimeUrl` deletes the sandbox (default: closes its sessions only). */
  deleteOnClose?: boolean;
}

/** E2B's `commands`: `run(cmd, opts)` → the result; `run(cmd, { background: true })` → a handle (wait, kill). */
export interface RemoteCommands {
  run(cmd: string | string[], opts: RemoteExecOptions & { background: true }): Promise<RemoteCommandHandle>;
  run(cmd: string | string[], opts?: RemoteExecOptions & { background?: false }): Promise<RemoteExecResult>;
}

/** What the server says about a sandbox (GET /sandboxes/:id), camelCase. */
export type SandboxInfo = CamelOf<typeof native.SandboxInfo>;

/** The given key, else the home's token file. */
const keyFor = (o: ConnectOptions): string | undefined => o.apiKey ?? readTokenFile(o.home);

/** A duration in milliseconds: positive and finite, else one line naming the option. */
function checkMs(value: number | undefined, field: string): void {
  if (value === undefined) return;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0)
    throw new InvalidInputError(`${field} must be a positive number of milliseconds, got ${String(value)}`, { field });
}

/** Everything the server would refuse, refused before sending (the in-process API's own rules for limits). */
function createBody(o: RemoteSandboxCreateOptions): InOf<typeof native.CreateSandboxRequest> {
  const l = o.limits === undefined ? undefined : validateLimits(o.limits);
  checkMs(o.timeoutMs, "timeoutMs");
  checkMs(o.idleTimeoutMs, "idleTimeoutMs");
  return {
    dir: o.dir,
    instance_id: o.instanceId,
    env_key: o.envKey,
    network: o.network,
    limits: l && {
      memory_bytes: l.memoryBytes,
      pids: l.pids,
      cpu_seconds: l.cpuSeconds,
      disk_bytes: l.diskBytes,
      cpus: l.cpus,
    },
    ttl_seconds: o.timeoutMs === undefined ? undefined : o.timeoutMs / 1000,
    idle_timeout_seconds: o.idleTimeoutMs === undefined ? undefined : o.idleTimeoutMs / 1000,
    env: o.env,
    cwd: o.cwd,
    labels: o.labels,
    python: o.python,
    delete_on_close: o.deleteOnClose,
  };
}

export class RemoteSandbox implements AsyncDisposable {
  readonly id: string;
  /** SWE-ReX runtime URL of this sandbox (give it to a `RemoteRuntime`). */
  readonly runtimeUrl: string;
  readonly commands: RemoteCommands;
  readonly sessions: RemoteSessions;
  readonly files: RemoteFiles;
  private closed = false;
  private latest: SandboxInfo;

  private constructor(
    private readonly api: HttpClient,
    info: SandboxInfo,
    apiKey: string | undefined,
    requestTimeoutMs: number | undefined,
  ) {
    this.latest = info;
    this.id = info.id;
    this.runtimeUrl = info.runtimeUrl;
    const rt = new HttpClient(`${api.base}/sandboxes/${info.id}`, apiKey, requestTimeoutMs);
    const run = (cmd: string | string[], o?: RemoteExecOptions & { background?: boolean }) => {
      if (!o?.background) return this.exec(cmd, o);
      const { background: _, ...rest } = o;
      return remoteStart(this.api, this.id, cmd, rest);
    };
    this.commands = { run } as RemoteCommands;
    this.sessions = new RemoteSessions(rt);
    this.files = new RemoteFiles(rt, api, info.id, (cmd) => this.exec(cmd));
  }

  /** Create a sandbox on the server. */
  static async create(o: RemoteSandboxCreateOptions): Promise<RemoteSandbox> {
    const apiKey = keyFor(o);
    const api = new HttpClient(o.url, apiKey, o.requestTimeoutMs);
    const info = await api.call("POST", "/sandboxes", native.SandboxInfo, createBody(o), { what: "create sandbox" });
    return new RemoteSandbox(api, native.SandboxInfo.toCamel(info), apiKey, o.requestTimeoutMs);
  }

  /** Attach to an existing sandbox by id. */
  static async connect(o: ConnectOptions & { id: string }): Promise<RemoteSandbox> {
    const apiKey = keyFor(o);
    const api = new HttpClient(o.url, apiKey, o.requestTimeoutMs);
    const path = `/sandboxes/${encodeURIComponent(o.id)}`;
    const info = await api.call("GET", path, native.SandboxInfo, undefined, { what: `sandbox ${o.id}` });
    return new RemoteSandbox(api, native.SandboxInfo.toCamel(info), apiKey, o.requestTimeoutMs);
  }

  /** The sandboxes this token may see (all of them for an admin token). */
  static async list(o: ConnectOptions): Promise<SandboxInfo[]> {
    const api = new HttpClient(o.url, keyFor(o), o.requestTimeoutMs);
    const r = await api.call("GET", "/sandboxes", native.SandboxList, undefined, { what: "list sandboxes" });
    return r.sandboxes.map((s) => native.SandboxInfo.toCamel(s));
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** What the server said last about the sandbox: at creation, then at each `refresh()` and `setTimeout()`. */
  get info(): SandboxInfo {
    return this.latest;
  }

  /** Fresh server-side information (sessions, last activity, expiry...); `info` is this answer from now on. */
  async refresh(): Promise<SandboxInfo> {
    const what = `sandbox ${this.id}`;
    const info = await this.api.call("GET", `/sandboxes/${this.id}`, native.SandboxInfo, undefined, { what });
    this.latest = native.SandboxInfo.toCamel(info);
    return this.latest;
  }

  async isAlive(): Promise<boolean> {
    try {
      const path = `/sandboxes/${this.id}/is_alive`;
      return (await this.api.call("GET", path, swerex.IsAliveResponse, undefined, { timeoutMs: 5000 })).is_alive;
    } catch {
      return false;
    }
  }

  /** One command in a fresh process: a string runs under `bash -c`, an array as is. A timeout gives exit 124. */
  exec(cmd: string | string[], o: RemoteExecOptions = {}): Promise<RemoteExecResult> {
    return remoteExec(this.api, this.id, cmd, o);
  }

  /** Grade the workspace against its instance's tests (instance sandboxes; the server's provider decides the shape). */
  async evaluate<T = unknown>(): Promise<T> {
    const path = `/sandboxes/${this.id}/evaluate`;
    return (await this.api.call("POST", path, native.EvaluateResponse, undefined, { what: "evaluate" })).result as T;
  }

  /** The workspace's changes as a patch (e.g. `git diff` of /testbed). */
  async diff(): Promise<string> {
    return (await this.api.call("GET", `/sandboxes/${this.id}/diff`, native.DiffResponse, undefined, { what: "diff" }))
      .diff;
  }

  /** E2B's `setTimeout`: the sandbox now ends `timeoutMs` from now (sooner or later than before). */
  async setTimeout(timeoutMs: number): Promise<SandboxInfo> {
    checkMs(timeoutMs, "timeoutMs");
    const body = { ttl_seconds: timeoutMs / 1000 };
    const what = `set the timeout of sandbox ${this.id}`;
    const info = await this.api.call("POST", `/sandboxes/${this.id}/timeout`, native.SandboxInfo, body, { what });
    this.latest = native.SandboxInfo.toCamel(info);
    return this.latest;
  }

  /** E2B's `kill`: the same as `close()`. */
  kill(): Promise<void> {
    return this.close();
  }

  /** Delete the sandbox on the server. Idempotent; a sandbox already gone is not an error. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      const what = `delete sandbox ${this.id}`;
      await this.api.call("DELETE", `/sandboxes/${this.id}`, native.DeleteResponse, undefined, { what });
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
