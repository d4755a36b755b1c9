import { spawn, type ChildProcess } from "node:child_process";

/**
 * `bash -n` on the host, from a pre-started process: exec'ing bash costs several milliseconds on a VM, so the next
 * checker is always already waiting on its stdin. The host's bash is the one every sandbox runs (its /usr is the
 * host's), and `-n` only parses: nothing in the command runs here.
 */
export interface SyntaxVerdict {
  ok: boolean;
  /** bash's error message when not ok. */
  message: string;
}

let warm: ChildProcess | undefined;

function startChecker(): ChildProcess {
  const child = spawn("/bin/bash", ["-n"], { stdio: ["pipe", "ignore", "pipe"], env: { PATH: "/usr/bin:/bin" } });
  child.on("error", () => {});
  child.stdin!.on("error", () => {});
  // Do not keep the host process alive just for a spare checker.
  child.unref();
  (child.stdin as unknown as { unref?: () => void }).unref?.();
  (child.stderr as unknown as { unref?: () => void }).unref?.();
  return child;
}

export function checkSyntax(command: string): Promise<SyntaxVerdict> {
  const child = warm && warm.exitCode === null ? warm : startChecker();
  warm = undefined;
  // In use now: this one must keep the process alive until it answers.
  child.ref();
  (child.stdin as unknown as { ref?: () => void }).ref?.();
  (child.stderr as unknown as { ref?: () => void }).ref?.();
  return new Promise((resolve) => {
    let err = "";
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (s: string) => (err += s));
    child.on("close", (code) => {
      resolve({ ok: code === 0, message: err });
      // Spawning blocks the event loop for a moment: do it after answering, not before.
      setImmediate(() => (warm ??= startChecker()));
    });
    child.stdin!.end(command.endsWith("\n") ? command : command + "\n");
  });
}
