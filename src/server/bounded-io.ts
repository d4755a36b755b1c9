/**
 * Reading and writing a sandbox's files for a client, bounded in bytes and time. Reads are the sandbox's own bounded
 * `files.readBytes` (regular files only, a byte cap, a deadline, no reader left behind); for SWE-ReX routes its typed
 * errors become the OSError Python would raise. Writes get a deadline (a FIFO planted at the path cannot hold them).
 */
import type { Sandbox } from "../sandbox/sandbox.js";
import { InvalidInputError, LimitError, NotFoundError, SandboxError, TimeoutError } from "../errors.js";
import { osErrorFrom, PyError, pyRepr } from "./pycompat.js";

export interface BoundedReadOptions {
  maxBytes: number;
  timeoutMs: number;
}

/** A bounded read's error as SWE-ReX's read_file reports it (Python's `Path.read_text` would raise these). */
export async function pythonReadError(sandbox: Sandbox, e: unknown, path: string, o: BoundedReadOptions) {
  const p = pyRepr(path);
  if (e instanceof NotFoundError)
    return new PyError("builtins.FileNotFoundError", `[Errno 2] No such file or directory: ${p}`);
  if (e instanceof LimitError)
    return new PyError(
      "builtins.OSError",
      `[Errno 27] File too large: ${p} ` +
        `(over this server's read limit of ${o.maxBytes} bytes; use /execute to inspect it)`,
      {},
      e.code,
    );
  if (e instanceof InvalidInputError) {
    // Refused before reading: a directory, or a FIFO, socket or device. Which one is asked, not parsed from text.
    if ((await sandbox.exec(["/usr/bin/test", "-d", path])).exitCode === 0)
      return new PyError("builtins.IsADirectoryError", `[Errno 21] Is a directory: ${p}`);
    return new PyError("builtins.OSError", `[Errno 22] Invalid argument: ${p} is not a regular file (not read)`);
  }
  if (e instanceof SandboxError) return osErrorFrom(e.message, path) ?? e;
  return e;
}

export function readBounded(sandbox: Sandbox, path: string, o: BoundedReadOptions): Promise<Buffer> {
  return sandbox.files.readBytes(path, { maxBytes: o.maxBytes, timeoutMs: o.timeoutMs });
}

const WRITE = 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"';

/** Write `content` to `path` (parents created) within `timeoutMs`. */
export async function writeBounded(sandbox: Sandbox, path: string, content: string, timeoutMs: number): Promise<void> {
  const r = await sandbox.exec(["/bin/sh", "-c", WRITE, "sh", path], { stdin: content, timeoutMs });
  if (r.timedOut) throw new TimeoutError(`writing ${path} took longer than ${timeoutMs} ms (this server's deadline)`);
  if (r.exitCode !== 0)
    throw (
      osErrorFrom(r.stderr, path) ??
      new SandboxError(`write ${path} failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`)
    );
}
