import {
  InvalidInputError,
  LimitError,
  MinisandboxError,
  NotFoundError,
  SandboxError,
  TimeoutError,
} from "../util/errors.js";
import { SessionError } from "../session/errors.js";
import { PyError } from "./pycompat.js";

/** An error with an HTTP status and a FastAPI-style `{"detail": ...}` body. */
export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    readonly detail: unknown,
    readonly code = "http_error",
  ) {
    super(typeof detail === "string" ? detail : JSON.stringify(detail));
  }
}

/** The provider (or the server) cannot do this: HTTP 501. */
export class NotImplementedError extends MinisandboxError {
  constructor(message: string) {
    super("not_implemented", message);
  }
}

export interface SwerexceptionBody {
  swerexception: { message: string; class_path: string; traceback: string; extra_info: Record<string, unknown> };
}

/** The 511 body SWE-ReX clients turn back into the named exception class. */
export function swerexception(e: unknown): SwerexceptionBody {
  const err = e instanceof Error ? e : new Error(String(e));
  let classPath = "builtins.RuntimeError";
  let extraInfo: Record<string, unknown> = {};
  if (err instanceof SessionError) {
    classPath = err.swerexClass;
    extraInfo = err.extraInfo;
  } else if (err instanceof PyError) {
    classPath = err.classPath;
    extraInfo = err.extraInfo;
  } else if (err instanceof NotFoundError) classPath = "builtins.FileNotFoundError";
  else if (err instanceof InvalidInputError) classPath = "builtins.ValueError";
  else if (err instanceof TimeoutError) classPath = "swerex.exceptions.CommandTimeoutError";
  return {
    swerexception: {
      message: err.message,
      class_path: classPath,
      traceback: `Traceback (minisandbox server):\n${err.stack ?? err.message}\n`,
      extra_info: extraInfo,
    },
  };
}

/** HTTP status for an error of the native (lifecycle) API. */
export function statusFor(e: unknown): number {
  if (e instanceof HttpError) return e.statusCode;
  if (e instanceof NotImplementedError) return 501;
  if (e instanceof NotFoundError) return 404;
  if (e instanceof InvalidInputError) return 400;
  if (e instanceof LimitError) return 429;
  if (e instanceof TimeoutError) return 504;
  if (e instanceof SandboxError && /shutting down/.test(e.message)) return 503;
  return 500;
}

export function codeFor(e: unknown): string {
  if (e instanceof HttpError) return e.code;
  if (e instanceof MinisandboxError) return e.code;
  return "internal_error";
}
