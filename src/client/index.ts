/** Public API of client/: the TypeScript SDK for a minisandbox server. */
export {
  RemoteSandbox,
  RemoteSessions,
  RemoteSession,
  RemoteFiles,
  type ConnectOptions,
  type RemoteSandboxCreateOptions,
  type SandboxInfo,
  type RemoteExecOptions,
  type RemoteExecResult,
  type RemoteRunOptions,
} from "./remote-sandbox.js";
export {
  AuthError,
  ForbiddenError,
  CommandTimeoutError,
  RemoteRuntimeError,
  errorFromResponse,
  InvalidInputError,
  LimitError,
  MinisandboxError,
  NotFoundError,
  SandboxError,
  TimeoutError,
  SessionError,
} from "./errors.js";
export { HttpClient } from "./http.js";
export { readTokenFile, tokenFilePath } from "./token-file.js";
export { buildZip, zipDirectory, type ZipEntry } from "./zip.js";
