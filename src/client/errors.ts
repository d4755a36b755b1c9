/**
 * Errors the SDK throws: the product's one hierarchy (`src/errors.ts`), the same classes as the in-process API, so
 * code written against `Sandbox` catches the same things against `RemoteSandbox`. A native error answer is turned
 * back into its class by its `code`; a SWE-ReX 511 by its `class_path`.
 */
import {
  AuthError,
  CheckpointNotFoundError,
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
  SWEREX_CLASSES,
  TaskInvalidError,
  TimeoutError,
  UnauthorizedError,
  UnavailableError,
  UploadTooLargeError,
} from "../errors.js";

export {
  AuthError,
  CheckpointNotFoundError,
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
  TaskInvalidError,
  TimeoutError,
  UnauthorizedError,
  UnavailableError,
  UploadTooLargeError,
};

interface Swerexception {
  message?: string;
  class_path?: string;
  extra_info?: Record<string, unknown>;
}

interface ErrorAnswer {
  status: number;
  message: string;
  detail: unknown;
  retryAfterMs?: number;
}

/** The SDK's error for a native error `code` (the server chose its status from the same code). */
const BY_CODE: Record<string, (a: ErrorAnswer) => MinisandboxError> = {
  invalid_input: (a) => new InvalidInputError(a.message),
  validation_failed: (a) => new RequestValidationError(Array.isArray(a.detail) ? a.detail : [], a.message),
  unauthorized: (a) => new UnauthorizedError(a.message),
  forbidden: (a) => new ForbiddenError(a.message),
  not_found: (a) => new NotFoundError(a.message),
  sandbox_not_found: (a) => new SandboxNotFoundError(a.message),
  checkpoint_not_found: (a) => new CheckpointNotFoundError(a.message),
  sandbox_lost: (a) => new SandboxLostError(a.message),
  task_invalid: (a) => new TaskInvalidError(a.message),
  upload_too_large: (a) => new UploadTooLargeError(a.message),
  limit_reached: (a) => new LimitError(a.message, { retryAfterMs: a.retryAfterMs }),
  not_implemented: (a) => new NotImplementedError(a.message),
  unavailable: (a) => new UnavailableError(a.message),
  layer_unavailable: (a) => new LayerUnavailableError(a.message),
  peer_not_allowed: (a) => new PeerNotAllowedError(a.message),
  timeout: (a) => new TimeoutError(a.message),
};

/** Without a code (SWE-ReX's auth answers, FastAPI-style 422s, proxies): by status. */
function byStatus(a: ErrorAnswer): MinisandboxError {
  const code: Record<number, string> = {
    400: "invalid_input",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    413: "upload_too_large",
    422: "validation_failed",
    429: "limit_reached",
    501: "not_implemented",
    503: "unavailable",
    504: "timeout",
  };
  const make = BY_CODE[code[a.status] ?? ""];
  return make ? make(a) : new SandboxError(a.message);
}

const SESSION_CODE_BY_CLASS = Object.fromEntries(Object.entries(SWEREX_CLASSES).map(([code, cls]) => [cls, code]));

/** A 511 answer: the SWE-ReX exception class the server named (session failures keep their in-process codes). */
function fromSwerexception(x: Swerexception): MinisandboxError {
  const cls = x.class_path ?? "";
  const msg = x.message ?? "";
  const extra = x.extra_info ?? {};
  if (cls === SWEREX_CLASSES.timeout) return new CommandTimeoutError(msg, extra);
  const code = SESSION_CODE_BY_CLASS[cls];
  if (code) return new SessionError(code, msg, cls, extra);
  if (cls === "builtins.FileNotFoundError") return Object.assign(new NotFoundError(msg), { swerexClass: cls });
  return new RemoteRuntimeError(msg, cls, extra);
}

function detailText(body: unknown, detail: unknown): string {
  if (typeof detail === "string") return detail;
  if (detail !== undefined) return JSON.stringify(detail);
  return typeof body === "string" ? body : "";
}

/** Turn an HTTP error answer into the SDK's error; `retryAfterMs` from a `Retry-After` header. */
export function errorFromResponse(
  status: number,
  body: unknown,
  what: string,
  retryAfterMs?: number,
): MinisandboxError {
  const obj = (typeof body === "object" && body !== null ? body : {}) as {
    detail?: unknown;
    code?: unknown;
    swerexception?: Swerexception;
  };
  if (status === 511 && obj.swerexception) return fromSwerexception(obj.swerexception);
  const answer = { status, detail: obj.detail, retryAfterMs, message: "" };
  answer.message = `${what}: ${detailText(body, obj.detail) || `HTTP ${status}`}`;
  const make = typeof obj.code === "string" ? BY_CODE[obj.code] : undefined;
  return make ? make(answer) : byStatus(answer);
}
