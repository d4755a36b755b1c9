/**
 * Errors to HTTP answers, through the product's one error hierarchy (`src/errors.ts`): the status comes from the
 * error's stable `code` (`httpStatus`), never from its message or class name. SWE-ReX routes answer runtime
 * failures as 511 `swerexception` bodies naming the Python class a client re-raises.
 */
import { errorCode, httpStatus, LimitError, SessionError } from "../errors.js";
import { PyError } from "./pycompat.js";

/** HTTP status for an error of the native (lifecycle) API. */
export function statusFor(e: unknown): number {
  return httpStatus(errorCode(e));
}

/** Seconds a 429 answer tells the client to wait (`Retry-After`), when the error knows. */
export function retryAfterSeconds(e: unknown): number | undefined {
  if (!(e instanceof LimitError) || e.retryAfterMs === undefined) return undefined;
  return Math.max(1, Math.ceil(e.retryAfterMs / 1000));
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
  let classPath = CLASS_BY_CODE[errorCode(err)] ?? "builtins.RuntimeError";
  let extraInfo: Record<string, unknown> = {};
  if (err instanceof SessionError || err instanceof PyError) {
    classPath = err instanceof SessionError ? err.swerexClass : err.classPath;
    extraInfo = err.extraInfo;
  }
  return {
    swerexception: {
      message: err.message,
      class_path: classPath,
      // What Python's format_exception_only prints: the server's own stack is nobody's business (and says where
      // its code lives); the class and the message are what a client needs.
      traceback: `${classPath.slice(classPath.lastIndexOf(".") + 1)}: ${err.message}\n`,
      extra_info: extraInfo,
    },
  };
}
