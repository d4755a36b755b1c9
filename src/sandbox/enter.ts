import { helperPath, requireTool, type LaunchMode } from "./host.js";
import { SANDBOX_CAPS } from "./plan.js";

/** How to start a process inside a running sandbox. */
export interface EnterSpec {
  mode: LaunchMode;
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
}

// Joins cgroups as its first act, so that nothing the command forks escapes its accounting.
const JOIN = `for c in "$@"; do [ "$c" = -- ] && break; echo $$ > "$c/cgroup.procs"; shift; done; shift; exec "$@"`;

/**
 * argv that runs `command` inside the sandbox: join cgroups, apply rlimits, enter every namespace of pid 1 (root
 * and cwd included), drop to the sandbox's capability set and user, start from a clean environment. One exec of
 * the native helper, or the util-linux chain when it is missing.
 */
export function enterArgv(spec: EnterSpec, command: readonly string[]): string[] {
  const helper = helperPath();
  if (helper) {
    return [
      helper,
      "enter",
      "--pid",
      String(spec.pid1),
      ...(spec.mode === "userns" ? ["--userns"] : []),
      ...spec.cgroupDirs.flatMap((c) => ["--cgroup", c]),
      ...spec.rlimits,
      ...(spec.mode === "root" ? ["--caps", SANDBOX_CAPS.join(",")] : []),
      ...(spec.uid !== 0 || spec.gid !== 0 ? ["--uid", String(spec.uid), "--gid", String(spec.gid)] : []),
      ...(spec.mergeStderr ? ["--merge-stderr"] : []),
      "--cwd",
      spec.cwd,
      ...Object.entries(spec.env).flatMap(([k, v]) => ["--env", `${k}=${v}`]),
      "--",
      ...command,
    ];
  }
  return fallbackArgv(spec, command);
}

/** The same with util-linux tools, where the native helper is missing: one exec more per step. */
function fallbackArgv(spec: EnterSpec, command: readonly string[]): string[] {
  const nsenter = requireTool("nsenter", "util-linux");
  const argv: string[] = [];
  if (spec.cgroupDirs.length) argv.push("/bin/sh", "-c", JOIN, "minisandbox-join", ...spec.cgroupDirs, "--");
  if (spec.rlimits.length) argv.push(requireTool("prlimit", "util-linux"), ...spec.rlimits, "--");
  argv.push(nsenter, "-t", String(spec.pid1));
  // The user namespace maps only us (to root): keep our credentials rather than setgroups (denied there).
  if (spec.mode === "userns") argv.push("-U", "--preserve-credentials");
  argv.push("-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", "--");
  // setpriv and env run inside: they come from the sandbox's read-only /usr.
  const priv = ["/usr/bin/setpriv"];
  if (spec.mode === "root") priv.push("--bounding-set", ["-all", ...SANDBOX_CAPS.map((c) => `+${c}`)].join(","));
  if (spec.uid !== 0 || spec.gid !== 0)
    priv.push("--reuid", String(spec.uid), "--regid", String(spec.gid), "--clear-groups");
  if (priv.length > 1) argv.push(...priv, "--");
  argv.push("/usr/bin/env", "-i", "-C", spec.cwd);
  for (const [k, v] of Object.entries(spec.env)) argv.push(`${k}=${v}`);
  if (spec.mergeStderr) argv.push("/bin/sh", "-c", 'exec 2>&1; exec "$@"', "sh");
  argv.push(...command);
  return argv;
}
