/**
 * The session failures SWE-ReX defines, with the messages it prints (commands quoted as Python's repr), so the
 * HTTP server can answer with the class path and text its clients expect. The class is `SessionError`
 * (src/errors.ts); these build its instances.
 */
import { SessionError, SWEREX_CLASSES } from "../errors.js";
import { pyRepr } from "../util/pyrepr.js";

export { pyRepr, SessionError };

export const commandTimeout = (timeoutS: number, command: string): SessionError =>
  new SessionError(
    "timeout",
    `timeout after ${timeoutS} seconds while running command ${pyRepr(command)}`,
    SWEREX_CLASSES.timeout,
  );

export const syntaxError = (command: string, output: string): SessionError =>
  new SessionError(
    "bash_syntax_error",
    `Error (exit code 2) while checking bash command \n${pyRepr(command)}\n` +
      `---- Stderr ----\n${output}\n---- Stdout ----\n`,
    SWEREX_CLASSES.bash_syntax_error,
    { bash_stdout: "", bash_stderr: output },
  );

export const nonZeroExit = (command: string, exitCode: number, output: string, errorMsg: string): SessionError =>
  new SessionError(
    "non_zero_exit",
    `${errorMsg ? `${errorMsg}: ` : ""}Command ${pyRepr(command)} failed with exit code ${exitCode}. ` +
      `Here is the output:\n${pyRepr(output)}`,
    SWEREX_CLASSES.non_zero_exit,
  );

export const sessionExists = (name: string): SessionError =>
  new SessionError("session_exists", `session ${pyRepr(name)} already exists`, SWEREX_CLASSES.session_exists);

export const sessionMissing = (name: string): SessionError =>
  new SessionError("not_found", `session ${pyRepr(name)} does not exist`, SWEREX_CLASSES.not_found);

export const sessionDied = (name: string, output: string): SessionError =>
  new SessionError(
    "session_died",
    `session ${pyRepr(name)} exited (the shell ended). Output so far:\n${output}`,
    SWEREX_CLASSES.session_died,
  );

export const noExitCode = (message: string): SessionError =>
  new SessionError("no_exit_code", message, SWEREX_CLASSES.no_exit_code);
