/**
 * The server's errors and the one place that turns an error into an HTTP answer: the status comes from the error's
 * stable `code`, never from its message or class name.
 */
import { MinisandboxError, NotFoundError, InvalidInputError, TimeoutError } from "../util/errors.js";
import { SessionError } from "../session/errors.js";
import { PyError } from "./pycompat.js";

/** The provider (or the server) cannot do this: HTTP 501. */
export class NotImplementedError extends MinisandboxError {
  constructor(message: string) {
    super("not_implemented", message);
  }
}

/** The server is closing: no new sandboxes (503). */
export class ShuttingDownError extends MinisandboxError {
  constructor(message = "the server is shutting down; no new sandboxes") {
    super("shutting_down", message);
  }
}

/** Too many requests or too many heavy operations at once (429 with Retry-After). */
export class RetryLaterError extends MinisandboxError {
  constructor(
    code: "rate_limited" | "busy",
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super(code, message);
  }
}

/** A body, upload or archive over this server's limits (413). */
export class TooLargeError extends MinisandboxError {
  constructor(message: string) {
    super("too_large", message);
  }
}

/** Stable code → HTTP status of the native API. Anything not listed is a 500. */
export const STATUS_BY_CODE: Readonly<Record<string, number>> = {
  invalid_input: 400,
  auth: 401,
  forbidden: 403,
  not_found: 404,
  sandbox_not_found: 404,
  too_large: 413,
  validation_error: 422,
  limit_reached: 429,
  rate_limited: 429,
  busy: 429,
  internal_error: 500,
  not_implemented: 501,
  shutting_down: 503,
  timeout: 504,
};

export function codeFor(e: unknown): string {
  if (e instanceof MinisandboxError) return e.code;
  return "internal_error";
}

/** HTTP status for an error of the native (lifecycle) API. */
export function statusFor(e: unknown): number {
  return STATUS_BY_CODE[codeFor(e)] ?? 500;
}

export interface SwerexceptionBody {
  swerexception: { message: string; class_path: string; traceback: string; extra_info: Record<string, unknown> };
}

/** Python class a SWE-ReX client should raise for an error without a class path of its own, by code. */
const CLASS_BY_CODE: Readonly<Record<string, string>> = {
  not_found: "builtins.FileNotFoundError",
  invalid_input: "builtins.ValueError",
  timeout: "swerex.exceptions.CommandTimeoutError",
};

/** The 511 body SWE-ReX clients turn back into the named exception class. */
export function swerexception(e: unknown): SwerexceptionBody {
  const err = e instanceof Error ? e : new Error(String(e));
  let classPath = CLASS_BY_CODE[codeFor(err)] ?? "builtins.RuntimeError";
  let extraInfo: Record<string, unknown> = {};
  if (err instanceof SessionError || err instanceof PyError) {
    classPath = err instanceof SessionError ? err.swerexClass : err.classPath;
    extraInfo = err.extraInfo;
  }
  return {
    swerexception: {
      message: err.message,
      class_path: classPath,
      traceback: `Traceback (minisandbox server):\n${err.stack ?? err.message}\n`,
      extra_info: extraInfo,
    },
  };
}

export { NotFoundError, InvalidInputError, TimeoutError };
