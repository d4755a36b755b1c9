import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { homeLayout, resolveHome } from "../util/home.js";
import { InvalidInputError, SandboxError } from "../errors.js";
import { BashSession, type RunOptions, type RunResult, type SessionProcess } from "../session/bash-session.js";
import { sessionExists, sessionMissing } from "../session/errors.js";
import { enterArgv, type EnterSpec, WaitingHelper } from "./enter.js";
import { defaultCommandEnv, HOME_DOTFILES } from "./home.js";
import { DEFAULT_OUTPUT_LIMIT, runCommand, type ExecOptions, type ExecResult, type LimitHit } from "./exec.js";
import { SandboxFiles, type StreamedCommand } from "./files.js";
import { abstractSocketsScoped, type HostIds, idPool, launchMode, type LaunchMode } from "./host.js";
import { type OpenedDir, openHostDir } from "./host-dir.js";
import { FIRST_PASSED_FD, launch } from "./launcher.js";
import {
  createCgroups,
  createCommandCgroup,
  enforcement,
  killCgroup,
  killSandboxCgroups,
  readCounters,
  removeCgroupTree,
  rlimitArgs,
  scratchBytes,
  type Enforcement,
  type LimitCounters,
  type Limits,
  type SandboxCgroups,
  whileFrozen,
  withDefaults,
} from "./limits.js";
import {
  CONTROL_PATH,
  defaultCwd,
  TESTBED_PATH,
  type BindMount,
  type MountPlan,
  type OverlayMount,
  type SandboxLower,
} from "./plan.js";
import { commandName, descendants, killQuietly, parentPid, processStartTime } from "./procfs.js";
import { reapHome, snapshotsDir } from "./reaper.js";
import { Snapshot } from "./snapshot.js";
import { makeSandboxDirs, removeSandboxDirs, sandboxPaths, type SandboxPaths, writeState } from "./state.js";

/** The cgroups a command joins: the sandbox's memory, freezer and CPU groups, and its own pids group. */
function commandCgroups(cgroups: SandboxCgroups, group: string | undefined): string[] {
  return [cgroups.memory, cgroups.freezer, cgroups.cpu, cgroups.cpuacct, group].filter((d): d is string => Boolean(d));
}

/** A helper waiting, in a new pids group of its own, for a command of the sandbox. */
function waitingHelper(cgroups: SandboxCgroups, name: string): WaitingHelper {
  const group = createCommandCgroup(cgroups, name);
  return new WaitingHelper(commandCgroups(cgroups, group), group);
}

/** A helper not needed after all leaves; its pids group goes with it (a group with a process in it stays). */
async function dropHelper(helper: WaitingHelper): Promise<void> {
  await helper.drop();
  if (helper.group) removeCgroupTree(helper.group);
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
  /** The tree, never written (writes go to the sandbox's scratch). */
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
}

export interface SessionCreateOptions {
  startupSource?: string[];
  startupTimeoutMs?: number;
  outputLimitBytes?: number;
}

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
function rootOverlay(rootfs: RootFs): OverlayMount {
  if (!existsSync(rootfs.path)) throw new InvalidInputError(`root filesystem ${rootfs.path} does not exist`);
  return { lower: [], sandboxLowers: [{ path: rootfs.path, owner: rootfs.owner }], target: "/" };
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
  /** A fork's snapshot: the parent's writable places. */
  seed?: SandboxLower;
  /** Snapshots whose copies are lowers of this sandbox's trees, held until it closes. */
  snapshots: Snapshot[];
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
  private execCounter = 0;
  /** Started ahead of the next command, waiting in its cgroups (see WaitingHelper). */
  private spare: WaitingHelper | undefined;
  private spareTimer: NodeJS.Timeout | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly closeListeners: (() => void)[] = [];

  private constructor(
    private readonly inputs: LaunchInputs,
    readonly paths: SandboxPaths,
    started: { holder: ChildProcess; pid1: number; hostIds: HostIds },
    private readonly cgroups: SandboxCgroups,
    private readonly rlimits: string[],
    private readonly env: Record<string, string>,
    readonly cwd: string,
    notices: string[],
    spare: WaitingHelper,
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
    for (const o of overlays)
      for (const l of o.lower) if (!existsSync(l)) throw new InvalidInputError(`mount source ${l} does not exist`);
    // The opened directory itself, as descriptor 5 of the launch: no path is looked up again.
    if (dir) overlays.unshift({ lower: [`/proc/self/fd/${FIRST_PASSED_FD}`], target: TESTBED_PATH });
    if (opts.rootfs) overlays.unshift(rootOverlay(opts.rootfs));
    return Sandbox.launch({
      opts,
      sandboxesDir: layout.sandboxes,
      mode,
      uid,
      gid,
      dir,
      overlays,
      snapshots: [],
    });
  }

  /** Start a sandbox; on failure, release what `inputs` holds (the opened directory, snapshots). */
  private static async launch(inputs: LaunchInputs): Promise<Sandbox> {
    const { opts, mode, uid, gid, overlays } = inputs;
    const id = `sb-${randomBytes(6).toString("hex")}`;
    const paths = sandboxPaths(inputs.sandboxesDir, id);
    const home = opts.rootfs?.home ?? (uid === 0 ? "/root" : `/home/u${uid}`);
    const plan: MountPlan = {
      hostname: opts.hostname ?? id,
      network: opts.network ?? false,
      overlays,
      binds: opts.binds ?? [],
      toolchains: opts.toolchains ?? [],
      home,
      controlDir: paths.control,
      cwd: opts.cwd ?? defaultCwd({ overlays }),
    };
    const limits = opts.limits!;
    let cgroups: SandboxCgroups = {};
    let spare: WaitingHelper | undefined;
    try {
      const [dirs, groups] = await Promise.allSettled([makeSandboxDirs(paths), createCgroups(id, limits)]);
      if (groups.status === "fulfilled") cgroups = groups.value;
      if (dirs.status === "rejected") throw dirs.reason;
      if (groups.status === "rejected") throw groups.reason;
      // The first command's helper joins its cgroups while the sandbox starts.
      spare = waitingHelper(cgroups, "c0");
      const rlimits = rlimitArgs(limits);
      const launched = await launch({
        plan,
        scratch: paths.scratch,
        mode,
        ids: mode === "root" ? idPool() : undefined,
        cgroups,
        diskBytes: scratchBytes(limits, Boolean(cgroups.memory)),
        owner: `${uid}:${gid}`,
        forceCopy: opts.forceCopy ?? false,
        rlimits,
        label: id,
        seccomp: opts.seccomp ?? true,
        fds: inputs.dir ? [inputs.dir.fd] : [],
        seed: inputs.seed,
        homeFiles: opts.rootfs ? undefined : HOME_DOTFILES, // an image's home is its own
      });
      await writeState(paths, {
        id,
        ownerPid: process.pid,
        ownerStart: processStartTime(process.pid),
        holderPid: launched.child.pid!,
        holderStart: processStartTime(launched.child.pid!),
        pid1: launched.pid1,
        hostUid: launched.hostIds.uid,
        cgroups,
        createdAt: new Date().toISOString(),
      });
      const env = sandboxEnv(opts, uid, home, plan.hostname);
      const notices = [...launched.notices, ...enforcementNotices(mode, plan.network)];
      const started = { holder: launched.child, pid1: launched.pid1, hostIds: launched.hostIds };
      return new Sandbox(inputs, paths, started, cgroups, rlimits, env, plan.cwd, notices, spare);
    } catch (e) {
      if (spare) await dropHelper(spare);
      await killSandboxCgroups(cgroups);
      removeSandboxDirs(paths);
      inputs.dir?.release();
      for (const snap of inputs.snapshots) snap.release();
      throw e;
    }
  }

  /**
   * Start `count` sandboxes from this one's current writable state (its workspace trees, `/`, /tmp, home,
   * /dev/shm), frozen for the moment of the copy: the children see what the parent had written, then everyone
   * diverges on their own. Processes are not copied; the parent keeps running.
   */
  async fork(count = 1): Promise<Sandbox[]> {
    if (!Number.isInteger(count) || count < 1 || count > 256) {
      throw new InvalidInputError(`fork count must be an integer from 1 to 256, got ${count}`);
    }
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    const snapshot = await this.snapshot();
    try {
      const started = await Promise.allSettled(Array.from({ length: count }, () => this.startChild(snapshot)));
      const children = started.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
      const failed = started.find((r): r is PromiseRejectedResult => r.status === "rejected");
      if (failed) {
        await Promise.all(children.map((c) => c.close()));
        throw failed.reason;
      }
      return children;
    } finally {
      snapshot.release();
    }
  }

  private async snapshot(): Promise<Snapshot> {
    const name = `${this.id}-${++this.forkCounter}`;
    const owner = this.mode === "root" ? this.hostIds.uid : undefined;
    const take = (): Promise<Snapshot> =>
      Snapshot.take(snapshotsDir(this.home), name, { holderPid: this.holder.pid!, scratch: this.paths.scratch, owner });
    if (this.cgroups.freezer) return whileFrozen(this.cgroups.freezer, take);
    // Copying a running root-mode sandbox without freezing it could race its writes (and its symlink swaps).
    if (this.mode === "root") throw new SandboxError("fork needs the cgroup freezer controller on this host");
    return take();
  }

  private startChild(snapshot: Snapshot): Promise<Sandbox> {
    const { opts } = this.inputs;
    return Sandbox.launch({
      ...this.inputs,
      opts: { ...opts, labels: { ...opts.labels, forkedFrom: this.id } },
      overlays: this.inputs.overlays.map((o, i) => ({
        ...o,
        sandboxLowers: [{ path: snapshot.upper(i), owner: snapshot.owner }, ...(o.sandboxLowers ?? [])],
      })),
      seed: { path: snapshot.dir, owner: snapshot.owner },
      dir: this.inputs.dir?.acquire(),
      snapshots: [snapshot.acquire(), ...this.inputs.snapshots.map((s) => s.acquire())],
    });
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
  private readonly holder: ChildProcess;
  /** The real host path of `dir`, as opened and mounted. */
  readonly dirPath: string | undefined;
  private readonly opts: SandboxOptions;
  private readonly mode: LaunchMode;
  private forkCounter = 0;

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
    };
  }

  private nextGroupName(): string {
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    return `c${++this.execCounter}`;
  }

  /** argv running `command` inside, in its own pids cgroup, for a caller that spawns it itself (a terminal). */
  commandArgv(command: string[], o: CommandOptions): { argv: string[]; cleanup: () => void } {
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
      if (this.closed || this.spare) return;
      try {
        this.spare = waitingHelper(this.cgroups, this.nextGroupName());
      } catch {
        /* the next command's helper starts with it */
      }
    }, SPARE_DELAY_MS);
    this.spareTimer.unref();
  }

  /**
   * `command` started inside, in its own pids cgroup (cleanup removes it): handed to the helper waiting in its
   * cgroups when there is one, else to a new one.
   */
  private startCommand(
    command: string[],
    o: CommandOptions,
  ): { child: ChildProcess; group?: string; cleanup: () => void } {
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`);
    let helper = this.spare;
    this.spare = undefined;
    if (!helper?.ready) {
      if (helper) void dropHelper(helper);
      helper = waitingHelper(this.cgroups, this.nextGroupName());
    }
    const { group } = helper;
    const cleanup = (): void => {
      if (group) removeCgroupTree(group);
      this.startSpareSoon();
    };
    try {
      return { child: helper.run(this.commandSpec(o, group), command), group, cleanup };
    } catch (e) {
      void dropHelper(helper);
      throw e;
    }
  }

  /**
   * Run one command in a fresh process: a string runs under `bash -c`, an array is executed as is.
   * stdin is closed unless given; a timeout kills the whole tree and yields exit code 124.
   */
  async exec(cmd: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const command = typeof cmd === "string" ? ["/bin/bash", "-c", cmd] : cmd;
    if (command.length === 0) throw new InvalidInputError("empty command");
    const before = readCounters(this.cgroups);
    const { child, group, cleanup } = this.startCommand(command, opts);
    return runCommand(
      {
        child,
        killTree: async (rootPid) => {
          // With cgroups the whole tree (double forks too) is found; without, the /proc tree of the command.
          if (group) return killCgroup(group, false, [rootPid]);
          for (const pid of descendants(rootPid)) killQuietly(pid);
          killQuietly(rootPid);
        },
        limitHit: (): LimitHit | undefined => {
          const after = readCounters(this.cgroups);
          if (after.oomKills > before.oomKills) return "memory";
          if (after.pidsRefused > before.pidsRefused) return "pids";
          return undefined;
        },
        cleanup,
      },
      { outputLimitBytes: this.opts.outputLimitBytes ?? DEFAULT_OUTPUT_LIMIT, ...opts },
    );
  }

  /** Start a process for a session (see BashSession). */
  spawnSessionProcess(argv: string[]): SessionProcess {
    const { child, kill } = this.stream(argv, { SHELL: "/bin/bash" });
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
  stream(argv: string[], env: Record<string, string> = {}): StreamedCommand {
    const { child, group, cleanup } = this.startCommand(argv, { env });
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
    const spare = this.spare;
    this.spare = undefined;
    if (spare) await dropHelper(spare);
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
    removeSandboxDirs(this.paths);
    this.inputs.dir?.release();
    for (const snap of this.inputs.snapshots) snap.release();
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
