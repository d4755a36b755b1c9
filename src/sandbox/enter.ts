import { helperPath } from "./host.js";
import { SANDBOX_CAPS } from "./plan.js";
import { type HelperProcess, sendArgs, sendDrop, startHelper, untilGone } from "./spawner.js";

/** Where a process enters a running sandbox: fixed for the sandbox's life, known before any command. */
export interface EnterPlace {
  pid1: number;
  /** cgroup dirs the process joins before entering (the sandbox's memory group, its own pids group). */
  cgroupDirs: string[];
}

/** What one command runs as, once inside. */
export interface EnterCommand {
  rlimits: string[];
  uid: number;
  gid: number;
  cwd: string;
  env: Record<string, string>;
  /** stderr onto stdout: one descriptor, so that the order of writes is kept. */
  mergeStderr?: boolean;
  seccomp: boolean;
  /**
   * An interactive shell: on a terminal, a terminal of the sandbox's own (its devpts, as `docker run -t`) relayed to
   * the caller's (raw meanwhile, its size followed, put back after); else the caller's session is kept. Otherwise
   * the command gets a session of its own.
   */
  keepTerminal?: boolean;
  /** Landlock: connect only to abstract unix sockets made by the command's own tree (a sandbox with the network). */
  scopeAbstractUnix?: boolean;
  /** A restored sandbox's IPC and network namespaces, which its commands enter instead of pid 1's. */
  nsDir?: string;
}

export type EnterSpec = EnterPlace & EnterCommand;

function placeArgs(place: EnterPlace): string[] {
  return ["--pid", String(place.pid1), ...place.cgroupDirs.flatMap((c) => ["--cgroup", c])];
}

function commandArgs(spec: EnterCommand, command: readonly string[]): string[] {
  return [
    ...(spec.nsDir ? ["--ns-dir", spec.nsDir] : []),
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
    ...(spec.scopeAbstractUnix ? ["--scope-abstract-unix"] : []),
    "--cwd",
    spec.cwd,
    ...Object.entries(spec.env).flatMap(([k, v]) => ["--env", `${k}=${v}`]),
    "--",
    ...command,
  ];
}

/**
 * argv that runs `command` inside the sandbox, in one exec of the native helper: join cgroups, enter every namespace
 * of pid 1 (user namespace first, root and cwd included), rlimits, then, in a child: Docker's capability set, the
 * sandbox's user, no inherited descriptors, a fresh keyring, a clean environment, no_new_privs, seccomp.
 */
export function enterArgv(spec: EnterSpec, command: readonly string[]): string[] {
  return [helperPath(), "enter", ...placeArgs(spec), ...commandArgs(spec, command)];
}

/**
 * Descriptor of a waiting helper on which its command arrives (its length, then NUL-separated; or "drop"); on the
 * next one it says it joined its cgroups.
 */
const ARGS_FD = 3;
const JOINED_FD = 4;
/** On the one above, the command's child says it reached the command (its exec): the helper's steps went well. */
const REACHED_FD = 5;

/** True when a byte comes on `stream` before it ends. */
function firstByte(stream: NodeJS.ReadableStream): Promise<boolean> {
  return new Promise((resolve) => {
    stream.once("data", () => resolve(true));
    // At the end itself, not at "close" (which waits for the handle's close, after a turn of the loop).
    stream.once("end", () => resolve(false));
    stream.once("close", () => resolve(false));
    stream.once("error", () => resolve(false));
  });
}

/** stdin, stdout, stderr, then the descriptors above: the arguments (read), joined and reached (written). */
const WAITING_FDS = ["in", "out", "out", "in", "out", "out"] as const;

/**
 * A helper started ahead of its command: it joins the command's cgroups, then waits. A cgroup v1 move waits for an
 * RCU grace period (5-15 ms on an idle host); joined ahead, the command does not wait for it. Given the command, it
 * enters the sandbox as `enterArgv` does. Its stdio pipes are the command's; until `run`, nothing runs inside.
 * Started by the spawner (`start`): node forks nothing for it.
 */
export class WaitingHelper {
  /** Settles once the helper is in its cgroups (or gone): a job handed over then waits for no move. */
  readonly joined: Promise<void>;
  /**
   * True once the helper reached its command; false when it ended without (a failure of its own before the exec:
   * its exit status and message are the helper's, not the command's). The command never holds the descriptor.
   */
  readonly reached: Promise<boolean>;
  private isJoined = false;
  private used = false;
  private failed = false;

  /** Joins `cgroupDirs`, then `group` (the command's own pids group: made by the helper). */
  static async start(cgroupDirs: string[], group: string | undefined): Promise<WaitingHelper> {
    const joins = [...cgroupDirs.flatMap((c) => ["--cgroup", c]), ...(group ? ["--new-cgroup", group] : [])];
    const argv = [helperPath(), "enter", "--args-fd", String(ARGS_FD), ...joins];
    return new WaitingHelper(await startHelper(argv, {}, WAITING_FDS), group);
  }

  private constructor(
    readonly child: HelperProcess,
    /** The command's own pids cgroup (removed by the caller once the command ended). */
    readonly group: string | undefined,
  ) {
    this.child.on("error", () => {
      this.failed = true;
    });
    const said = this.child.stdio[JOINED_FD] as NodeJS.ReadableStream;
    this.joined = firstByte(said).then((joined) => {
      this.isJoined = joined;
    });
    this.reached = firstByte(this.child.stdio[REACHED_FD] as NodeJS.ReadableStream);
    this.child.stdio[ARGS_FD]!.on("error", () => {});
    this.child.stdin!.on("error", () => {});
  }

  /** Still waiting for its command: not failed, used or dropped. */
  get ready(): boolean {
    return !this.used && !this.failed && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Waiting, and in its cgroups already. */
  get inCgroups(): boolean {
    return this.ready && this.isJoined;
  }

  /** Hands over the command: the helper enters pid 1's namespaces, runs it as `spec` says and mirrors its exit. */
  run(spec: EnterSpec, command: readonly string[]): HelperProcess {
    if (this.used) throw new Error("a waiting helper runs one command");
    const args = ["--pid", String(spec.pid1), ...commandArgs(spec, command)];
    this.send(args);
    this.used = true;
    return this.child;
  }

  private send(args: readonly string[]): void {
    sendArgs(this.child.stdio[ARGS_FD] as NodeJS.WritableStream, args);
  }

  /** Hands over another job of the helper's (`restore ...`): run as host root, in the cgroups it joined. */
  runHelper(args: readonly string[]): HelperProcess {
    if (this.used) throw new Error("a waiting helper runs one command");
    this.used = true;
    this.send(args);
    return this.child;
  }

  /** Not needed after all: told so, the helper leaves without running anything. Resolves once it is gone. */
  drop(): Promise<void> {
    const gone = this.failed ? Promise.resolve() : untilGone(this.child);
    if (!this.used) {
      this.used = true;
      sendDrop(this.child.stdio[ARGS_FD] as NodeJS.WritableStream);
      this.child.stdout!.resume();
      this.child.stderr!.resume();
    }
    return gone;
  }
}
