import { spawn } from "node:child_process";
import { mkdirSync, statSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { NotFoundError, SandboxError } from "../util/errors.js";
import type { ExecOptions, ExecResult } from "./exec.js";

/** The slice of a sandbox that file operations need: run a command inside with stdin and capture its output. */
export interface FileRunner {
  exec(argv: string[], opts?: ExecOptions): Promise<ExecResult>;
  /** argv + cleanup for streaming (tar pipes). */
  spawnArgv(argv: string[]): { argv: string[]; cleanup: () => void };
}

export interface FileEntry {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
}

const NO_LIMIT = Number.MAX_SAFE_INTEGER;

/**
 * Files inside a sandbox. Every operation runs *inside* it (as the sandbox user, through its mount namespace),
 * never through host paths: a symlink planted in the sandbox can then never point a host-side write at the host.
 */
export class SandboxFiles {
  constructor(private readonly runner: FileRunner) {}

  private async check(r: ExecResult, path: string, what: string): Promise<ExecResult> {
    if (r.exitCode === 0) return r;
    const msg = r.stderr.trim();
    if (/No such file or directory/.test(msg)) throw new NotFoundError(`${what} ${path}: no such file or directory`);
    throw new SandboxError(`${what} ${path} failed: ${msg || `exit ${r.exitCode}`}`);
  }

  async readBytes(path: string): Promise<Buffer> {
    const r = await this.runner.exec(["/bin/cat", "--", path], { outputLimitBytes: NO_LIMIT });
    return (await this.check(r, path, "read")).stdoutBytes;
  }

  async read(path: string): Promise<string> {
    return (await this.readBytes(path)).toString("utf8");
  }

  /** Write a file, creating parent directories. */
  async write(path: string, content: string | Buffer): Promise<void> {
    const script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"';
    const r = await this.runner.exec(["/bin/sh", "-c", script, "sh", path], { stdin: content });
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

  /** Copy a host file or directory into the sandbox at `target` (parents created). */
  async upload(hostPath: string, target: string): Promise<void> {
    if (!statSync(hostPath).isDirectory()) {
      await this.write(target, await readFile(hostPath));
      return;
    }
    await this.pipe(
      ["/bin/tar", "-C", hostPath, "-cf", "-", "."],
      ["/bin/sh", "-c", 'mkdir -p -- "$1" && exec tar -C "$1" -xf - --no-same-owner', "sh", target],
      "inside",
      target,
    );
  }

  /** Copy a file or directory out of the sandbox to a host path. */
  async download(path: string, hostTarget: string): Promise<void> {
    const r = await this.runner.exec(["/usr/bin/test", "-d", path]);
    if (r.exitCode !== 0) {
      const bytes = await this.readBytes(path);
      mkdirSync(dirname(hostTarget), { recursive: true });
      await writeFile(hostTarget, bytes);
      return;
    }
    mkdirSync(hostTarget, { recursive: true });
    // GNU tar defers links that point outside the target until the end and refuses `..` members.
    await this.pipe(
      ["/bin/tar", "-C", path, "-cf", "-", "."],
      ["/bin/tar", "-C", hostTarget, "-xf", "-", "--no-same-owner"],
      "outside",
      path,
    );
  }

  /** Stream tar from one side to the other. `inside` says which end runs in the sandbox. */
  private pipe(
    producer: string[],
    consumer: string[],
    consumerSide: "inside" | "outside",
    what: string,
  ): Promise<void> {
    const prod = consumerSide === "inside" ? { argv: producer, cleanup: () => {} } : this.runner.spawnArgv(producer);
    const cons = consumerSide === "inside" ? this.runner.spawnArgv(consumer) : { argv: consumer, cleanup: () => {} };
    return new Promise((resolve, reject) => {
      const p = spawn(prod.argv[0]!, prod.argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
      const c = spawn(cons.argv[0]!, cons.argv.slice(1), { stdio: ["pipe", "ignore", "pipe"] });
      let errText = "";
      p.stderr!.on("data", (b: Buffer) => (errText += b.toString()));
      c.stderr!.on("data", (b: Buffer) => (errText += b.toString()));
      p.stdout!.pipe(c.stdin!);
      c.stdin!.on("error", () => {});
      let done = 0;
      let failed = false;
      const finish = (code: number | null): void => {
        if (code !== 0) failed = true;
        if (++done < 2) return;
        prod.cleanup();
        cons.cleanup();
        if (failed) reject(new SandboxError(`copy of ${what} failed: ${errText.trim()}`));
        else resolve();
      };
      p.on("close", finish);
      c.on("close", finish);
      p.on("error", reject);
      c.on("error", reject);
    });
  }
}
