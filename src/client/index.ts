/** Public API of client/: the TypeScript SDK for a minisandbox server. */
export {
  RemoteSandbox,
  type RemoteCommands,
  type ConnectOptions,
  type RemoteSandboxCreateOptions,
  type SandboxInfo,
} from "./remote-sandbox.js";
export { RemoteSessions, RemoteSession, type RemoteRunOptions, type InterruptOptions } from "./remote-sessions.js";
export { RemoteFiles } from "./remote-files.js";
export type { RemoteCommandHandle, RemoteExecOptions, RemoteExecResult } from "./remote-exec.js";
export {
  RolloutClient,
  RemoteRolloutGroup,
  RemoteRollout,
  type RemoteRewardOptions,
  type StartGroupOptions,
} from "./rollouts.js";
export {
  AuthError,
  UnauthorizedError,
  ForbiddenError,
  CommandTimeoutError,
  RemoteRuntimeError,
  errorFromResponse,
  InvalidInputError,
  RequestValidationError,
  LimitError,
  MinisandboxError,
  NotFoundError,
  SandboxNotFoundError,
  CheckpointNotFoundError,
  NotImplementedError,
  SandboxError,
  SandboxLostError,
  TaskInvalidError,
  UnavailableError,
  UploadTooLargeError,
  TimeoutError,
  SessionError,
} from "./errors.js";
export { HttpClient } from "./http.js";
export { readTokenFile, tokenFilePath } from "../wire/token-file.js";
export { buildZip, zipDirectory, type ZipEntry } from "./zip.js";
