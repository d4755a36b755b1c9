/**
 * Errors the SDK throws. They reuse the classes of the in-process API where they fit (`util/errors`, and
 * `SessionError` for session failures, with the same `code` and `swerexClass`), so code written against `Sandbox`
 * catches the same things against `RemoteSandbox`.
 */
import {
  InvalidInputError,
  LimitError,
  MinisandboxError,
  NotFoundError,
  SandboxError,
  TimeoutError,
} from "../util/errors.js";
import { SessionError } from "../session/errors.js";

export { InvalidInputError, LimitError, MinisandboxError, NotFoundError, SandboxError, TimeoutError, SessionError };

/** 401 (wrong key) or 403 (no key). */
export class AuthError extends MinisandboxError {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super("auth", message);
  }
}

/** The server refuses this to everyone with this token (403 with code `forbidden`: e.g. a host directory). */
export class ForbiddenError extends MinisandboxError {
  constructor(message: string) {
    super("forbidden", message);
  }
}

/** A command or session call exceeded its timeout (SWE-ReX `CommandTimeoutError`). */
export class CommandTimeoutError extends TimeoutError {
  readonly swerexClass = "swerex.exceptions.CommandTimeoutError";
  constructor(
    message: string,
    readonly extraInfo: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/** A failure inside the sandbox that has no closer class (the server's 511 `class_path` is kept). */
export class RemoteRuntimeError extends SandboxError {
  constructor(
    message: string,
    readonly swerexClass: string,
    readonly extraInfo: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

const SESSION_CODES: Record<string, string> = {
  NonZeroExitCodeError: "non_zero_exit",
  BashIncorrectSyntaxError: "bash_syntax_error",
  SessionExistsError: "session_exists",
  SessionDoesNotExistError: "not_found",
  SessionNotInitializedError: "session_died",
  NoExitCodeError: "no_exit_code",
};

interface Swerexception {
  message?: string;
  class_path?: string;
  extra_info?: Record<string, unknown>;
}

/** The SDK's error for a native API error `code` (the server's status comes from the same code). */
const BY_CODE: Record<string, (m: string) => MinisandboxError> = {
  not_found: (m) => new NotFoundError(m),
  sandbox_not_found: (m) => new NotFoundError(m),
  invalid_input: (m) => new InvalidInputError(m),
  validation_error: (m) => new InvalidInputError(m),
  forbidden: (m) => new ForbiddenError(m),
  limit_reached: (m) => new LimitError(m),
  rate_limited: (m) => new LimitError(m),
  busy: (m) => new LimitError(m),
  too_large: (m) => new LimitError(m),
  timeout: (m) => new TimeoutError(m),
};

/** Without a code (auth answers, FastAPI-style 422s, proxies): by status. */
function byStatus(status: number, message: string): MinisandboxError {
  if (status === 401 || status === 403) return new AuthError(message, status);
  if (status === 404) return new NotFoundError(message);
  if (status === 413 || status === 429) return new LimitError(message);
  if (status === 400 || status === 422) return new InvalidInputError(message);
  if (status === 504) return new TimeoutError(message);
  return new SandboxError(message);
}

/** A 511 answer: the SWE-ReX exception class the server named (session failures keep their in-process codes). */
function fromSwerexception(x: Swerexception): MinisandboxError {
  const cls = x.class_path ?? "";
  const name = cls.slice(cls.lastIndexOf(".") + 1);
  const msg = x.message ?? "";
  const extra = x.extra_info ?? {};
  if (name === "CommandTimeoutError") return new CommandTimeoutError(msg, extra);
  if (SESSION_CODES[name]) return new SessionError(SESSION_CODES[name]!, msg, cls, extra);
  if (cls === "builtins.FileNotFoundError") return Object.assign(new NotFoundError(msg), { swerexClass: cls });
  return new RemoteRuntimeError(msg, cls, extra);
}

/** Turn an HTTP error answer into the SDK's error. */
export function errorFromResponse(status: number, body: unknown, what: string): MinisandboxError {
  const obj = (typeof body === "object" && body !== null ? body : {}) as {
    detail?: unknown;
    code?: unknown;
    swerexception?: Swerexception;
  };
  if (status === 511 && obj.swerexception) return fromSwerexception(obj.swerexception);
  const detail =
    typeof obj.detail === "string"
      ? obj.detail
      : obj.detail !== undefined
        ? JSON.stringify(obj.detail)
        : typeof body === "string"
          ? body
          : "";
  const message = `${what}: ${detail || `HTTP ${status}`}`;
  const make = typeof obj.code === "string" ? BY_CODE[obj.code] : undefined;
  return make ? make(message) : byStatus(status, message);
}
