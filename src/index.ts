/** minisandbox's public TypeScript API. */
import { openWorkspace, type WorkspaceRequest } from "./env/workspace.js";
import { Sandbox as SandboxCore, type SandboxOptions } from "./sandbox/sandbox.js";

/** What `Sandbox.create` takes: a directory and mounts (`SandboxOptions`), or a task (`WorkspaceRequest`). */
export type SandboxRequest = SandboxOptions | WorkspaceRequest;

/** One running isolated workspace (see src/sandbox). */
export type Sandbox = SandboxCore;

/**
 * `Sandbox.create({ dir, limits })` starts a sandbox on a directory; `Sandbox.create({ instance, dataset })` one on
 * a task's environment, through `openWorkspace` (src/env/workspace.ts). `x instanceof Sandbox` works as for a class.
 */
export const Sandbox = {
  create(request: SandboxRequest = {}): Promise<Sandbox> {
    const task = "instance" in request || "envKey" in request;
    return task ? openWorkspace(request as WorkspaceRequest) : SandboxCore.create(request as SandboxOptions);
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
  ForbiddenError,
  InvalidInputError,
  LayerUnavailableError,
  LimitError,
  MinisandboxError,
  NotFoundError,
  NotImplementedError,
  PeerNotAllowedError,
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
