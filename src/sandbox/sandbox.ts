import { existsSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { homeLayout, resolveHome } from "../util/home.js";
import { InvalidInputError, SandboxError } from "../errors.js";
import { BashSession, type RunOptions, type RunResult, type SessionProcess } from "../session/bash-session.js";
import { sessionExists, sessionMissing } from "../session/errors.js";
import {
  commandCgroups,
  commandGroupName,
  dropHelper,
  dropNextStart,
  dropSpare,
  newSandboxId,
  prepareNextStart,
  settled,
  takePreparedStart,
  waitingHelper,
} from "./ahead.js";
import { enterArgv, type EnterSpec, type WaitingHelper } from "./enter.js";
import type { HelperProcess } from "./spawner.js";
import { defaultCommandEnv, HOME_DOTFILES } from "./home.js";
import {
  commandNotStarted,
  DEFAULT_OUTPUT_LIMIT,
  runCommand,
  type ExecOptions,
  type ExecResult,
  type LimitHit,
} from "./exec.js";
import { SandboxFiles, type StreamedCommand } from "./files.js";
import { abstractSocketsScoped, type HostIds, idPool, launchMode, type LaunchMode } from "./host.js";
import { type OpenedDir, openHostDir } from "./host-dir.js";
import { FIRST_PASSED_FD, launch, type Launched } from "./launcher.js";
import {
  createCgroups,
  createCommandCgroup,
  setCgroupLimits,
  enforcement,
  killCgroup,
  waitPidsReleased,
  killSandboxCgroups,
  forksRefused,
  oomKills,
  readCounters,
  removeCgroupTree,
  rlimitArgs,
  onlyProcesses,
  scratchBytes,
  type Enforcement,
  type LimitCounters,
  type Limits,
  type SandboxCgroups,
  freeze,
  thaw,
  withDefaults,
} from "./limits.js";
import {
  CONTROL_PATH,
  defaultCwd,
  parseImageLower,
  TESTBED_PATH,
  type BindMount,
  type MountPlan,
  type OverlayMount,
} from "./plan.js";
import { commandName, descendants, killQuietly, parentPid, processStartTime } from "./procfs.js";
import { reapHome } from "./reaper.js";
import {
  type GenerationPlan,
  namespacesDir,
  type RestoreSide,
  type RestoreTarget,
  restoreArgs,
  runRestore,
} from "./restore.js";
import {
  makeSandboxDirs,
  removeSandboxDirs,
  sandboxPaths,
  type SandboxPaths,
  type SandboxState,
  writeState,
} from "./state.js";

/** What a sandbox sees, and where: its trees, binds, toolchains, home, network and control files. */
function mountPlan(inputs: LaunchInputs, id: string, paths: SandboxPaths): MountPlan {
  const { opts, uid, overlays } = inputs;
  return {
    hostname: opts.hostname ?? id,
    network: opts.network ?? false,
    overlays,
    binds: opts.binds ?? [],
    toolchains: opts.toolchains ?? [],
    home: opts.rootfs?.home ?? (uid === 0 ? "/root" : `/home/u${uid}`),
    controlDir: paths.control,
    cwd: opts.cwd ?? defaultCwd({ overlays }),
  };
}

/** What the reaper needs should this process die: whose the sandbox is, its processes and cgroups. */
function stateOf(id: string, launched: Launched, cgroups: SandboxCgroups): SandboxState {
  return {
    id,
    ownerPid: process.pid,
    ownerStart: processStartTime(process.pid),
    holderPid: launched.child.pid!,
    holderStart: processStartTime(launched.child.pid!),
    pid1: launched.pid1,
    pid1Start: processStartTime(launched.pid1),
    hostUid: launched.hostIds.uid,
    cgroups,
    createdAt: new Date().toISOString(),
  };
}

/** A command handed to its helper: the process, its pids group, and whether the helper reached the command. */
interface StartedCommand {
  child: HelperProcess;
  group?: string;
  cleanup: () => void;
  reached: Promise<boolean>;
}

/**
 * Resolves once the command's helper reached the command; throws a SandboxError with the helper's last words when
 * it ended without (nothing of the command ran: its exit status is the helper's own, never the command's).
 */
async function reachedOrThrow(started: StartedCommand): Promise<void> {
  if (await started.reached) return;
  let said = "";
  const stderr = started.child.stderr;
  if (stderr && !stderr.destroyed && !stderr.closed) {
    stderr.setEncoding("utf8");
    stderr.on("data", (s: string) => {
      if (said.length < 4096) said += s;
    });
    await new Promise((resolve) => stderr.once("close", resolve));
  }
  started.cleanup();
  throw commandNotStarted(said);
}

/** How long after a command ended the next command's helper is started (see startSpareSoon). */
const SPARE_DELAY_MS = 50;

/** How one command runs inside (besides its argv). */
export interface CommandOptions {
  cwd?: string;
  env?: Record<string, string>;
  uid?: number;
  gid?: number;
  mergeOutput?: boolean;
  /** An interactive command: on a terminal, one of the sandbox's own (its devpts), relayed to the caller's. */
  keepTerminal?: boolean;
}

export interface SandboxOptions {
  /** Data directory (default: MINISANDBOX_HOME or the per-user default). */
  home?: string;
  /** Host directory mounted copy-on-write at /testbed. */
  dir?: string;
  /**
   * A root filesystem (an image's) that becomes the sandbox's `/`, copy-on-write, instead of the host's /usr, /etc
   * and the rest; everything else (namespaces, masks of /proc, seccomp, limits, the network) is as for any sandbox.
   */
  rootfs?: RootFs;
  /** More copy-on-write trees (e.g. a venv). */
  overlays?: OverlayMount[];
  binds?: BindMount[];
  /** Interpreter installations, read-only at their own paths. */
  toolchains?: string[];
  /** Share the host network (default: loopback only). */
  network?: boolean;
  limits?: Limits;
  /** Environment of every command (added to PATH/HOME/LANG defaults; PATH replaces the default). */
  env?: Record<string, string>;
  /** Directories put in front of the default PATH. */
  pathPrepend?: string[];
  cwd?: string;
  /** User inside (default root, as SWE-bench tasks expect). */
  uid?: number;
  gid?: number;
  hostname?: string;
  /** The sandbox closes itself after this long. */
  timeoutMs?: number;
  /** Default output cap for commands and sessions. */
  outputLimitBytes?: number;
  /** Copy the trees instead of overlay-mounting them (what happens automatically where overlayfs is missing). */
  forceCopy?: boolean;
  /** Free-form labels (instance id, env key...) shown by list APIs. */
  labels?: Record<string, string>;
  /** When set, `dir` must lie inside one of these host directories (checked on the opened directory itself). */
  dirRoots?: string[];
  /** The seccomp profile (default on). Turning it off is an explicit, reported choice (`security()`). */
  seccomp?: boolean;
}

export interface RootFs {
  /** The tree, never written (writes go to the sandbox's scratch): a directory or a layer image lower (imageLower). */
  path: string;
  /** First host id of the range its files belong to (the store's, root mode): mapped onto the sandbox's range. */
  owner?: number;
  /** HOME inside: the user's home in that tree (its own files, writable copy-on-write like the rest). */
  home?: string;
}

/** What `Sandbox.security()` reports. */
export interface SandboxSecurity {
  mode: LaunchMode;
  /** Whom root inside is on the host. */
  rootMapsTo: string;
  seccomp: boolean;
  noNewPrivileges: boolean;
  limits: Enforcement;
  /**
   * Trees shown from a layer's metadata image (read-only, nosuid, nodev, over the store's objects; mounted in this
   * sandbox's namespace only) rather than from a directory: the node cache's form, said by `minisandbox doctor`.
   */
  layerImages: boolean;
}

export interface SessionCreateOptions {
  startupSource?: string[];
  startupTimeoutMs?: number;
  outputLimitBytes?: number;
}

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** A lower must exist; a layer image's (its image file and objects) can be mounted only by host root. */
function checkLower(lower: string, mode: LaunchMode): void {
  const image = parseImageLower(lower);
  if (image && mode !== "root")
    throw new InvalidInputError(`lower ${lower}: layer images are mounted only as root; use the materialized layer`);
  for (const path of image ? [image.image, image.objects] : [lower])
    if (!existsSync(path)) throw new InvalidInputError(`mount source ${path} does not exist`);
}

function checkId(value: number, field: "uid" | "gid"): number {
  if (!Number.isInteger(value) || value < 0 || value > 65_535) {
    throw new InvalidInputError(`${field} must be an integer from 0 to 65535, got ${value}`);
  }
  return value;
}

/** The environment every command starts from (nothing of the caller's leaks in). */
function sandboxEnv(opts: SandboxOptions, uid: number, home: string, hostname: string): Record<string, string> {
  const user = uid === 0 ? "root" : `u${uid}`;
  const path = [...(opts.pathPrepend ?? []), DEFAULT_PATH].join(":");
  const base = { PATH: path, HOME: home, USER: user, LOGNAME: user, LANG: "C.UTF-8", HOSTNAME: hostname };
  return { ...base, ...defaultCommandEnv(opts.network ?? false), ...opts.env };
}

/** An image's root filesystem as the first copy-on-write tree, its files mapped from the range they belong to. */
function rootOverlay(rootfs: RootFs, mode: LaunchMode): OverlayMount {
  if (parseImageLower(rootfs.path)) {
    checkLower(rootfs.path, mode);
    if (rootfs.owner !== undefined)
      throw new InvalidInputError("a layer image's files carry the image's own ids: give its root no owner range");
  } else if (!existsSync(rootfs.path)) throw new InvalidInputError(`root filesystem ${rootfs.path} does not exist`);
  return { lower: [rootfs.path], owner: rootfs.owner, target: "/" };
}

/** Plain words for limits this host cannot enforce, so that nobody relies on them. */
function enforcementNotices(mode: LaunchMode, network: boolean): string[] {
  const e = enforcement();
  const missing = [...(e.memory ? [] : ["memory"]), ...(e.pids ? [] : ["process-count"])];
  const notices: string[] = [];
  if (missing.length > 0) {
    const why = mode === "root" ? "their cgroup controllers are not mounted" : "no cgroup is delegated to this user";
    notices.push(`${missing.join(" and ")} limits are not enforced: ${why} (see \`minisandbox doctor\`)`);
  }
  if (network && !abstractSocketsScoped())
    notices.push(
      "this sandbox shares the host's network, and this kernel (Landlock ABI < 6, Linux < 6.12) cannot keep it " +
        "from the host's abstract unix sockets",
    );
  return notices;
}

/** A restore refills the next generation from a still seed holding at most this much (see `Sandbox.restore`). */
export const REFILL_MAX_BYTES = 64 * 1024 * 1024;

/** Everything a launch needs, kept by the sandbox so that its forks start the same way. */
interface LaunchInputs {
  /** Options with home and limits resolved. */
  opts: SandboxOptions;
  sandboxesDir: string;
  mode: LaunchMode;
  uid: number;
  gid: number;
  /** `dir`, held open for the sandbox's life: forks mount the very same directory. */
  dir?: OpenedDir;
  /** The workspace trees as launched (`dir` first). */
  overlays: OverlayMount[];
}

/** What a launch made, kept by the sandbox: its processes, ids, mounts and disk. */
interface Started {
  holder: HelperProcess;
  pid1: number;
  hostIds: HostIds;
  plan: MountPlan;
  diskBytes: number;
}

const reapedFor = new Set<string>();

/** One running isolated workspace. Create with `Sandbox.create`; `close()` (or `await using`) ends it. */
export class Sandbox implements AsyncDisposable {
  readonly id: string;
  readonly home: string;
  readonly createdAt = new Date();
  readonly labels: Record<string, string>;
  readonly files: SandboxFiles;
  readonly sessions: SessionManager;
  /** E2B-style alias: `sandbox.commands.run(cmd)`. */
  readonly commands: { run: (cmd: string | string[], opts?: ExecOptions) => Promise<ExecResult> };
  /** Things the launch had to say (e.g. copy fallback). */
  readonly notices: string[];
  private closed = false;
  private closing: Promise<void> | undefined;
  private finalCounters: LimitCounters | undefined;
  /** Started ahead of the next command, waiting in its cgroups (see WaitingHelper). */
  private spare: Promise<WaitingHelper> | undefined;
  private spareTimer: NodeJS.Timeout | undefined;
  /**
   * A helper waiting in the sandbox's cgroups for its next restore (see `prepareRestore`): the restore then leaves
   * the next command's helper where it is, so that the command after the restore waits for no cgroup move.
   */
  private restoreHelper: Promise<WaitingHelper> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly closeListeners: (() => void)[] = [];

  private constructor(
    private readonly inputs: LaunchInputs,
    readonly paths: SandboxPaths,
    private readonly started: Started,
    private readonly cgroups: SandboxCgroups,
    private readonly rlimits: string[],
    private readonly env: Record<string, string>,
    readonly cwd: string,
    notices: string[],
    spare: Promise<WaitingHelper>,
  ) {
    const opts = inputs.opts;
    this.holder = started.holder;
    this.pid1 = started.pid1;
    this.hostIds = started.hostIds;
    this.opts = opts;
    this.mode = inputs.mode;
    this.uid = inputs.uid;
    this.gid = inputs.gid;
    this.dirPath = inputs.dir?.realPath;
    this.id = paths.dir.slice(paths.dir.lastIndexOf("/") + 1);
    this.home = opts.home!;
    this.labels = opts.labels ?? {};
    this.notices = notices;
    this.files = new SandboxFiles({
      exec: (argv, o) => this.exec(argv, o),
      stream: (argv) => this.stream(argv),
    });
    this.sessions = new SessionManager(this);
    this.commands = { run: (cmd, o) => this.exec(cmd, o) };
    this.spare = spare;
    this.holder.on("exit", () => void this.close());
    if (opts.timeoutMs) {
      this.timer = setTimeout(() => void this.close(), opts.timeoutMs);
      this.timer.unref();
    }
  }

  static async create(options: SandboxOptions = {}): Promise<Sandbox> {
    const home = resolveHome(options.home);
    const layout = homeLayout(home);
    // Leftovers of owners that died (SIGKILL) are cleaned at the first start in each process.
    if (!reapedFor.has(layout.sandboxes)) {
      reapedFor.add(layout.sandboxes);
      await reapHome(home);
    }
    const opts: SandboxOptions = { ...options, home, limits: withDefaults(options.limits) };
    const mode = launchMode();
    const uid = checkId(opts.uid ?? 0, "uid");
    const gid = checkId(opts.gid ?? uid, "gid");
    if (mode === "userns" && (uid !== 0 || gid !== 0)) {
      throw new InvalidInputError("uid: only 0 inside without root on the host (unprivileged sandboxes map only root)");
    }
    const dir = opts.dir === undefined ? undefined : openHostDir(resolve(opts.dir), opts.dirRoots);
    const overlays = [...(opts.overlays ?? [])];
    for (const o of overlays) for (const l of o.lower) checkLower(l, mode);
    // The opened directory itself, as descriptor 5 of the launch: no path is looked up again.
    if (dir) overlays.unshift({ lower: [`/proc/self/fd/${FIRST_PASSED_FD}`], target: TESTBED_PATH });
    if (opts.rootfs) overlays.unshift(rootOverlay(opts.rootfs, mode));
    return Sandbox.launch({
      opts,
      sandboxesDir: layout.sandboxes,
      mode,
      uid,
      gid,
      dir,
      overlays,
    });
  }

  /**
   * Drops the start this process prepared for its next sandbox (from its second sandbox on, each start prepares the
   * next one's id, cgroups and helpers ahead): for a long-lived owner that shuts down but keeps running. A process
   * that exits removes it itself; one killed leaves it to the next reaper.
   */
  static dropPrepared(): Promise<void> {
    return dropNextStart();
  }

  /** Start a sandbox; on failure, release what `inputs` holds (the opened directory). */
  private static async launch(inputs: LaunchInputs): Promise<Sandbox> {
    const { opts, mode, uid, gid } = inputs;
    const limits = opts.limits!;
    // A sandbox of the process's own directory (a descriptor passed to its launch) starts the usual way.
    const prepared = inputs.dir ? undefined : await takePreparedStart(Boolean(limits.memoryBytes));
    const id = prepared?.id ?? newSandboxId();
    const paths = sandboxPaths(inputs.sandboxesDir, id);
    const plan = mountPlan(inputs, id, paths);
    const { home } = plan;
    let cgroups: SandboxCgroups = prepared?.cgroups ?? {};
    let spare: Promise<WaitingHelper> | undefined = prepared?.spare;
    try {
      if (prepared) {
        setCgroupLimits(cgroups, limits);
        await makeSandboxDirs(paths);
      } else {
        const [dirs, made] = await Promise.allSettled([makeSandboxDirs(paths), createCgroups(id, limits)]);
        if (made.status === "fulfilled") cgroups = made.value;
        if (dirs.status === "rejected") throw dirs.reason;
        if (made.status === "rejected") throw made.reason;
      }
      // The first command's helper joins its cgroups while the sandbox starts (or did, with a prepared start).
      spare ??= waitingHelper(cgroups, commandGroupName());
      spare.catch(() => undefined); // its command starts one of its own
      const rlimits = rlimitArgs(limits);
      const diskBytes = scratchBytes(limits, Boolean(cgroups.memory));
      const launching = launch(
        {
          plan,
          scratch: paths.scratch,
          mode,
          ids: mode === "root" ? idPool() : undefined,
          cgroups,
          diskBytes,
          owner: `${uid}:${gid}`,
          forceCopy: opts.forceCopy ?? false,
          rlimits,
          label: id,
          seccomp: opts.seccomp ?? true,
          fds: inputs.dir ? [inputs.dir.fd] : [],
          homeFiles: opts.rootfs ? undefined : HOME_DOTFILES, // an image's home is its own
        },
        prepared?.launcher,
      );
      // The launch is under way (a prepared one has its arguments already): the next sandbox's start meanwhile.
      if (!inputs.dir) prepareNextStart(Boolean(limits.memoryBytes));
      const launched = await launching;
      writeState(paths, stateOf(id, launched, cgroups));
      const env = sandboxEnv(opts, uid, home, plan.hostname);
      const notices = [...launched.notices, ...enforcementNotices(mode, plan.network)];
      const { child: holder, pid1, hostIds } = launched;
      const started = { holder, pid1, hostIds, plan, diskBytes };
      return new Sandbox(inputs, paths, started, cgroups, rlimits, env, plan.cwd, notices, spare);
    } catch (e) {
      await dropSpare(spare);
      await killSandboxCgroups(cgroups);
      await removeSandboxDirs(paths);
      inputs.dir?.release();
      throw e;
    }
  }

  /**
   * `count` sandboxes with this one's current writable state (its workspace trees, `/`, /tmp, home, /dev/shm),
   * copied while it is held still: the children see what the parent had written, then everyone diverges on their
   * own. Processes are not copied; the parent keeps running. The children are `into` (sandboxes started the way
   * this one was and never used: a pool's, ready ahead, which makes the fork a copy and nothing else), then
   * sandboxes started now. If any fails, every child is closed.
   */
  async fork(count = 1, opts: { into?: Sandbox[] } = {}): Promise<Sandbox[]> {
    if (!Number.isInteger(count) || count < 1 || count > 256) {
      throw new InvalidInputError(`fork count must be an integer from 1 to 256, got ${count}`);
    }
    const into = opts.into ?? [];
    if (into.length > count) throw new InvalidInputError(`fork into ${into.length} sandboxes: more than ${count}`);
    for (const c of into) this.checkSibling(c);
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    const started = await Promise.allSettled(Array.from({ length: count - into.length }, () => this.sibling()));
    const children = [...into, ...started.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []))];
    try {
      const failed = started.find((r): r is PromiseRejectedResult => r.status === "rejected");
      if (failed) throw failed.reason;
      const release = await this.hold();
      try {
        // A child is a sandbox of its own: its pid counter is its own too.
        const copied = await Promise.allSettled(children.map((c) => c.restoreFrom(this, true)));
        const bad = copied.find((r): r is PromiseRejectedResult => r.status === "rejected");
        if (bad) throw bad.reason;
      } finally {
        release();
      }
    } catch (e) {
      await Promise.all(children.map((c) => c.close()));
      throw e;
    }
    for (const c of children) c.labels.forkedFrom = this.id;
    return children;
  }

  /**
   * Back to `from`'s writable state, in place: every process but pid 1 ends (sessions included); the workspace
   * trees, `/`, /tmp, home and /dev/shm become a copy of `from`'s (held still meanwhile) on a fresh tmpfs; commands
   * get new IPC (and, without the host's network, network) namespaces; the pid counter and the command count are
   * `from`'s. `from` is a sandbox started the way this one was: a pristine one takes this one back to its start.
   * From a sealed, still `from` (see `seal`), the next generation is then filled with another copy of it, off the
   * restore's path: the next restore from it is a swap (at most `REFILL_MAX_BYTES`, and an eighth of the memory
   * limit, of its writable state; charged to this sandbox's memory meanwhile).
   * If the restore fails the sandbox is closed (its state would be neither).
   */
  async restore(from: Sandbox): Promise<void> {
    this.checkSibling(from);
    if (from === this) throw new InvalidInputError("a sandbox cannot be restored from itself");
    this.beginRestore();
    try {
      const release = await from.hold();
      try {
        await this.restoreFrom(from);
      } finally {
        release();
      }
    } finally {
      this.restoring = false;
    }
  }

  /**
   * From now on nothing runs in this sandbox: commands, sessions and file operations are refused, and so is a
   * restore into it; its next command's helper goes. What a rollout group keeps to copy from (its pristine sandbox,
   * its checkpoints) is sealed. Once nothing but pid 1 is left in it either (no background job of an earlier
   * command: what its pids group holds says so), its writable state can no longer change, and it is *still*: copies
   * of it need not freeze it, and a restore from it refills the target's next generation ahead (see `restore`).
   */
  async seal(): Promise<void> {
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    if (this.restoring || this.holds > 0) throw new InvalidInputError(`sandbox ${this.id} is being restored or copied`);
    this.sealed = true;
    if (this.spareTimer) clearTimeout(this.spareTimer);
    this.spareTimer = undefined;
    const spares = [this.spare, this.restoreHelper];
    this.spare = this.restoreHelper = undefined;
    // Told to leave, they run nothing (not waited for: they are ours, outside the sandbox).
    const helpers = (await Promise.all(spares.map(settled))).filter((h) => h !== undefined);
    for (const h of helpers) void dropHelper(h);
    await this.sessions.closeAll();
    const pids = this.cgroups.pids;
    const ours = [this.pid1, this.holder.pid!, ...helpers.map((h) => h.child.pid!)];
    this.still = !this.closed && pids !== undefined && onlyProcesses(pids, ours);
  }

  /** From now until the restore is over, no command starts. */
  private beginRestore(): void {
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    if (this.sealed) throw new InvalidInputError(`sandbox ${this.id} is sealed: nothing is restored into it`);
    if (this.restoring || this.holds > 0) throw new InvalidInputError(`sandbox ${this.id} is being restored or copied`);
    if (!this.cgroups.pids && this.ranCommands)
      throw new SandboxError("restoring a used sandbox needs the cgroup pids controller (see `minisandbox doctor`)");
    this.restoring = true;
  }

  /** `seed` (held still by the caller) copied into this sandbox; see `restore`. */
  private async restoreFrom(seed: Sandbox, keepPidCounter = false): Promise<void> {
    if (!this.restoring) this.beginRestore();
    try {
      // The previous restore's helper may still be making the next generation (its kill would cut it short).
      await this.restoreTail;
      await this.sessions.closeAll();
      if (this.spareTimer) clearTimeout(this.spareTimer);
      this.spareTimer = undefined;
      // The restore's own helper when one waits, else the next command's (then started again after the restore).
      const own = await settled(this.restoreHelper);
      this.restoreHelper = undefined;
      const next = await settled(this.spare);
      const kept = own?.ready && next?.ready ? next : undefined;
      const spare = own?.ready ? own : next;
      for (const h of [own, next]) if (h && h !== spare && h !== kept) void dropHelper(h);
      if (!kept) this.spare = undefined;
      if (spare && !spare.ready) void dropHelper(spare);
      const gen = this.generationPlan(seed, keepPidCounter);
      const target = { ...this.restoreTarget(), ...(kept ? { keepPid: kept.child.pid! } : {}) };
      const args = restoreArgs(target, seed.restoreSide(), keepPidCounter, gen);
      const run = await runRestore(args, { spare, memoryCgroup: this.cgroups.memory });
      const used = spare;
      void run.exited.then(() => used?.group && removeCgroupTree(used.group));
      const seedPid = await run.ready.catch(async (e: unknown) => {
        await this.close();
        throw e;
      });
      // Counters read or set now hold until a command runs (then `lastPid` is forgotten): reading one costs a process.
      seed.lastPid = seedPid;
      this.lastPid = keepPidCounter ? undefined : seedPid;
      this.generation++;
      this.nsDir = namespacesDir(this.restoreSide());
      // The next generation is known once the helper has made it (and refilled it).
      this.nextGeneration = undefined;
      this.restoreTail = run.exited.then((ok) => {
        if (ok) this.nextGeneration = gen.refillBytes > 0 ? { from: seed } : {};
      });
      this.ranCommands = false;
      this.pruneCommandGroups([spare?.group, kept?.group]);
    } finally {
      this.restoring = false;
    }
    // Helpers used up, started again once the restore is over (their spawns would only share the CPUs with it).
    setImmediate(() => {
      this.startSpare();
      this.prepareRestore();
    });
  }

  /**
   * A helper started ahead for the sandbox's next restore, waiting in its cgroups (a sandbox restored once has one
   * from then on; a rollout group's spares from their start): the restore runs through it, not through the next
   * command's helper, which it leaves waiting, so that the first command after a restore waits for no cgroup move.
   */
  prepareRestore(): void {
    if (this.closed || this.sealed || this.restoring || this.restoreHelper || !this.cgroups.pids) return;
    this.restoreHelper = this.startSpareNow(this.nextGroupName());
  }

  /**
   * What a restore from `seed` does with the next generation: takes it as it is when it was filled from this very
   * seed, still since (nothing changed there); makes it anew when what it holds is unknown; and, from a still seed
   * (a reset's pristine sandbox or checkpoint, not a fork's parent), has the one after it refilled.
   */
  private generationPlan(seed: Sandbox, keepPidCounter: boolean): GenerationPlan {
    const next = this.nextGeneration;
    const memory = this.opts.limits?.memoryBytes;
    const refillBytes =
      seed.still && !keepPidCounter
        ? Math.min(REFILL_MAX_BYTES, memory ? Math.floor(memory / 8) : REFILL_MAX_BYTES)
        : 0;
    return { filled: next?.from === seed && seed.still, remake: next === undefined, refillBytes };
  }

  /** Command groups left by commands the restore ended (all but `keep`: the restore's helper's, the next one's). */
  private pruneCommandGroups(keep: (string | undefined)[]): void {
    const parent = this.cgroups.pids;
    if (!parent) return;
    for (const name of readdirSync(parent, { withFileTypes: true }).filter((e) => e.isDirectory()))
      if (!keep.includes(join(parent, name.name))) removeCgroupTree(join(parent, name.name));
  }

  private restoreSide(): RestoreSide {
    const s = this.started;
    return {
      pid1: s.pid1,
      holderPid: s.holder.pid!,
      scratch: this.paths.scratch,
      generation: this.generation,
      ...(this.mode === "root" ? { hostIds: s.hostIds } : {}),
      ...(this.lastPid !== undefined ? { lastPid: this.lastPid } : {}),
    };
  }

  private restoreTarget(): RestoreTarget {
    const s = this.started;
    return {
      ...this.restoreSide(),
      plan: s.plan,
      lowers: this.inputs.overlays.map((o) => o.lower.length),
      diskBytes: s.diskBytes,
      owner: `${this.uid}:${this.gid}`,
      ...(this.cgroups.pids ? { pidsCgroup: this.cgroups.pids } : {}),
      ...(this.cgroups.memory ? { memoryCgroup: this.cgroups.memory } : {}),
    };
  }

  /**
   * Held still (frozen) until the returned function is called: a copy of its writable state is consistent. Holds
   * nest (the last one lets it go on). Without the freezer, a sandbox of the unprivileged mode is copied as it runs.
   */
  private async hold(): Promise<() => void> {
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    if (this.restoring) throw new InvalidInputError(`sandbox ${this.id} is being restored`);
    if (this.still) return () => {}; // nothing left in it can write
    const dir = this.cgroups.freezer;
    // Copying a running root-mode sandbox without freezing it could race its writes (and its symlink swaps).
    if (!dir && this.mode === "root") throw new SandboxError("fork needs the cgroup freezer controller on this host");
    this.holds++;
    try {
      // Idle (nothing in its pids group but pid 1 and our waiting helpers), it is frozen only if a command starts
      // meanwhile (see checkUsable): until then nothing of it can write.
      if (dir && !this.freezing && !(await this.idle())) this.freezing ??= freeze(dir);
      await this.freezing;
    } catch (e) {
      if (--this.holds === 0) this.thawNow();
      throw e;
    }
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (--this.holds === 0) this.thawNow();
    };
  }

  private thawNow(): void {
    const frozen = this.freezing !== undefined;
    this.freezing = undefined;
    if (frozen) thaw(this.cgroups.freezer);
  }

  /** Nothing but pid 1, the launch and our helpers waiting for a command (or a restore) is in the pids group. */
  private async idle(): Promise<boolean> {
    const pids = this.cgroups.pids;
    if (!pids) return false;
    const helpers = await Promise.all([settled(this.spare), settled(this.restoreHelper)]);
    const ours = [this.pid1, this.holder.pid!, ...helpers.flatMap((h) => (h?.ready ? [h.child.pid!] : []))];
    return onlyProcesses(pids, ours);
  }

  /** A sandbox started the way this one was (its options, trees and user), with nothing of its state. */
  private sibling(): Promise<Sandbox> {
    return Sandbox.launch({ ...this.inputs, dir: this.inputs.dir?.acquire() });
  }

  /** `other` was started the way this one was (same trees, user and network): a restore can swap their states. */
  private checkSibling(other: Sandbox): void {
    if (other.closed) throw new SandboxError(`sandbox ${other.id} is closed`);
    if (other.launchKey !== this.launchKey)
      throw new InvalidInputError(`sandbox ${other.id} was not started the way ${this.id} was (other trees or user)`);
  }

  /** What makes two sandboxes siblings: their trees, binds, toolchains, user and network. */
  private get launchKey(): string {
    const { opts, overlays, uid, gid } = this.inputs;
    const trees = overlays.map((o, i) => ({ lower: i === 0 && this.dirPath ? [this.dirPath] : o.lower, at: o.target }));
    return JSON.stringify([trees, opts.binds, opts.toolchains, uid, gid, opts.network ?? false, this.mode]);
  }

  readonly uid: number;
  readonly gid: number;
  /** Host pid of the sandbox's pid 1 (whose namespaces commands enter). */
  readonly pid1: number;
  /**
   * Whom root inside is on the host: the first id of this sandbox's own range (root mode; uid = gid), or the
   * caller; `count` ids from there are the sandbox's.
   */
  readonly hostIds: HostIds;
  private readonly holder: HelperProcess;
  /** The real host path of `dir`, as opened and mounted. */
  readonly dirPath: string | undefined;
  private readonly opts: SandboxOptions;
  private readonly mode: LaunchMode;
  /** Which generation of writable places the sandbox runs on (0 from its launch; each restore makes the next). */
  private generation = 0;
  /** Set once restored: where commands find the sandbox's IPC and network namespaces. */
  private nsDir: string | undefined;
  private restoring = false;
  private ranCommands = false;
  /** The pid namespace's counter, when known and nothing ran since (see restoreFrom). */
  private lastPid: number | undefined;
  /** What the next generation holds: nothing, a copy of `from`; undefined when unknown (its helper failed). */
  private nextGeneration: { from?: Sandbox } | undefined = {};
  /** The last restore's helper, making the next generation after its "R" (a restore waits for it). */
  private restoreTail: Promise<void> = Promise.resolve();
  /** Sealed: nothing runs in it any more; still: nor is anything but pid 1 left in it (see `seal`). */
  private sealed = false;
  private still = false;
  /** Holders keeping the sandbox frozen (see `hold`), and the freeze they share. */
  private holds = 0;
  private freezing: Promise<void> | undefined;

  /** How this sandbox is isolated: what is enforced, and what an explicit option turned off. */
  security(): SandboxSecurity {
    const { uid, count } = this.hostIds;
    const own = this.mode === "root" && idPool().slots > 1 ? ", this sandbox's own" : "";
    return {
      mode: this.mode,
      rootMapsTo: this.mode === "root" ? `host uid ${uid} (ids ${uid}-${uid + count - 1}${own})` : "the caller",
      seccomp: this.opts.seccomp ?? true,
      noNewPrivileges: true,
      limits: enforcement(),
      layerImages: this.inputs.overlays.some((o) => o.lower.some((l) => parseImageLower(l) !== undefined)),
    };
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** OOM kills and refused forks so far in the sandbox's cgroups (kept from its end once closed): who ended it. */
  limitCounters(): LimitCounters {
    return this.finalCounters ?? readCounters(this.cgroups);
  }

  get network(): boolean {
    return this.opts.network ?? false;
  }

  get limits(): Limits {
    return this.opts.limits ?? {};
  }

  private commandSpec(o: CommandOptions, group: string | undefined): EnterSpec {
    return {
      pid1: this.pid1,
      cgroupDirs: commandCgroups(this.cgroups, group),
      rlimits: this.rlimits,
      uid: o.uid ?? this.uid,
      gid: o.gid ?? this.gid,
      cwd: o.cwd ?? this.cwd,
      env: { ...this.env, ...o.env },
      mergeStderr: o.mergeOutput ?? false,
      seccomp: this.opts.seccomp ?? true,
      keepTerminal: o.keepTerminal,
      scopeAbstractUnix: this.network && abstractSocketsScoped(),
      ...(this.nsDir ? { nsDir: this.nsDir } : {}),
    };
  }

  private nextGroupName(): string {
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    return commandGroupName();
  }

  /** Commands cannot start while the sandbox is restored (they would run in neither state). */
  private checkUsable(): void {
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    if (this.sealed) throw new SandboxError(`sandbox ${this.id} is sealed: nothing runs in it`);
    // Held while idle, not frozen yet: frozen now, before the command's helper enters (it is frozen as it joins).
    if (this.holds > 0 && this.cgroups.freezer && !this.freezing) {
      this.freezing = freeze(this.cgroups.freezer);
      this.freezing.catch(() => undefined);
    }
    if (this.restoring) throw new SandboxError(`sandbox ${this.id} is being restored; retry once it is`);
    this.ranCommands = true;
    this.lastPid = undefined;
  }

  /** argv running `command` inside, in its own pids cgroup, for a caller that spawns it itself (a terminal). */
  commandArgv(command: string[], o: CommandOptions): { argv: string[]; cleanup: () => void } {
    this.checkUsable();
    const group = createCommandCgroup(this.cgroups, this.nextGroupName());
    const argv = enterArgv(this.commandSpec(o, group), command);
    return { argv, cleanup: () => group && removeCgroupTree(group) };
  }

  /**
   * The next command's helper, started a little after a command ended: an agent's next command comes after a model
   * call, and a spawn holds the event loop for a millisecond or two, better spent on commands still running (here
   * or in other sandboxes) than on a helper nobody waits for yet.
   */
  private startSpareSoon(): void {
    if (this.spareTimer || this.spare || this.closed) return;
    this.spareTimer = setTimeout(() => {
      this.spareTimer = undefined;
      this.startSpare();
    }, SPARE_DELAY_MS);
    this.spareTimer.unref();
  }

  /** The next command's helper, waiting in its cgroups (none while closed or restored, or when there is one). */
  private startSpare(): void {
    if (this.closed || this.spare || this.restoring) return;
    this.spare = this.startSpareNow(this.nextGroupName());
  }

  /** A waiting helper for the next command; undefined when it cannot be started (the command then starts one). */
  private startSpareNow(groupName: string): Promise<WaitingHelper> | undefined {
    try {
      const spare = waitingHelper(this.cgroups, groupName);
      spare.catch(() => undefined); // the next command's helper starts with it
      return spare;
    } catch {
      return undefined;
    }
  }

  /**
   * `command` started inside, in its own pids cgroup (cleanup removes it): handed to the helper waiting in its
   * cgroups when there is one, else to a new one.
   */
  private async startCommand(command: string[], o: CommandOptions): Promise<StartedCommand> {
    this.checkUsable();
    const spare = this.spare;
    this.spare = undefined;
    let helper = await settled(spare);
    if (!helper?.ready) {
      if (helper) void dropHelper(helper);
      helper = await waitingHelper(this.cgroups, this.nextGroupName());
    }
    try {
      this.checkUsable(); // closed or being restored while its helper started
    } catch (e) {
      void dropHelper(helper);
      throw e;
    }
    const { group } = helper;
    const cleanup = (): void => {
      if (group) removeCgroupTree(group);
      this.startSpareSoon();
    };
    try {
      return { child: helper.run(this.commandSpec(o, group), command), group, cleanup, reached: helper.reached };
    } catch (e) {
      void dropHelper(helper);
      throw e;
    }
  }

  /**
   * Run one command in a fresh process: a string runs under `bash --norc -c`, an array is executed as is.
   * stdin is closed unless given; a timeout kills the whole tree and yields exit code 124.
   */
  async exec(cmd: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    // --norc: bash sources ~/.bashrc when stdin is a socket (as ours is), so a file the sandbox wrote would run in
    // every later command, the grading scripts' included; `docker exec bash -c` sources nothing either.
    const command = typeof cmd === "string" ? ["/bin/bash", "--norc", "-c", cmd] : cmd;
    if (command.length === 0) throw new InvalidInputError("empty command");
    const oomBefore = oomKills(this.cgroups);
    const { child, group, cleanup, reached } = await this.startCommand(command, opts);
    return runCommand(
      {
        child,
        reached,
        killTree: async (rootPid) => {
          // With cgroups the whole tree (double forks too) is found; without, the /proc tree of the command.
          if (group) {
            await killCgroup(group, false, [rootPid]);
            return waitPidsReleased(group);
          }
          for (const pid of descendants(rootPid)) killQuietly(pid);
          killQuietly(rootPid);
        },
        limitHit: (): LimitHit | undefined => {
          if (oomKills(this.cgroups) > oomBefore) return "memory";
          // The command's own group is new: any fork refused there is its own.
          if (group && forksRefused(group) > 0) return "pids";
          return undefined;
        },
        cleanup,
      },
      { outputLimitBytes: this.opts.outputLimitBytes ?? DEFAULT_OUTPUT_LIMIT, ...opts },
    );
  }

  /** Start a process for a session (see BashSession). */
  async spawnSessionProcess(argv: string[]): Promise<SessionProcess> {
    const { child, kill } = await this.stream(argv, { SHELL: "/bin/bash" });
    child.stderr!.on("data", () => {});
    const shellPid = (): number | undefined => {
      // script -> bash: the shell is the child of the `script` process.
      for (const pid of descendants(child.pid!)) {
        if (commandName(pid) === "bash" && commandName(parentPid(pid)) === "script") return pid;
      }
      return undefined;
    };
    return {
      child,
      killTree: kill,
      killJobs: async () => {
        const shell = shellPid();
        if (shell) for (const pid of descendants(shell)) killQuietly(pid);
      },
    };
  }

  /** A command inside with piped stdio, and a way to kill its whole process tree (cgroup, else /proc tree). */
  async stream(argv: string[], env: Record<string, string> = {}): Promise<StreamedCommand> {
    const started = await this.startCommand(argv, { env });
    await reachedOrThrow(started);
    const { child, group, cleanup } = started;
    return {
      child,
      cleanup,
      kill: async () => {
        if (group) await killCgroup(group, false, [child.pid!]);
        for (const pid of descendants(child.pid!)) killQuietly(pid);
        killQuietly(child.pid!);
        cleanup();
      },
    };
  }

  onClose(fn: () => void): void {
    this.closeListeners.push(fn);
  }

  /** Ends every process, drops every mount (they live in the sandbox's namespace) and deletes the scratch dir. */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.sessions.closeAll();
    if (this.spareTimer) clearTimeout(this.spareTimer);
    const spares = [this.spare, this.restoreHelper];
    this.spare = this.restoreHelper = undefined;
    await Promise.all(spares.map(dropSpare));
    // Killing pid 1 ends the pid namespace: the kernel kills every process in it. bwrap then reaps it and exits;
    // killing bwrap first would orphan pid 1 to the host's init.
    killQuietly(this.pid1);
    const holderExited = (): boolean => this.holder.exitCode !== null || this.holder.signalCode !== null;
    if (!holderExited()) {
      await new Promise<void>((r) => {
        const t = setTimeout(r, 2000);
        this.holder.once("exit", () => {
          clearTimeout(t);
          r();
        });
      });
    }
    if (!holderExited()) killQuietly(this.holder.pid!);
    this.finalCounters = readCounters(this.cgroups);
    await killSandboxCgroups(this.cgroups);
    await removeSandboxDirs(this.paths);
    this.inputs.dir?.release();
    for (const fn of this.closeListeners) fn();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Named persistent bash sessions of one sandbox. */
export class SessionManager {
  private readonly sessions = new Map<string, BashSession>();
  constructor(private readonly sandbox: Sandbox) {}

  async create(name = "default", opts: SessionCreateOptions = {}): Promise<{ session: BashSession; output: string }> {
    if (this.sessions.has(name)) throw sessionExists(name);
    const placeholder = {} as BashSession;
    this.sessions.set(name, placeholder);
    try {
      const started = await BashSession.start({
        name,
        controlHost: this.sandbox.paths.control,
        controlInside: CONTROL_PATH,
        startupSource: opts.startupSource,
        startupTimeoutMs: opts.startupTimeoutMs,
        outputLimitChars: opts.outputLimitBytes,
        spawn: (argv) => this.sandbox.spawnSessionProcess(argv),
      });
      this.sessions.set(name, started.session);
      return started;
    } catch (e) {
      this.sessions.delete(name);
      throw e;
    }
  }

  get(name = "default"): BashSession {
    const s = this.sessions.get(name);
    if (!s || !(s instanceof BashSession)) throw sessionMissing(name);
    return s;
  }

  has(name: string): boolean {
    return this.sessions.get(name) instanceof BashSession;
  }

  names(): string[] {
    return [...this.sessions.keys()];
  }

  run(name: string, command: string, opts?: RunOptions): Promise<RunResult> {
    return this.get(name).run(command, opts);
  }

  async close(name = "default"): Promise<void> {
    const s = this.get(name);
    this.sessions.delete(name);
    await s.close();
  }

  async closeAll(): Promise<void> {
    const all = [...this.sessions.values()].filter((s): s is BashSession => s instanceof BashSession);
    this.sessions.clear();
    await Promise.all(all.map((s) => s.close()));
  }
}
