import { helperPath } from "./host.js";
import { SANDBOX_CAPS } from "./plan.js";

/** How to start a process inside a running sandbox. */
export interface EnterSpec {
  pid1: number;
  /** cgroup dirs the process joins before entering (the sandbox's memory group, its own pids group). */
  cgroupDirs: string[];
  rlimits: string[];
  uid: number;
  gid: number;
  cwd: string;
  env: Record<string, string>;
  /** stderr onto stdout: one descriptor, so that the order of writes is kept. */
  mergeStderr?: boolean;
  seccomp: boolean;
  /** Keep the caller's terminal and session (an interactive shell); otherwise the command gets a session of its own. */
  keepTerminal?: boolean;
}

/**
 * argv that runs `command` inside the sandbox, in one exec of the native helper: join cgroups, apply rlimits, enter
 * every namespace of pid 1 (user namespace first, root and cwd included), then, in a child: Docker's capability
 * set, the sandbox's user, no inherited descriptors, a fresh keyring, a clean environment, no_new_privs, seccomp.
 */
export function enterArgv(spec: EnterSpec, command: readonly string[]): string[] {
  return [
    helperPath(),
    "enter",
    "--pid",
    String(spec.pid1),
    ...spec.cgroupDirs.flatMap((c) => ["--cgroup", c]),
    ...spec.rlimits,
    "--caps",
    SANDBOX_CAPS.join(","),
    "--uid",
    String(spec.uid),
    "--gid",
    String(spec.gid),
    ...(spec.mergeStderr ? ["--merge-stderr"] : []),
    ...(spec.seccomp ? [] : ["--no-seccomp"]),
    ...(spec.keepTerminal ? ["--keep-terminal"] : []),
    "--cwd",
    spec.cwd,
    ...Object.entries(spec.env).flatMap(([k, v]) => ["--env", `${k}=${v}`]),
    "--",
    ...command,
  ];
}
