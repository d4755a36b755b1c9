/**
 * Every error minisandbox throws on purpose. Each has a stable, machine-readable `code`; `httpStatus(code)` is the
 * HTTP status that code answers with, so callers choose statuses by code, never by message text.
 * This file imports nothing: every layer may use it.
 */

/**
 * HTTP status per error code (the native API's; SWE-ReX routes answer every failure with 511). Every code is here;
 * the first one listed for a status is what an answer with that status but no code means to a client (a validation
 * answer, pydantic's shape, carries none). The Python package's table (`minisandbox/_generated.py`) is generated
 * from this file by scripts/generate-python.mjs.
 */
export const HTTP_STATUS = {
  invalid_input: 400,
  validation_failed: 422,
  task_invalid: 422,
  image_invalid: 422,
  unauthorized: 401,
  forbidden: 403,
  registry_denied: 403,
  peer_not_allowed: 403,
  not_found: 404,
  image_not_found: 404,
  sandbox_not_found: 404,
  checkpoint_not_found: 404,
  sandbox_lost: 410,
  session_exists: 409,
  upload_too_large: 413,
  limit_reached: 429,
  internal_error: 500,
  sandbox_error: 500,
  build_failed: 500,
  store_corrupt: 500,
  non_zero_exit: 500,
  bash_syntax_error: 500,
  session_died: 500,
  no_exit_code: 500,
  not_implemented: 501,
  registry_error: 502,
  unavailable: 503,
  layer_unavailable: 503,
  timeout: 504,
  disk_full: 507,
} as const satisfies Record<string, number>;

export type ErrorCode = keyof typeof HTTP_STATUS;

/** Status of the HTTP server for an error `code`; unknown codes are server errors (500). */
export function httpStatus(code: string): number {
  return Object.hasOwn(HTTP_STATUS, code) ? HTTP_STATUS[code as ErrorCode] : 500;
}

/** The `code` of any thrown value: its own for minisandbox errors, else `internal_error`. */
export function errorCode(e: unknown): string {
  return e instanceof MinisandboxError ? e.code : "internal_error";
}

/** SWE-ReX exception class per session error code: a client rebuilds the same exception from it. */
export const SWEREX_CLASSES = {
  timeout: "swerex.exceptions.CommandTimeoutError",
  bash_syntax_error: "swerex.exceptions.BashIncorrectSyntaxError",
  non_zero_exit: "swerex.exceptions.NonZeroExitCodeError",
  session_exists: "swerex.exceptions.SessionExistsError",
  not_found: "swerex.exceptions.SessionDoesNotExistError",
  session_died: "swerex.exceptions.SessionNotInitializedError",
  no_exit_code: "swerex.exceptions.NoExitCodeError",
} as const;

export type SessionErrorCode = keyof typeof SWEREX_CLASSES;

/** Base class: `code` is stable (see `httpStatus`), `message` is for people. */
export class MinisandboxError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}

/** Bad input from a caller: a malformed file, an unknown option value, a field out of range (`field` names it). */
export class InvalidInputError extends MinisandboxError {
  readonly field?: string;
  constructor(message: string, opts: { field?: string } = {}) {
    super("invalid_input", message);
    if (opts.field !== undefined) this.field = opts.field;
  }
}

/** A request body that fails validation field by field (`detail`: one entry per problem, e.g. pydantic's shape). */
export class RequestValidationError<D = unknown> extends InvalidInputError {
  override readonly code = "validation_failed";
  constructor(
    readonly detail: readonly D[],
    message = "request validation failed",
  ) {
    super(message);
  }
}

/** A malformed or truncated tar stream (a store pack, an archive copied out of a sandbox). */
export class TarFormatError extends InvalidInputError {}

export class NotFoundError extends MinisandboxError {
  constructor(message: string) {
    super("not_found", message);
  }
}

/** The sandbox named in a request is not (or no longer) live. */
export class SandboxNotFoundError extends NotFoundError {
  override readonly code = "sandbox_not_found";
}

/** A rollout checkpoint its group does not hold (dropped, or never made there). */
export class CheckpointNotFoundError extends NotFoundError {
  override readonly code = "checkpoint_not_found";
}

/** An upload over the server's size limit. */
export class UploadTooLargeError extends MinisandboxError {
  constructor(message: string) {
    super("upload_too_large", message);
  }
}

/** A budget is used up (live sandboxes, concurrent work); `retryAfterMs` says when to try again, when known. */
export class LimitError extends MinisandboxError {
  readonly retryAfterMs?: number;
  constructor(message: string, opts: { retryAfterMs?: number } = {}) {
    super("limit_reached", message);
    if (opts.retryAfterMs !== undefined) this.retryAfterMs = opts.retryAfterMs;
  }
}

export class TimeoutError extends MinisandboxError {
  constructor(message: string) {
    super("timeout", message);
  }
}

/** A command or session call exceeded its timeout, as reported by a SWE-ReX runtime (`CommandTimeoutError`). */
export class CommandTimeoutError extends TimeoutError {
  readonly swerexClass = SWEREX_CLASSES.timeout;
  constructor(
    message: string,
    readonly extraInfo: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/** 401 (a wrong credential) or 403 (none): see the two subclasses. */
export abstract class AuthError extends MinisandboxError {
  get status(): number {
    return httpStatus(this.code);
  }
}

export class UnauthorizedError extends AuthError {
  constructor(message: string) {
    super("unauthorized", message);
  }
}

export class ForbiddenError extends AuthError {
  constructor(message: string) {
    super("forbidden", message);
  }
}

/** A layer source that is not one of the server's allowed or registered peers. */
export class PeerNotAllowedError extends ForbiddenError {
  override readonly code = "peer_not_allowed";
}

/** The server (or its provider) cannot do this. */
export class NotImplementedError extends MinisandboxError {
  constructor(message: string) {
    super("not_implemented", message);
  }
}

/** A sandbox failed to start, run or answer. */
export class SandboxError extends MinisandboxError {
  constructor(message: string, code = "sandbox_error") {
    super(code, message);
  }
}

/** A sandbox that ended without being asked to (killed, out of time): its work is lost, not failed by its user. */
export class SandboxLostError extends SandboxError {
  constructor(message: string) {
    super(message, "sandbox_lost");
  }
}

/** A task that cannot be used: its gold patch does not resolve it in its own environment. */
export class TaskInvalidError extends MinisandboxError {
  constructor(message: string) {
    super("task_invalid", message);
  }
}

/** The service takes no new work right now (e.g. it is shutting down). */
export class UnavailableError extends SandboxError {
  constructor(message: string) {
    super(message, "unavailable");
  }
}

/** No source could supply an environment's layer (a peer gone, or none holds it): retry elsewhere or later. */
export class LayerUnavailableError extends MinisandboxError {
  constructor(message: string) {
    super("layer_unavailable", message);
  }
}

/** A failure inside a remote sandbox known only by its Python class path (a SWE-ReX 511's `class_path`). */
export class RemoteRuntimeError extends SandboxError {
  constructor(
    message: string,
    readonly swerexClass: string,
    readonly extraInfo: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/** A persistent session failed; `swerexClass` is the SWE-ReX exception it maps to (see `SWEREX_CLASSES`). */
export class SessionError extends MinisandboxError {
  constructor(
    code: string,
    message: string,
    readonly swerexClass: string,
    readonly extraInfo: Record<string, unknown> = {},
  ) {
    super(code, message);
  }
}

/** Building an environment failed at `step`; the tail of its log is in the message. */
export class BuildError extends MinisandboxError {
  constructor(
    readonly step: string,
    readonly logFile: string,
    readonly tail: string,
  ) {
    super("build_failed", `build failed at step "${step}" (log: ${logFile}):\n${tail}`);
  }
}

/** An image (a manifest, a config, a layer) that is malformed, hostile or not what its digest says. */
export class ImageInvalidError extends InvalidInputError {
  override readonly code = "image_invalid";
}

/** A registry, or a local image tool, has no image (or blob) by that name. */
export class ImageNotFoundError extends NotFoundError {
  override readonly code = "image_not_found";
}

/** A registry refused us (401 with the credentials we have, or 403): fixing it takes credentials or access. */
export class RegistryDeniedError extends InvalidInputError {
  override readonly code = "registry_denied";
}

/** A registry could not be reached or kept failing (5xx, 429, a connection cut) after every retry. */
export class RegistryError extends MinisandboxError {
  /** When the registry said when to come back (429/503 `Retry-After`). */
  readonly retryAfterMs?: number;
  constructor(message: string, opts: { retryAfterMs?: number } = {}) {
    super("registry_error", message);
    if (opts.retryAfterMs !== undefined) this.retryAfterMs = opts.retryAfterMs;
  }
}

/** The filesystem holding the store is full (ENOSPC): nothing half-written was kept. */
export class DiskFullError extends MinisandboxError {
  constructor(message: string) {
    super("disk_full", message);
  }
}

/** The store's on-disk state contradicts itself (missing or corrupt object, unreadable manifest). */
export class StoreCorruptError extends MinisandboxError {
  constructor(message: string) {
    super("store_corrupt", message);
  }
}

/** errno code of a Node system error (`ENOENT`...), or undefined. */
export function errCode(e: unknown): string | undefined {
  return typeof e === "object" && e !== null && "code" in e ? String((e as { code: unknown }).code) : undefined;
}

export function errMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
