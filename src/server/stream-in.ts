/**
 * Copy one host file into a sandbox as a stream (never whole in memory), within a deadline: the copy runs inside
 * the sandbox (`cat > target`, parents created), so sandbox symlinks cannot redirect it to the host; a target that
 * blocks (a FIFO planted by the sandbox) is killed at the deadline with its whole process tree.
 */
import { createReadStream } from "node:fs";
import type { Sandbox } from "../sandbox/sandbox.js";
import { SandboxError, TimeoutError } from "../errors.js";

const SCRIPT = 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"';

export async function streamFileIn(
  sandbox: Sandbox,
  hostFile: string,
  target: string,
  timeoutMs: number,
): Promise<void> {
  const cmd = await sandbox.stream(["/bin/sh", "-c", SCRIPT, "sh", target]);
  const { child } = cmd;
  return new Promise((resolve, reject) => {
    let stderr = "";
    let timedOut = false;
    child.stdout!.resume();
    child.stderr!.on("data", (b: Buffer) => {
      if (stderr.length < 4096) stderr += b.toString();
    });
    const timer = setTimeout(() => {
      timedOut = true;
      void cmd.kill();
    }, timeoutMs);
    const input = createReadStream(hostFile);
    input.on("error", (e) => void cmd.kill().then(() => reject(e)));
    child.stdin!.on("error", () => {});
    input.pipe(child.stdin!);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      input.destroy();
      cmd.cleanup();
      if (timedOut) reject(new TimeoutError(`writing ${target} took longer than ${timeoutMs} ms`));
      else if (code !== 0) reject(new SandboxError(`write ${target} failed: ${stderr.trim() || `exit ${code}`}`));
      else resolve();
    });
  });
}
