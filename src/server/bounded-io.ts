/**
 * Reading and writing a sandbox's files for a client, bounded in bytes and time: only regular files are read (a FIFO
 * or a device is refused), at most `maxBytes`, within a deadline, and no process outlives the call (the deadline
 * kills the command's whole process group). Everything runs inside the sandbox, never through host paths.
 */
import type { Sandbox } from "../sandbox/sandbox.js";
import { SandboxError, TimeoutError } from "../util/errors.js";
import { osErrorFrom, PyError, pyRepr } from "./pycompat.js";

export interface BoundedReadOptions {
  maxBytes: number;
  timeoutMs: number;
}

/** The file is larger than the server returns (413 / Python `OSError` errno 27). */
export function fileTooLarge(path: string, maxBytes: number): PyError {
  return new PyError(
    "builtins.OSError",
    `[Errno 27] File too large: ${pyRepr(path)} ` +
      `(over this server's read limit of ${maxBytes} bytes; use /execute to inspect it)`,
    {},
    "too_large",
  );
}

// Existing but neither a directory nor a regular file (FIFO, socket, device): refused before anything reads it.
// A swap to a FIFO after the check blocks `head` in open(), which the deadline ends.
const SCRIPT = `if [ -e "$1" ] && [ ! -d "$1" ] && [ ! -f "$1" ]; then exit 90; fi; exec head -c "$2" -- "$1"`;

export async function readBounded(sandbox: Sandbox, path: string, o: BoundedReadOptions): Promise<Buffer> {
  const r = await sandbox.exec(["/bin/sh", "-c", SCRIPT, "sh", path, String(o.maxBytes + 1)], {
    timeoutMs: o.timeoutMs,
    outputLimitBytes: o.maxBytes + 1,
  });
  if (r.timedOut) {
    throw new TimeoutError(`reading ${path} took longer than ${o.timeoutMs} ms (this server's read deadline)`);
  }
  if (r.exitCode === 90) {
    throw new PyError(
      "builtins.OSError",
      `[Errno 22] Invalid argument: ${pyRepr(path)} is not a regular file (FIFOs, sockets and devices are not read)`,
      {},
      "invalid_input",
    );
  }
  if (r.exitCode !== 0) {
    throw (
      osErrorFrom(r.stderr, path) ??
      new PyError("builtins.OSError", `reading ${pyRepr(path)} failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`)
    );
  }
  if (r.stdoutBytes.length > o.maxBytes) throw fileTooLarge(path, o.maxBytes);
  return r.stdoutBytes;
}

const WRITE = 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"';

/** Write `content` to `path` (parents created) within `timeoutMs` (a FIFO planted at `path` cannot hold it). */
export async function writeBounded(sandbox: Sandbox, path: string, content: string, timeoutMs: number): Promise<void> {
  const r = await sandbox.exec(["/bin/sh", "-c", WRITE, "sh", path], { stdin: content, timeoutMs });
  if (r.timedOut) throw new TimeoutError(`writing ${path} took longer than ${timeoutMs} ms (this server's deadline)`);
  if (r.exitCode !== 0)
    throw (
      osErrorFrom(r.stderr, path) ??
      new SandboxError(`write ${path} failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`)
    );
}
