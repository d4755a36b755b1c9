/**
 * The native lifecycle / exec / files API of `minisandbox serve` (snake_case JSON, like the rest of the wire):
 * every request and response model declared once, for the server's validation and the SDK's calls.
 */
import { type In, model, type Out } from "./model.js";
import type { Loc, ValidationDetail } from "./schema.js";
import { t } from "./types.js";
import { LAYER_MODELS, PeerSource } from "./layers.js";

export * from "./layers.js";

const MAX = Number.MAX_SAFE_INTEGER;
/** A positive whole number (bytes, processes, seconds) a kernel interface will accept. */
const count = () => t.int().gt(0).le(MAX);

export const LimitsRequest = model(
  "LimitsRequest",
  {
    memory_bytes: count().optional(),
    pids: count().optional(),
    cpu_seconds: count().optional(),
    disk_bytes: count().optional(),
    /** CPUs the sandbox may use at most (a CFS quota; 0.5 = half of one CPU). */
    cpus: t.float().gt(0).le(MAX).optional(),
  },
  { extra: "forbid", objectError: "dict" },
);

function oneSource(v: Record<string, unknown>, raw: Record<string, unknown>, loc: Loc, errors: ValidationDetail[]) {
  const given = ["dir", "instance_id", "env_key", "image"].filter((k) => v[k] !== undefined);
  if (given.length > 1)
    errors.push({
      type: "value_error",
      loc,
      msg: `Value error, give at most one of dir, instance_id, env_key, image (got ${given.join(", ")})`,
      input: raw,
    });
}

export const CreateSandboxRequest = model(
  "CreateSandboxRequest",
  {
    dir: t.str().optional(),
    instance_id: t.str().optional(),
    env_key: t.str().optional(),
    /** An OCI image in this server's store (by reference or id): its root filesystem, Env, WorkingDir and User. */
    image: t.str().optional(),
    /**
     * With `image`: its testbed's git history, `chronological` (the default: HEAD's commit alone) or
     * `full` (the image's own .git). A dataset row's is its spec's (the server's `--specs`).
     */
    history: t.literal("chronological", "full").optional(),
    network: t.bool().optional(),
    limits: LimitsRequest.optional(),
    ttl_seconds: t.float().gt(0).optional(),
    idle_timeout_seconds: t.float().gt(0).optional(),
    env: t.dict(t.str()).optional(),
    cwd: t.str().optional(),
    labels: t.dict(t.str()).optional(),
    /**
     * A host Python (e.g. "3.11") mounted read-only, first on PATH as python, python3, pip: for a `dir` or an empty
     * sandbox; refused (400) with `instance_id`, `env_key` or `image`, whose environment runs its own interpreter.
     */
    python: t.str().optional(),
    /** SWE-ReX's `POST …/close` deletes the sandbox (default: it closes the sessions only, as SWE-ReX's server). */
    delete_on_close: t.bool().optional(),
    /** Peers to fetch the environment's layer from when this server's node lacks it (allowed peers only). */
    sources: t.list(PeerSource).optional(),
  },
  { extra: "forbid", objectError: "dict", absentBody: "empty", check: oneSource },
);

export const SandboxLimits = model("SandboxLimits", {
  memory_bytes: t.int().nullable(),
  pids: t.int().nullable(),
  cpu_seconds: t.float().nullable(),
  disk_bytes: t.int().nullable(),
  /** A CFS quota in CPUs (servers before it existed do not send it). */
  cpus: t.float().nullable().default(null),
});

export const SandboxInfo = model("SandboxInfo", {
  id: t.str(),
  /** SWE-ReX runtime URL of this sandbox (give it to a `RemoteRuntime`). */
  runtime_url: t.str(),
  /** Name of the principal (token) that created it. */
  owner: t.str(),
  created_at: t.str(),
  expires_at: t.str().nullable(),
  idle_timeout_seconds: t.float().nullable(),
  last_active_at: t.str(),
  busy: t.bool(),
  /** Where its workspace came from (the one door's kinds: src/env/workspace.ts). */
  source: t.literal("dir", "instance", "env_key", "image", "empty"),
  dir: t.str().nullable(),
  instance_id: t.str().nullable(),
  env_key: t.str().nullable(),
  network: t.bool(),
  limits: SandboxLimits,
  labels: t.dict(t.str()),
  sessions: t.list(t.str()),
  default: t.bool(),
  meta: t.dict(t.any()),
});

export const SandboxList = model("SandboxList", { sandboxes: t.list(SandboxInfo) });
export const DeleteResponse = model("DeleteResponse", { id: t.str(), deleted: t.bool() });

export const ExecRequest = model(
  "ExecRequest",
  {
    command: t.strOrList(),
    timeout_ms: t.float().gt(0).optional(),
    cwd: t.str().optional(),
    env: t.dict(t.str()).optional(),
    stdin: t.str().optional(),
    merge_output: t.bool().optional(),
    output_limit_bytes: count().optional(),
  },
  { objectError: "dict", check: nonEmptyCommand },
);

function nonEmptyCommand(v: Record<string, unknown>, _raw: unknown, loc: Loc, errors: ValidationDetail[]) {
  if (Array.isArray(v.command) && v.command.length === 0)
    errors.push({
      type: "too_short",
      loc: [...loc, "command"],
      msg: "List should have at least 1 item after validation, not 0",
      input: [],
    });
}

/** The in-process `ExecResult`, minus the raw byte buffers. */
export const ExecResponse = model("ExecResponse", {
  exit_code: t.int(),
  stdout: t.str(),
  stderr: t.str(),
  timed_out: t.bool(),
  truncated: t.bool(),
  limit: t.literal("memory", "pids", "cpu", "timeout").nullable(),
  signal: t.str().nullable(),
  duration_ms: t.float(),
});

export const EvaluateResponse = model("EvaluateResponse", { id: t.str(), instance_id: t.str(), result: t.any() });
export const DiffResponse = model("DiffResponse", { id: t.str(), diff: t.str() });
export const InstancesResponse = model("InstancesResponse", { instances: t.list(t.str()) });
export const HealthResponse = model("HealthResponse", { status: t.literal("ok") });

/** Every native error: a message and a stable code (the HTTP status follows from the code). */
export const ErrorResponse = model("ErrorResponse", { detail: t.any(), code: t.str().optional() });

/**
 * `POST /sandboxes/:id/exec/stream`: an `ExecRequest` answered as NDJSON, one object per line: `{"stdout": text}` and
 * `{"stderr": text}` as the command writes, then `{"result": ExecResponse}` (or `{"error": ErrorResponse}`). A client
 * that disconnects kills the command (that is how a background command is killed).
 */
export const ExecStreamLine = model("ExecStreamLine", {
  stdout: t.str().optional(),
  stderr: t.str().optional(),
  result: ExecResponse.optional(),
  error: ErrorResponse.optional(),
});

export const FileEntry = model("FileEntry", {
  name: t.str(),
  path: t.str(),
  type: t.literal("file", "dir", "symlink", "other"),
  size: t.int(),
  mode: t.int(),
});
/** `GET /sandboxes/:id/files/list?path=`: the directory's entries (not recursive). */
export const FileListResponse = model("FileListResponse", { entries: t.list(FileEntry) });
/** `POST /sandboxes/:id/timeout`: the sandbox now ends this long from now (E2B's setTimeout). Answer: SandboxInfo. */
export const SetTimeoutRequest = model(
  "SetTimeoutRequest",
  { ttl_seconds: t.float().gt(0) },
  { extra: "forbid", objectError: "dict" },
);

export type CreateSandboxRequest = Out<typeof CreateSandboxRequest.shape>;
export type FileListResponse = Out<typeof FileListResponse.shape>;
export type CreateSandboxIn = In<typeof CreateSandboxRequest.shape>;
export type SandboxInfo = Out<typeof SandboxInfo.shape>;
export type ExecRequest = Out<typeof ExecRequest.shape>;
export type ExecIn = In<typeof ExecRequest.shape>;
export type ExecResponse = Out<typeof ExecResponse.shape>;

export const NATIVE_MODELS = {
  LimitsRequest,
  CreateSandboxRequest,
  SandboxLimits,
  SandboxInfo,
  SandboxList,
  DeleteResponse,
  ExecRequest,
  ExecResponse,
  EvaluateResponse,
  DiffResponse,
  InstancesResponse,
  HealthResponse,
  ErrorResponse,
  ExecStreamLine,
  FileEntry,
  FileListResponse,
  SetTimeoutRequest,
  ...LAYER_MODELS,
} as const;
