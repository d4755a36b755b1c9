/**
 * minisandbox's public TypeScript API: in-process sandboxes (`Sandbox`), the SDK of a server (`RemoteSandbox`),
 * environments, datasets and evaluation. ESM only: `import { Sandbox } from "minisandbox"`.
 */
import { openWorkspace, type WorkspaceRequest } from "./env/workspace.js";
import { pythonOnPath } from "./env/python-on-path.js";
import { Sandbox as SandboxCore, type SandboxOptions } from "./sandbox/sandbox.js";
import { resolveHome } from "./util/home.js";

/** A directory sandbox may also ask for a host Python first on PATH (`python`, `python3`, `pip`), e.g. "3.11". */
export type DirSandboxRequest = SandboxOptions & { python?: string };

/** What `Sandbox.create` takes: a directory and mounts (`SandboxOptions`), or a task (`WorkspaceRequest`). */
export type SandboxRequest = DirSandboxRequest | WorkspaceRequest;

async function createDirSandbox(request: DirSandboxRequest): Promise<SandboxCore> {
  const { python, ...options } = request;
  if (python === undefined) return SandboxCore.create(options);
  const py = await pythonOnPath(python, resolveHome(options.home));
  return SandboxCore.create({
    ...options,
    toolchains: [...(options.toolchains ?? []), ...py.toolchains],
    pathPrepend: [...py.pathPrepend, ...(options.pathPrepend ?? [])],
  });
}

/** One running isolated workspace (see src/sandbox). */
export type Sandbox = SandboxCore;

/**
 * `Sandbox.create({ dir, limits })` starts a sandbox on a directory; `Sandbox.create({ instance, dataset })` one on
 * a task's environment, through `openWorkspace` (src/env/workspace.ts). `x instanceof Sandbox` works as for a class.
 */
export const Sandbox = {
  create(request: SandboxRequest = {}): Promise<Sandbox> {
    const task = "instance" in request || "envKey" in request;
    return task ? openWorkspace(request as WorkspaceRequest) : createDirSandbox(request as DirSandboxRequest);
  },
  [Symbol.hasInstance](value: unknown): value is SandboxCore {
    return value instanceof SandboxCore;
  },
};

export { SessionManager, type SandboxOptions, type SessionCreateOptions } from "./sandbox/sandbox.js";
export type { ExecOptions, ExecResult, LimitHit } from "./sandbox/exec.js";
export type { Limits } from "./sandbox/limits.js";
export type { FileEntry } from "./sandbox/files.js";
export {
  BashSession,
  type RunOptions as SessionRunOptions,
  type RunResult as SessionRunResult,
} from "./session/bash-session.js";
export {
  AuthError,
  BuildError,
  CommandTimeoutError,
  DiskFullError,
  ForbiddenError,
  ImageInvalidError,
  ImageNotFoundError,
  InvalidInputError,
  LayerUnavailableError,
  LimitError,
  MinisandboxError,
  NotFoundError,
  NotImplementedError,
  PeerNotAllowedError,
  RegistryDeniedError,
  RegistryError,
  RemoteRuntimeError,
  RequestValidationError,
  SandboxError,
  SandboxLostError,
  SandboxNotFoundError,
  SessionError,
  StoreCorruptError,
  TarFormatError,
  TaskInvalidError,
  TimeoutError,
  UnauthorizedError,
  UnavailableError,
  UploadTooLargeError,
  SWEREX_CLASSES,
  errorCode,
  httpStatus,
  type ErrorCode,
  type SessionErrorCode,
} from "./errors.js";
export { loadDataset, type Instance } from "./tasks/index.js";
export { specForInstance, specKey } from "./env/spec.js";
export { builtInstances, prepareInstances, renderPrepare, type PrepareResult } from "./env/prepare.js";
export { openWorkspace, resolveWorkspace, type Workspace, type WorkspaceRequest } from "./env/workspace.js";
export {
  acquireImageRootfs,
  canonicalReference,
  getImage,
  importImage,
  listStoredImages,
  loadRegistryConfig,
  parsePlatform,
  parseReference,
  pullImage,
  removeStoredImage,
  type ImageEvent,
  type ImageRootfs,
  type ImportOptions,
  type ImportResult,
  type PullOptions,
  type PullResult,
  type RegistryConfig,
} from "./env/images/index.js";
export type { ImageConfig, ImageRecord } from "./env/store/index.js";
export { runDoctor } from "./sandbox/doctor.js";
export {
  evaluate,
  evaluateAttempt,
  renderRun,
  renderValidation,
  runEvaluation,
  runResultJson,
  validateInstances,
  validationSummary,
} from "./eval/index.js";
export type { EvaluateOptions, EvaluateResult, EvaluateTarget } from "./eval/index.js";
export {
  RemoteSandbox,
  RemoteSessions,
  RemoteSession,
  RemoteFiles,
  HttpClient,
  errorFromResponse,
  readTokenFile,
  tokenFilePath,
  buildZip,
  zipDirectory,
  RolloutClient,
  RemoteRolloutGroup,
  RemoteRollout,
  type StartGroupOptions,
  type RemoteCommands,
  type RemoteCommandHandle,
  type RemoteExecOptions,
  type RemoteExecResult,
  type RemoteRunOptions,
  type InterruptOptions,
  type ConnectOptions,
  type RemoteSandboxCreateOptions,
  type SandboxInfo,
  type ZipEntry,
} from "./client/index.js";
export { validateLimits } from "./sandbox/limits.js";
export { findToolchain, listToolchains, type Toolchain } from "./env/toolchains.js";
export { pythonOnPath, type PythonOnPath } from "./env/python-on-path.js";
export { startServer, type RunningServer, type ServerOptions } from "./server/index.js";
export {
  RolloutEngine,
  RolloutGroup,
  Rollout,
  classifyOutcome,
  type GoldVerdict,
  type GroupInfo,
  type GroupRequest,
  type InfraFailureKind,
  type PrewarmReport,
  type RewardMode,
  type RewardOptions,
  type RolloutEngineOptions,
  type RolloutInfo,
  type RolloutOutcome,
} from "./rollout/index.js";
