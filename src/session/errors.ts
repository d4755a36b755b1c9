import { MinisandboxError } from "../util/errors.js";

/**
 * Session errors. Each maps one-to-one onto a SWE-ReX exception class (see `swerexClass`), so the HTTP server can
 * answer with the class path clients expect.
 */
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

export const commandTimeout = (timeoutS: number, command: string): SessionError =>
  new SessionError(
    "timeout",
    `timeout after ${timeoutS} seconds while running command ${pyRepr(command)}`,
    "swerex.exceptions.CommandTimeoutError",
  );

export const syntaxError = (command: string, output: string): SessionError =>
  new SessionError(
    "bash_syntax_error",
    `Error (exit code 2) while checking bash command \n${pyRepr(command)}\n---- Stderr ----\n${output}\n---- Stdout ----\n`,
    "swerex.exceptions.BashIncorrectSyntaxError",
    { bash_stdout: "", bash_stderr: output },
  );

export const nonZeroExit = (command: string, exitCode: number, output: string, errorMsg: string): SessionError =>
  new SessionError(
    "non_zero_exit",
    `${errorMsg ? `${errorMsg}: ` : ""}Command ${pyRepr(command)} failed with exit code ${exitCode}. Here is the output:\n${pyRepr(output)}`,
    "swerex.exceptions.NonZeroExitCodeError",
  );

export const sessionExists = (name: string): SessionError =>
  new SessionError("session_exists", `session ${pyRepr(name)} already exists`, "swerex.exceptions.SessionExistsError");

export const sessionMissing = (name: string): SessionError =>
  new SessionError("not_found", `session ${pyRepr(name)} does not exist`, "swerex.exceptions.SessionDoesNotExistError");

export const sessionDied = (name: string, output: string): SessionError =>
  new SessionError(
    "session_died",
    `session ${pyRepr(name)} exited (the shell ended). Output so far:\n${output}`,
    "swerex.exceptions.SessionNotInitializedError",
  );

export const noExitCode = (message: string): SessionError =>
  new SessionError("no_exit_code", message, "swerex.exceptions.NoExitCodeError");

/** Python's repr() of a str, as SWE-ReX messages quote commands with {cmd!r}. */
export function pyRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += `\\${quote}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch < " " || ch === "\x7f") out += `\\x${ch.charCodeAt(0).toString(16).padStart(2, "0")}`;
    else out += ch;
  }
  return out + quote;
}
