/**
 * A live sandbox given the writable state of another one, in place (`msb-helper restore`): how a sandbox goes back
 * to a pristine sibling's state (a reset) and how a fork's child takes its parent's. The sandbox keeps its pid 1,
 * namespaces, id range and cgroups; every process but pid 1 dies; its writable places are a new generation (a
 * fresh tmpfs) holding a copy of the seed's; its commands get new IPC (and, without the host's network, network)
 * namespaces; its pid counter is the seed's.
 */
import { spawn } from "node:child_process";
import type { HelperProcess } from "./spawner.js";
import { SandboxError } from "../errors.js";
import type { WaitingHelper } from "./enter.js";
import { helperPath, type HostIds } from "./host.js";
import type { MountPlan, SandboxMount } from "./plan.js";
import { sandboxMounts } from "./plan.js";

/** Where a sandbox's writable state is, as a restore reads or replaces it. */
export interface RestoreSide {
  pid1: number;
  /** The launch process, whose mount namespace holds the scratch. */
  holderPid: number;
  /** The scratch (its path in that namespace) and the index of the generation in use. */
  scratch: string;
  generation: number;
  /** Root mode: the sandbox's id range. */
  hostIds?: HostIds;
  /** Its pid namespace's counter when known (a seed that ran nothing since it was last read). */
  lastPid?: number;
}

export interface RestoreTarget extends RestoreSide {
  plan: MountPlan;
  /** Lower layers of each overlay (the launch's clones `l/<i>-<k>`). */
  lowers: number[];
  diskBytes: number;
  /** uid:gid (inside) owning the home. */
  owner: string;
  /** The sandbox's pids group: every process in it but pid 1 and the launch is killed first. */
  pidsCgroup?: string;
  /** The next command's helper, waiting in the pids group: left alone (a host process of ours, not yet inside). */
  keepPid?: number;
  /** Joined by a helper started for the restore (its copies are charged there). */
  memoryCgroup?: string;
}

/** The directory of a generation under the scratch. */
export function generationDir(s: Pick<RestoreSide, "scratch" | "generation">): string {
  return `${s.scratch}/g${s.generation}`;
}

/** Where, as seen from the host, commands find a restored sandbox's namespaces (`enter --ns-dir`): its generation's. */
export function namespacesDir(s: Pick<RestoreSide, "holderPid" | "scratch" | "generation">): string {
  return `/proc/${s.holderPid}/root${s.scratch}/ns/g${s.generation}`;
}

/** How a restore treats the target's next generation (made ahead after its last restore, or by its launch). */
export interface GenerationPlan {
  /** It was filled ahead with a copy of this very seed (taken as it is when whole); else filled now. */
  filled: boolean;
  /** What it holds is not known (the helper that made it failed): it is made anew. */
  remake: boolean;
  /** After the restore, the generation after it is filled with another copy of the seed, if it holds at most this. */
  refillBytes: number;
}

/** What the restore does with one mount: moves it (the host's trees), mounts it again, makes a symlink, or nothing. */
function mountArgs(m: SandboxMount): string[] {
  switch (m.kind) {
    case "system":
    case "proc":
      return ["--move", m.target];
    case "dev":
      return ["--move", m.target, "--bind", `+shm=${m.shm}`];
    case "symlink":
      return ["--symlink", `${m.to}=${m.target}`];
    case "place":
      return m.target === "/" ? ["--root", `+${m.place}`] : ["--bind", `+${m.place}=${m.target}`];
    case "source":
      return [m.readOnly ? "--ro-bind" : "--bind", `${m.source}=${m.target}`];
    case "dir":
      return []; // made with the mount points under it
  }
}

/** `msb-helper restore` arguments: `target` given `seed`'s writable state. */
export function restoreArgs(
  target: RestoreTarget,
  seed: RestoreSide,
  keepPidCounter: boolean,
  gen: GenerationPlan,
): string[] {
  const a = ["--pid1", String(target.pid1), "--holder", String(target.holderPid), "--scratch", target.scratch];
  const g = target.generation;
  a.push("--gen", `g${g + 1}`, "--old-gen", `g${g}`, "--next-gen", `g${g + 2}`);
  a.push("--disk", String(target.diskBytes), "--owner", target.owner);
  if (gen.filled) a.push("--prefilled");
  if (gen.remake) a.push("--remake-gen");
  if (gen.refillBytes > 0) a.push("--refill", String(gen.refillBytes));
  if (target.pidsCgroup) a.push("--kill-cgroup", target.pidsCgroup, "--keep", String(target.pid1));
  a.push("--keep", String(target.holderPid));
  if (target.keepPid) a.push("--keep", String(target.keepPid));
  a.push("--seed-holder", String(seed.holderPid), "--seed-dir", generationDir(seed), "--seed-pid1", String(seed.pid1));
  if (keepPidCounter) a.push("--last-pid", "keep");
  else if (seed.lastPid !== undefined) a.push("--last-pid", String(seed.lastPid));
  if (target.hostIds && seed.hostIds)
    a.push("--shift", `${seed.hostIds.uid}:${target.hostIds.uid}:${target.hostIds.count}`);
  for (const [i, count] of target.lowers.entries()) a.push("--overlay", `${i}:0:${count}`);
  if (!target.plan.network) a.push("--fresh-net");
  a.push(...treeArgs(target.plan));
  return a;
}

/** The mount tree's arguments, the same at every restore of a sandbox: computed once per plan. */
const treeArgsOf = new WeakMap<MountPlan, string[]>();
function treeArgs(plan: MountPlan): string[] {
  let args = treeArgsOf.get(plan);
  if (!args) {
    args = sandboxMounts(plan, helperPath()).flatMap(mountArgs);
    treeArgsOf.set(plan, args);
  }
  return args;
}

/**
 * Run a restore, its copies charged to the sandbox's memory: through `spare`, the next command's helper, in the
 * sandbox's cgroups already (or about to be: a cgroup v1 move waits for an RCU grace period, which the time between
 * an agent's commands hides), else through a helper started now that joins the memory group first.
 */
export async function runRestore(
  args: string[],
  o: { spare?: WaitingHelper; memoryCgroup?: string },
): Promise<RestoreRun> {
  if (o.spare?.ready) {
    await o.spare.joined;
    if (o.spare.ready) return new RestoreRun(o.spare.runHelper(["restore", ...args]));
  }
  const join = o.memoryCgroup ? ["--cgroup", o.memoryCgroup] : [];
  const child = spawn(helperPath(), ["restore", ...join, ...args], { stdio: ["ignore", "pipe", "pipe"], env: {} });
  return new RestoreRun(child);
}

/** One restore in progress. */
export class RestoreRun {
  /** Settles once the sandbox is usable again (or the restore failed), with the seed's pid counter. */
  readonly ready: Promise<number | undefined>;
  /** Settles when the helper has exited: true when all went well (the next generation made as asked). */
  readonly exited: Promise<boolean>;

  constructor(readonly child: HelperProcess) {
    let stderr = "";
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (s: string) => {
      if (stderr.length < 16_384) stderr += s;
    });
    // 'close', not 'exit': the helper may be gone before its "R" is read.
    this.exited = new Promise((resolve) => {
      child.once("close", (code) => resolve(code === 0));
      child.once("error", () => resolve(false));
    });
    this.ready = new Promise((resolve, reject) => {
      child.stdout!.setEncoding("utf8");
      child.stdout!.once("data", (said: string) => {
        const n = Number(/^R (-?\d+)/.exec(said)?.[1]);
        resolve(Number.isInteger(n) && n >= 0 ? n : undefined);
      });
      child.once("error", (e) => reject(new SandboxError(`restore failed to start: ${e.message}`)));
      child.once("close", (code, sig) =>
        reject(new SandboxError(`restore failed: ${stderr.trim() || `the helper exited (${code ?? sig})`}`)),
      );
    });
    this.ready.catch(() => undefined);
  }
}
