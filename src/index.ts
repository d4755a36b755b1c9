/**
 * minisandbox's public TypeScript API: in-process sandboxes (`Sandbox`), the SDK of a server (`RemoteSandbox`),
 * environments, datasets and evaluation. ESM only: `import { Sandbox } from "minisandbox"`.
 */
export { Sandbox } from "./env/sandbox-api.js";
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
  CheckpointNotFoundError,
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
export {
  builtInstances,
  planPrepare,
  prepareInstances,
  renderPrepare,
  type PreparePlan,
  type PrepareResult,
} from "./env/prepare.js";
export {
  openSandbox,
  resolveWorkspace,
  Workspace,
  type SandboxRequest,
  type StartOptions,
  type WorkspaceKind,
  type WorkspaceParts,
} from "./env/workspace.js";
export { ensurePresent, type Presence, type PresenceOptions } from "./env/environments.js";
export { makePresent, type MadePresent, type RowPresence, type RowTarget } from "./env/present.js";
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
  planEvaluation,
  renderRun,
  renderValidation,
  runEvaluation,
  runResultJson,
  summarizeEvaluation,
  validateInstances,
  validationSummary,
} from "./eval/index.js";
export type {
  EvaluateOptions,
  EvaluateResult,
  EvaluateTarget,
  EvaluationPlan,
  EvalSettings,
  RunEvaluationOptions,
} from "./eval/index.js";
export { plan as planContract } from "./wire/index.js";
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
