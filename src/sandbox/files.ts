import { spawn } from "node:child_process";
import { statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { InvalidInputError, LimitError, NotFoundError, SandboxError, TimeoutError } from "../errors.js";
import { extractUntrusted, type CopyOutReport } from "./copy-out.js";
import type { ExecOptions, ExecResult } from "./exec.js";
import type { HelperProcess } from "./spawner.js";

/** A command started inside the sandbox with its output streamed (tar pipes). */
export interface StreamedCommand {
  child: HelperProcess;
  /** Kill the command's whole process tree inside the sandbox (nothing stays behind), then clean up. */
  kill(): Promise<void>;
  /** Clean up after a normal exit. */
  cleanup(): void;
}

/** The slice of a sandbox that file operations need. */
export interface FileRunner {
  exec(argv: string[], opts?: ExecOptions): Promise<ExecResult>;
  stream(argv: string[]): Promise<StreamedCommand>;
}

export interface FileEntry {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
}

/** Bounds of a read or a copy out of the sandbox: whatever the sandbox put at the path, the host's cost is capped. */
export interface ReadOptions {
  /** Refuse more than this many bytes (default 256 MiB for reads, 1 GiB for copies). */
  maxBytes?: number;
  /** Give up after this long (default 60 s for reads, 300 s for copies). */
  timeoutMs?: number;
}

export type { CopyOutReport } from "./copy-out.js";

export const DEFAULT_READ_BYTES = 256 * 1024 ** 2;
export const DEFAULT_READ_TIMEOUT_MS = 60_000;
export const DEFAULT_COPY_OUT_BYTES = 1024 ** 3;
export const DEFAULT_COPY_OUT_TIMEOUT_MS = 300_000;

const NO_LIMIT = Number.MAX_SAFE_INTEGER;
/** Exit codes of the read script, each a reason the file cannot be read. */
const NOT_FOUND = 3;
const NOT_REGULAR = 4;
const IS_DIRECTORY = 5;
/** At most $2 bytes of a regular file; anything else is refused by its exit code. */
const READ_SCRIPT =
  `[ -e "$1" ] || exit ${NOT_FOUND}; [ -d "$1" ] && exit ${IS_DIRECTORY}; [ -f "$1" ] || exit ${NOT_REGULAR}; ` +
  `exec head -c "$2" -- "$1"`;

function bounds(opts: ReadOptions, bytes: number, timeoutMs: number): { max: number; timeoutMs: number } {
  const max = opts.maxBytes ?? bytes;
  const t = opts.timeoutMs ?? timeoutMs;
  if (!Number.isSafeInteger(max) || max < 0) throw new InvalidInputError(`maxBytes must be a non-negative integer`);
  if (!Number.isFinite(t) || t <= 0) throw new InvalidInputError(`timeoutMs must be a positive number`);
  return { max, timeoutMs: t };
}

/**
 * Files inside a sandbox. Every operation runs *inside* it (as the sandbox user, through its mount namespace),
 * never through host paths: a symlink planted in the sandbox can then never point a host-side write at the host.
 * What comes out is bounded in bytes and time, and is data only (see copy-out.ts).
 */
export class SandboxFiles {
  constructor(private readonly runner: FileRunner) {}

  private async check(r: ExecResult, path: string, what: string): Promise<ExecResult> {
    if (r.exitCode === 0) return r;
    const msg = r.stderr.trim();
    if (/No such file or directory/.test(msg)) throw new NotFoundError(`${what} ${path}: no such file or directory`);
    throw new SandboxError(`${what} ${path} failed: ${msg || `exit ${r.exitCode}`}`);
  }

  /**
   * The bytes of a regular file. FIFOs, devices and other special files are refused; more than `maxBytes` is a
   * LimitError, no answer within `timeoutMs` a TimeoutError; either way the reader inside is killed.
   */
  async readBytes(path: string, opts: ReadOptions = {}): Promise<Buffer> {
    const { max, timeoutMs } = bounds(opts, DEFAULT_READ_BYTES, DEFAULT_READ_TIMEOUT_MS);
    const r = await this.runner.exec(["/bin/sh", "-c", READ_SCRIPT, "sh", path, String(max + 1)], {
      outputLimitBytes: max + 1,
      timeoutMs,
    });
    if (r.timedOut) throw new TimeoutError(`read ${path}: no end within ${timeoutMs} ms`);
    if (r.exitCode === NOT_FOUND) throw new NotFoundError(`read ${path}: no such file or directory`);
    if (r.exitCode === NOT_REGULAR) throw new InvalidInputError(`read ${path}: not a regular file`);
    if (r.exitCode === IS_DIRECTORY) throw new InvalidInputError(`read ${path}: Is a directory`);
    await this.check(r, path, "read");
    if (r.stdoutBytes.length > max) throw new LimitError(`read ${path}: larger than ${max} bytes`);
    return r.stdoutBytes;
  }

  async read(path: string, opts: ReadOptions = {}): Promise<string> {
    return (await this.readBytes(path, opts)).toString("utf8");
  }

  /** Write a file, creating parent directories; `timeoutMs` bounds it (a FIFO at the path never blocks for good). */
  async write(path: string, content: string | Buffer, opts: { timeoutMs?: number } = {}): Promise<void> {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_READ_TIMEOUT_MS;
    const script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"';
    const r = await this.runner.exec(["/bin/sh", "-c", script, "sh", path], { stdin: content, timeoutMs });
    if (r.timedOut) throw new TimeoutError(`write ${path}: not done within ${timeoutMs} ms`);
    await this.check(r, path, "write");
  }

  async exists(path: string): Promise<boolean> {
    const r = await this.runner.exec(["/usr/bin/test", "-e", path]);
    return r.exitCode === 0;
  }

  async remove(path: string): Promise<void> {
    const r = await this.runner.exec(["/bin/rm", "-rf", "--", path]);
    await this.check(r, path, "remove");
  }

  async mkdir(path: string): Promise<void> {
    const r = await this.runner.exec(["/bin/mkdir", "-p", "--", path]);
    await this.check(r, path, "mkdir");
  }

  async list(path: string): Promise<FileEntry[]> {
    const r = await this.runner.exec(
      ["/usr/bin/find", path, "-mindepth", "1", "-maxdepth", "1", "-printf", "%y\\t%s\\t%m\\t%p\\0"],
      { outputLimitBytes: NO_LIMIT },
    );
    await this.check(r, path, "list");
    return r.stdout
      .split("\0")
      .filter(Boolean)
      .map((line) => {
        const [y, size, mode, p] = line.split("\t") as [string, string, string, string];
        const type: FileEntry["type"] = y === "f" ? "file" : y === "d" ? "dir" : y === "l" ? "symlink" : "other";
        return { name: p.slice(p.lastIndexOf("/") + 1), path: p, type, size: Number(size), mode: parseInt(mode, 8) };
      })
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  /**
   * Copy a host file or directory into the sandbox at `target` (parents created; an existing target directory keeps
   * its own mode). `timeoutMs` bounds the whole copy.
   */
  async upload(hostPath: string, target: string, opts: { timeoutMs?: number } = {}): Promise<void> {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_COPY_OUT_TIMEOUT_MS;
    if (!statSync(hostPath).isDirectory()) {
      await this.write(target, await readFile(hostPath), { timeoutMs });
      return;
    }
    const script = 'mkdir -p -- "$1" && exec tar -C "$1" -xf - --no-same-owner --no-overwrite-dir';
    const cons = await this.runner.stream(["/bin/sh", "-c", script, "sh", target]);
    const prod = spawn("/bin/tar", ["-C", hostPath, "-cf", "-", "."], { stdio: ["ignore", "pipe", "pipe"] });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      prod.kill("SIGKILL");
      void cons.kill();
    }, timeoutMs);
    // What the two tars say, for the error: a few KiB (a process inside could write to its tar's stderr forever).
    let errText = "";
    const keep = (b: Buffer): void => {
      if (errText.length < 4096) errText += b.toString();
    };
    prod.stderr!.on("data", keep);
    cons.child.stderr!.on("data", keep);
    cons.child.stdin!.on("error", () => {});
    prod.stdout!.pipe(cons.child.stdin!);
    const [p, c] = await Promise.all([exitOf(prod), exitOf(cons.child)]);
    clearTimeout(timer);
    cons.cleanup();
    if (timedOut) throw new TimeoutError(`upload ${hostPath}: not done within ${timeoutMs} ms`);
    if (p !== 0 || c !== 0) throw new SandboxError(`copy of ${hostPath} failed: ${errText.trim()}`);
  }

  /**
   * Copy a regular file or a directory out of the sandbox to a host path. Data only: regular files (permission
   * bits without setuid, setgid or sticky), directories and symlinks (never followed), owned by the caller; device
   * nodes, FIFOs and sockets are skipped and reported. Bounded by `maxBytes` and `timeoutMs`.
   */
  async download(path: string, hostTarget: string, opts: ReadOptions = {}): Promise<CopyOutReport> {
    const { max, timeoutMs } = bounds(opts, DEFAULT_COPY_OUT_BYTES, DEFAULT_COPY_OUT_TIMEOUT_MS);
    const deadline = Date.now() + timeoutMs;
    const left = (): number => Math.max(1, deadline - Date.now());
    const late = (): TimeoutError => new TimeoutError(`download ${path}: not done within ${timeoutMs} ms`);
    const kind = await this.runner.exec(["/usr/bin/stat", "-L", "-c", "%F", "--", path], { timeoutMs: left() });
    if (kind.timedOut) throw late();
    if (kind.exitCode !== 0) throw new NotFoundError(`download ${path}: no such file or directory`);
    const type = kind.stdout.trim();
    if (type === "regular file" || type === "regular empty file") {
      const bytes = await this.readBytes(path, { maxBytes: max, timeoutMs: left() });
      return extractUntrusted.singleFile(bytes, hostTarget);
    }
    if (type !== "directory") throw new InvalidInputError(`download ${path}: not a regular file or directory`);
    const cmd = await this.runner.stream(["/bin/tar", "-C", path, "--hard-dereference", "-cf", "-", "."]);
    cmd.child.stderr!.resume();
    // At the deadline the stream ends with an error whoever holds its other end (tar, or a process that took it).
    const timer = setTimeout(() => {
      void cmd.kill();
      cmd.child.stdout!.destroy(late());
    }, left());
    try {
      return await extractUntrusted.tree(cmd.child.stdout!, hostTarget, max, path);
    } catch (e) {
      await cmd.kill();
      throw e;
    } finally {
      clearTimeout(timer);
      cmd.cleanup();
    }
  }
}

function exitOf(child: HelperProcess): Promise<number | null> {
  return new Promise((resolve) => {
    child.on("close", (code) => resolve(code));
    child.on("error", () => resolve(-1));
  });
}
