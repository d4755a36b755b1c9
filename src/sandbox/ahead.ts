import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { WaitingHelper } from "./enter.js";
import { startLaunchAhead } from "./launcher.js";
import {
  allCgroupDirs,
  cgroupDirs,
  cgroupTreePids,
  commandCgroupPath,
  killSandboxCgroups,
  makeCgroups,
  removeCgroupTree,
  removeSandboxCgroups,
  type SandboxCgroups,
} from "./limits.js";
import { isRunning, killQuietly } from "./procfs.js";
import { type HelperProcess, sendDrop, untilGone } from "./spawner.js";

/**
 * Processes started ahead of what they serve, so that nothing waits for them: a command's helper (in the command's
 * cgroups before the command comes), and a whole sandbox's start (its id, cgroups, launch and first command's helper,
 * prepared before the sandbox is asked for). A cgroup v1 move waits for an RCU grace period, 5-15 ms on an idle host:
 * made ahead, that wait is in nobody's latency.
 */

export function newSandboxId(): string {
  return `sb-${randomBytes(6).toString("hex")}`;
}

/**
 * A command's pids group: random, not counted. A command sees its group's name (/proc/self/cgroup), which must not
 * tell how many ran before it (a restore forgets them), nor collide with a group still being removed.
 */
export function commandGroupName(): string {
  return `c${randomBytes(6).toString("hex")}`;
}

/** The cgroups a command joins: the sandbox's memory, freezer and CPU groups, and its own pids group. */
export function commandCgroups(cgroups: SandboxCgroups, group: string | undefined): string[] {
  return [cgroups.memory, cgroups.freezer, cgroups.cpu, cgroups.cpuacct, group].filter((d): d is string => Boolean(d));
}

/** A helper waiting, in a new pids group of its own (it makes it), for a command of the sandbox. */
export function waitingHelper(cgroups: SandboxCgroups, name: string): Promise<WaitingHelper> {
  const group = commandCgroupPath(cgroups, name);
  return WaitingHelper.start(commandCgroups(cgroups, undefined), group).catch((e: unknown) => {
    if (group) removeCgroupTree(group);
    throw e;
  });
}

/** A helper not needed after all leaves; its pids group goes with it (a group with a process in it stays). */
export async function dropHelper(helper: WaitingHelper): Promise<void> {
  await helper.drop();
  if (helper.group) removeCgroupTree(helper.group);
}

/** A helper started ahead, once started: undefined if it could not be (its command then starts one of its own). */
export function settled(spare: Promise<WaitingHelper> | undefined): Promise<WaitingHelper | undefined> {
  return spare ? spare.catch(() => undefined) : Promise.resolve(undefined);
}

export async function dropSpare(spare: Promise<WaitingHelper> | undefined): Promise<void> {
  const helper = await settled(spare);
  if (helper) await dropHelper(helper);
}

/**
 * A sandbox's start made before it is asked for: its id, its cgroups (no limits yet) and, in them already, its
 * launch (waiting for the rest of its arguments) and its first command's helper. Unref'd while it waits: a prepared
 * start never keeps node running.
 */
export interface PreparedStart {
  readonly id: string;
  readonly cgroups: SandboxCgroups;
  readonly launcher: HelperProcess;
  readonly spare: Promise<WaitingHelper>;
}

/** A prepared start not taken within this long is dropped: an idle process holds no cgroups or helpers for long. */
const PREPARED_IDLE_MS = 30_000;

let startsSeen = 0;

interface NextStart {
  start: Promise<PreparedStart | undefined>;
  memory: boolean;
  expiry: NodeJS.Timeout;
  /** Once made: what the process's exit removes, if still nobody's. */
  made?: PreparedStart;
}
let next: NextStart | undefined;
let exitHooked = false;

/** Not ended, as far as node knows, nor as far as the kernel does (an exit node has not heard of yet). */
function alive(p: HelperProcess): boolean {
  return p.exitCode === null && p.signalCode === null && isRunning(p.pid!);
}

/**
 * The start prepared for this sandbox (`memory`: whether it has a memory limit, i.e. a memory group), if one waits,
 * fits and its launch still lives; one that does not is dropped.
 */
export async function takePreparedStart(memory: boolean): Promise<PreparedStart | undefined> {
  startsSeen++;
  const waiting = next;
  next = undefined;
  if (waiting) clearTimeout(waiting.expiry);
  const prepared = waiting && waiting.memory === memory ? await waiting.start : undefined;
  if (waiting && !prepared) void waiting.start.then((p) => p && dropPreparedStart(p));
  if (!prepared) return undefined;
  if (!alive(prepared.launcher)) {
    void dropPreparedStart(prepared);
    return undefined;
  }
  prepared.launcher.ref();
  void prepared.spare.then((h) => h.child.ref()).catch(() => undefined);
  return prepared;
}

/**
 * Prepares the start of the process's next sandbox (shaped as this one's), unless one is prepared already. A
 * process's first sandbox prepares none (a one-shot command leaves nothing behind); from the second on, each start
 * prepares the one after it, best while its own launch runs (node waits then, and the launch's processes run one at
 * a time).
 */
export function prepareNextStart(memory: boolean): void {
  if (startsSeen < 2 || next) return;
  const start = prepareStart(memory);
  const expiry = setTimeout(() => {
    if (next?.start !== start) return;
    next = undefined;
    void start.then((p) => p && dropPreparedStart(p));
  }, PREPARED_IDLE_MS);
  expiry.unref();
  const entry: NextStart = { start, memory, expiry };
  next = entry;
  void start.then((p) => {
    if (p) entry.made = p;
  });
  if (!exitHooked) {
    exitHooked = true;
    process.on("exit", () => {
      if (next?.made) removeAtExit(next.made);
    });
  }
}

/**
 * At the process's exit (synchronous): its helpers killed (they ran nothing) and its cgroups removed once they are
 * out, within a short bound (what is left then is a dead sandbox's to the reaper: empty groups, no sandbox).
 */
function removeAtExit(p: PreparedStart): void {
  for (const pid of allCgroupDirs(p.cgroups).flatMap(cgroupTreePids)) killQuietly(pid);
  const deadline = Date.now() + 200;
  const tick = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    removeSandboxCgroups(p.cgroups);
    if (!allCgroupDirs(p.cgroups).some(existsSync) || Date.now() > deadline) return;
    Atomics.wait(tick, 0, 0, 2);
  }
}

/**
 * Undefined when it could not be made (the sandbox then starts the usual way) or would save nothing: with no cgroup to
 * join, there is no wait to take off a start's path.
 */
async function prepareStart(memory: boolean): Promise<PreparedStart | undefined> {
  const id = newSandboxId();
  let cgroups: SandboxCgroups = {};
  try {
    cgroups = await makeCgroups(id, { memory });
    if (cgroupDirs(cgroups).length === 0) {
      await killSandboxCgroups(cgroups);
      return undefined;
    }
    const spare = waitingHelper(cgroups, commandGroupName());
    spare.then((h) => h.child.unref()).catch(() => undefined);
    const launcher = await startLaunchAhead(cgroups).catch(async (e: unknown) => {
      await dropSpare(spare);
      throw e;
    });
    launcher.unref();
    launcher.stdin!.on("error", () => {});
    return { id, cgroups, launcher, spare };
  } catch {
    await killSandboxCgroups(cgroups);
    return undefined;
  }
}

/** A prepared start nobody takes: its helpers told to leave (they made and ran nothing), its cgroups removed. */
async function dropPreparedStart(p: PreparedStart): Promise<void> {
  const { launcher } = p;
  // Counted again while they leave: whoever awaits this is not cut short by node's exit.
  launcher.ref();
  void p.spare.then((h) => h.child.ref()).catch(() => undefined);
  const gone = untilGone(launcher);
  sendDrop(launcher.stdin!);
  await Promise.all([gone, dropSpare(p.spare)]);
  await killSandboxCgroups(p.cgroups);
}

/** The start waiting for this process's next sandbox, once made: its id and its launch's pid (for inspection). */
export function preparedStart(): { id: string; launcherPid: number } | undefined {
  const made = next?.made;
  return made && { id: made.id, launcherPid: made.launcher.pid! };
}

/** Drops the start prepared for this process's next sandbox, if any (e.g. when a server shuts down). */
export async function dropNextStart(): Promise<void> {
  const waiting = next;
  next = undefined;
  if (!waiting) return;
  clearTimeout(waiting.expiry);
  const p = await waiting.start;
  if (p) await dropPreparedStart(p);
}
