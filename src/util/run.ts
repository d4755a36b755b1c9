import { spawn, type SpawnOptions } from "node:child_process";

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions extends Pick<SpawnOptions, "cwd" | "env"> {
  /** Bytes written to the child's stdin (stdin is closed either way). */
  input?: string | Buffer;
  timeoutMs?: number;
}

/** Run a host command to completion and capture its output. Never rejects on a non-zero exit. */
export function run(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout!.on("data", (b: Buffer) => out.push(b));
    child.stderr!.on("data", (b: Buffer) => err.push(b));
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs) : undefined;
    child.on("error", (e) => {
      if (timer) clearTimeout(timer);
      reject(e);
    });
    child.on("close", (code, signal) => {
      if (timer) clearTimeout(timer);
      resolvePromise({
        code,
        signal,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      });
    });
    child.stdin!.on("error", () => {});
    child.stdin!.end(opts.input ?? "");
  });
}

/** Like run() but throws with the command's stderr when it fails. */
export async function runOk(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<string> {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) {
    const detail = (r.stderr || r.stdout).trim().split("\n").slice(-20).join("\n");
    throw new Error(`${cmd} ${args.join(" ")} failed (exit ${r.code ?? r.signal}): ${detail}`);
  }
  return r.stdout;
}
