/** Typed errors shared by the API, the server and the SDK. `code` is stable and machine-readable. */
export class MinisandboxError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}
export class NotFoundError extends MinisandboxError {
  constructor(message: string) {
    super("not_found", message);
  }
}
export class TimeoutError extends MinisandboxError {
  constructor(message: string) {
    super("timeout", message);
  }
}
export class LimitError extends MinisandboxError {
  constructor(message: string) {
    super("limit_reached", message);
  }
}
export class InvalidInputError extends MinisandboxError {
  constructor(message: string) {
    super("invalid_input", message);
  }
}
export class SandboxError extends MinisandboxError {
  constructor(message: string) {
    super("sandbox_error", message);
  }
}
