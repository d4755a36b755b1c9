/**
 * Copy one host file into a sandbox as a stream (never whole in memory), within a deadline: the copy runs inside
 * the sandbox (`cat > target`, parents created), so sandbox symlinks cannot redirect it to the host; a target that
 * blocks (a FIFO planted by the sandbox) is killed at the deadline with its whole process group.
 */
import { spawn } from "node:child_process";
import { createReadStream } from "node:fs";
import type { Sandbox } from "../sandbox/sandbox.js";
import { killCgroup } from "../sandbox/limits.js";
import { descendants, killQuietly } from "../sandbox/procfs.js";
import { SandboxError, TimeoutError } from "../util/errors.js";

const SCRIPT = 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"';

export function streamFileIn(sandbox: Sandbox, hostFile: string, target: string, timeoutMs: number): Promise<void> {
  const { argv, group, cleanup } = sandbox.commandArgv(["/bin/sh", "-c", SCRIPT, "sh", target], {});
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "ignore", "pipe"], env: {} });
    let stderr = "";
    let timedOut = false;
    child.stderr!.on("data", (b: Buffer) => {
      if (stderr.length < 4096) stderr += b.toString();
    });
    const timer = setTimeout(() => {
      timedOut = true;
      if (group) void killCgroup(group, false, [child.pid!]);
      else for (const pid of descendants(child.pid!)) killQuietly(pid);
      child.kill("SIGKILL");
    }, timeoutMs);
    const input = createReadStream(hostFile);
    input.on("error", (e) => child.kill("SIGKILL") && reject(e));
    child.stdin!.on("error", () => {});
    input.pipe(child.stdin!);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      input.destroy();
      cleanup();
      if (timedOut) reject(new TimeoutError(`writing ${target} took longer than ${timeoutMs} ms`));
      else if (code !== 0) reject(new SandboxError(`write ${target} failed: ${stderr.trim() || `exit ${code}`}`));
      else resolve();
    });
  });
}
