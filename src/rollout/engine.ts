/**
 * The rollout engine: tasks → shared workspaces → groups of rollouts; the warm pool and the prewarmed batch; gold
 * pre-checks; the live rollouts by id. One per process and home is enough (the HTTP server holds one).
 */
import { envFor, nodeCacheFor } from "../env/environments.js";
import { getImage } from "../env/images/index.js";
import { resolveWorkspace, rowImageRef, type InstanceEnv, type Workspace } from "../env/workspace.js";
import { InvalidInputError, LimitError, NotFoundError, UnavailableError } from "../errors.js";
import { evaluate, type EvaluateOptions } from "../eval/reward-api.js";
import { evalSandboxSettings } from "../eval/runner/sandbox.js";
import { defaultAdmitted, defaultBesideSandboxes, derivedMaxima } from "../sandbox/capacity.js";
import type { Limits } from "../sandbox/limits.js";
import { loadDataset } from "../tasks/index.js";
import type { Instance } from "../tasks/types.js";
import { resolveHome } from "../util/home.js";
import { pool } from "../util/progress.js";
import { Slots } from "../util/slots.js";
import { GoldChecks, type GoldVerdict } from "./gold.js";
import { MAX_GROUP_SIZE, RolloutGroup, type GroupSettings } from "./group.js";
import type { Rollout } from "./rollout.js";
import type { GroupRequest, PrewarmReport, PrewarmTask, RolloutEngineOptions, RolloutOwner } from "./types.js";
import { REWARD_MODES } from "./types.js";
import { WarmPool } from "./warm-pool.js";

const HOUR_MS = 3_600_000;
const DEFAULT_REWARD_TIMEOUT_MS = 1_800_000;
const FORGET_AFTER_MS = 10 * 60_000;

export class RolloutEngine {
  readonly home: string;
  /** Live rollouts at most (the option, else as many as the machine fits: see `engineAdmission`). */
  readonly maxRollouts: number;
  /** Fresh reward and gold check sandboxes at once; more wait their turn. */
  readonly maxFreshRewards: number;
  private readonly rewardSlots: Slots;
  /** Limits of every sandbox the engine starts (rollouts, pool, rewards, gold checks). */
  readonly limits: Limits;
  private readonly opts: RolloutEngineOptions;
  private readonly pool: WarmPool;
  private readonly gold: GoldChecks;
  private readonly shares = new Map<string, Workspace>();
  private readonly resolving = new Map<string, Promise<Workspace>>();
  private readonly live = new Map<string, RolloutGroup>();
  private readonly byId = new Map<string, Rollout>();
  /** Per owner: the layers of its prewarmed batch, held until its next prewarm. */
  private readonly prewarmed = new Map<string, Map<string, () => void>>();
  /** Per owner: its live rollouts (reserved ones included). */
  private readonly reservedBy = new Map<string, number>();
  private instances: Promise<Map<string, Instance>> | undefined;
  private reserved = 0;
  private closed = false;

  constructor(opts: RolloutEngineOptions = {}) {
    if (opts.rewardMode !== undefined && !REWARD_MODES.includes(opts.rewardMode))
      throw new InvalidInputError(`rewardMode must be one of ${REWARD_MODES.join(", ")}`, { field: "rewardMode" });
    const spares = opts.forkSpares;
    if (spares !== undefined && (!Number.isInteger(spares) || spares < 0 || spares > 16))
      throw new InvalidInputError(`forkSpares must be an integer from 0 to 16, got ${spares}`, { field: "forkSpares" });
    this.opts = opts;
    this.home = resolveHome(opts.home);
    ({
      maxRollouts: this.maxRollouts,
      maxFreshRewards: this.maxFreshRewards,
      limits: this.limits,
    } = engineAdmission(opts));
    this.rewardSlots = new Slots(this.maxFreshRewards);
    this.pool = new WarmPool(warmPoolMax(opts.warmPool), opts.warmPool?.ttlMs ?? 15 * 60_000);
    this.gold = new GoldChecks(this.home, async (instance) => {
      const { image } = await this.taskEnv(instance);
      const opts: EvaluateOptions = { ...this.evaluateOptions(), reward: "binary", ...(image ? { image } : {}) };
      return this.rewardSlots.run(() => evaluate({ instance, patch: instance.patch ?? "" }, opts));
    });
  }

  /**
   * A task's environment: its spec (the eval script's), the image it runs on when the image policy gives it one,
   * and the key its workspace, pool slot and gold verdicts go by (the image's root filesystem, else the layer's).
   */
  private async taskEnv(instance: Instance): Promise<TaskEnv> {
    const env = envFor(instance, this.opts);
    const image = await rowImageRef(this.home, instance, this.opts.images ?? { kind: "auto" });
    if (image === undefined) return { env, key: env.key };
    return { env, image, key: (await getImage(nodeCacheFor(this.home).store, image)).rootfs };
  }

  private evaluateOptions(): EvaluateOptions {
    const o = this.opts;
    return {
      home: this.home,
      specsFile: o.specsFile,
      base: o.base,
      reposDir: o.reposDir,
      build: o.build ?? false,
      timeoutMs: o.rewardTimeoutMs ?? DEFAULT_REWARD_TIMEOUT_MS,
      reward: o.reward ?? "binary",
      limits: this.limits,
    };
  }

  /** Live rollouts in this engine (reserved ones included). */
  get liveRollouts(): number {
    return this.reserved;
  }

  /** Fresh reward and gold check sandboxes running now, and rewards waiting for a slot. */
  get freshRewards(): { running: number; waiting: number } {
    const { held, waiting } = this.rewardSlots.state;
    return { running: held, waiting };
  }

  get poolSize(): number {
    return this.pool.size;
  }

  /** A task by id (from the engine's dataset) or as given. */
  async task(ref: Instance | string): Promise<Instance> {
    if (typeof ref !== "string") return ref;
    const { dataset } = this.opts;
    if (dataset === undefined)
      throw new InvalidInputError(`task ${ref} given by id: the engine has no dataset`, { field: "instance_id" });
    this.instances ??= (async () => {
      const all = typeof dataset === "string" ? await loadDataset(dataset) : [...dataset];
      return new Map(all.map((i) => [i.instance_id, i]));
    })();
    this.instances.catch(() => (this.instances = undefined));
    const found = (await this.instances).get(ref);
    if (!found) throw new NotFoundError(`unknown task ${ref}`);
    return found;
  }

  /** The task's shared workspace: the live one, or resolved now (layer or image root materialized, one lease). */
  private workspaceFor(instance: Instance, { env, image, key }: TaskEnv): Promise<Workspace> {
    const id = taskKey(instance, key);
    const existing = this.shares.get(id);
    if (existing && !existing.isReleased) return Promise.resolve(existing);
    let p = this.resolving.get(id);
    if (!p) {
      p = (async () => {
        const o = this.opts;
        const network = o.network ?? false;
        // The host's pip configuration (local indexes, read-only): an in-place reward's eval.sh reinstalls offline.
        const pip = o.offlinePip ?? true;
        const settings = pip ? await evalSandboxSettings(this.home, env.spec, { network }) : { network };
        const ws = await resolveWorkspace({
          home: this.home,
          instance,
          environment: env,
          ...(image ? { image } : {}),
          specsFile: o.specsFile,
          base: o.base,
          reposDir: o.reposDir,
          build: o.build ?? false,
          limits: this.limits,
          ...settings,
          labels: { purpose: "rollout" },
        });
        ws.onReleased(() => {
          if (this.shares.get(id) === ws) this.shares.delete(id);
        });
        this.shares.set(id, ws);
        return ws;
      })().finally(() => this.resolving.delete(id));
      this.resolving.set(id, p);
    }
    return p;
  }

  /** The task's shared workspace, held (a share let go meanwhile is resolved again). */
  private async holdWorkspace(instance: Instance, te: TaskEnv): Promise<{ share: Workspace; letGo: () => void }> {
    for (;;) {
      const share = await this.workspaceFor(instance, te);
      if (!share.isReleased) return { share, letGo: share.hold() };
    }
  }

  /** The gold verdict of a task (checked now unless stored); TaskInvalidError when the gold patch fails. */
  async goldCheck(ref: Instance | string): Promise<GoldVerdict> {
    const instance = await this.task(ref);
    return this.gold.require(instance, (await this.taskEnv(instance)).key);
  }

  /** Start a group of `n` rollouts of one task: sandboxes from the warm pool first, the rest started together. */
  async startGroup(req: GroupRequest): Promise<RolloutGroup> {
    this.open();
    const t0 = performance.now();
    if (!Number.isInteger(req.n) || req.n < 1 || req.n > MAX_GROUP_SIZE)
      throw new InvalidInputError(`n must be an integer from 1 to ${MAX_GROUP_SIZE}, got ${req.n}`, { field: "n" });
    const ttlMs = req.ttlMs ?? this.opts.ttlMs ?? 2 * HOUR_MS;
    if (!(ttlMs > 0)) throw new InvalidInputError(`ttlMs must be positive, got ${ttlMs}`, { field: "ttl" });
    const instance = await this.task(req.instance);
    const te = await this.taskEnv(instance);
    if (req.goldCheck ?? this.opts.goldCheck ?? false) await this.gold.require(instance, te.key);
    const tGold = performance.now();
    const owner = req.owner ?? ANONYMOUS_OWNER;
    // The owner's own warm sandboxes of this task are part of the group: reserved and taken in one step.
    const slot = poolKey(owner, taskKey(instance, te.key));
    this.reserve(req.n, owner, Math.min(req.n, this.pool.sizeFor(slot)));
    const warm = this.pool.take(slot, req.n);
    let held: { share: Workspace; letGo: () => void };
    try {
      held = await this.holdWorkspace(instance, te);
    } catch (e) {
      this.unreserve(req.n, owner);
      await Promise.all(warm.map((sb) => sb.close()));
      throw e;
    }
    const tWorkspace = performance.now();
    const group = new RolloutGroup(instance, held.share, this.groupSettings(ttlMs, owner));
    this.live.set(group.id, group);
    try {
      await group.start(req.n, warm);
    } finally {
      held.letGo();
    }
    const tReady = performance.now();
    Object.assign(group.timings, {
      goldCheckMs: round(tGold - t0),
      workspaceMs: round(tWorkspace - tGold),
      startMs: round(tReady - tWorkspace),
      readyMs: round(tReady - t0),
    });
    return group;
  }

  private groupSettings(ttlMs: number, owner: RolloutOwner): GroupSettings {
    return {
      evaluateOptions: this.evaluateOptions(),
      rewardMode: this.opts.rewardMode ?? "fresh",
      freshReward: (f) => this.rewardSlots.run(f),
      ttlMs,
      ...(this.opts.onOutcome ? { onOutcome: this.opts.onOutcome } : {}),
      onRolloutStart: (r) => this.byId.set(r.id, r),
      onRolloutEnd: (r) => {
        this.unreserve(1, owner);
        this.forgetWhenOver(r.groupId);
      },
      reserve: (k) => this.reserve(k, owner),
      unreserve: (k) => this.unreserve(k, owner),
      forkSpares: this.opts.forkSpares ?? 1,
    };
  }

  /** Sandboxes `owner` holds here: live rollouts, its warm pool, and what it holds elsewhere. */
  private heldBy(owner: RolloutOwner): number {
    const here = (this.reservedBy.get(owner.name) ?? 0) + this.pool.sizeWhere(poolKey(owner, ""));
    return here + (owner.heldElsewhere?.() ?? 0);
  }

  /** Sandboxes of the owner named `name` in this engine, or of every owner with null (for a server's own caps). */
  sandboxesOf(name: string | null): number {
    if (name === null) return this.reserved + this.pool.size;
    return (this.reservedBy.get(name) ?? 0) + this.pool.sizeWhere(poolKey({ name }, ""));
  }

  /** Room `owner` has for more sandboxes (Infinity without a cap). */
  private roomOf(owner: RolloutOwner): number {
    return owner.maxSandboxes === undefined ? Number.POSITIVE_INFINITY : owner.maxSandboxes - this.heldBy(owner);
  }

  private unreserve(k: number, owner: RolloutOwner): void {
    this.reserved -= k;
    this.reservedBy.set(owner.name, (this.reservedBy.get(owner.name) ?? 0) - k);
    if (this.reservedBy.get(owner.name)! <= 0) this.reservedBy.delete(owner.name);
  }

  /** A group whose rollouts have all ended is forgotten a while later (its outcomes stay readable until then). */
  private forgetWhenOver(groupId: string): void {
    const g = this.live.get(groupId);
    if (!g?.isOver) return;
    setTimeout(() => {
      if (this.live.get(groupId) === g && g.isOver) void this.closeGroup(groupId).catch(() => {});
    }, FORGET_AFTER_MS).unref();
  }

  /** Reserve `k` rollouts for `owner`; `fromPool` of them are warm sandboxes it already holds (moved, not added). */
  private reserve(k: number, owner: RolloutOwner, fromPool = 0): void {
    // The caller's own cap first: what it asks beyond its share is refused as such, whatever others hold now.
    if (k - fromPool > this.roomOf(owner)) {
      throw new LimitError(
        `sandbox limit reached: ${owner.name} holds ${this.heldBy(owner)} of at most ${owner.maxSandboxes} ` +
          `sandboxes, ${k} more asked; close rollouts or sandboxes first`,
      );
    }
    const max = this.maxRollouts;
    if (this.reserved + k > max)
      throw new LimitError(`${this.reserved} live rollouts: ${k} more would exceed the limit of ${max}`);
    this.reserved += k;
    this.reservedBy.set(owner.name, (this.reservedBy.get(owner.name) ?? 0) + k);
  }

  private open(): void {
    if (this.closed) throw new UnavailableError("the rollout engine is closed");
  }

  group(id: string): RolloutGroup {
    const g = this.live.get(id);
    if (!g) throw new NotFoundError(`no live rollout group ${id}`);
    return g;
  }

  groups(): RolloutGroup[] {
    return [...this.live.values()];
  }

  rollout(id: string): Rollout {
    const r = this.byId.get(id);
    if (!r) throw new NotFoundError(`no live rollout ${id}`);
    return r;
  }

  rolloutOf(groupId: string, repetition: number): Rollout {
    return this.group(groupId).rollout(repetition);
  }

  /** Close a group and forget it. */
  async closeGroup(id: string): Promise<void> {
    const g = this.group(id);
    await g.close();
    this.live.delete(id);
    for (const r of g.rollouts) this.byId.delete(r.id);
  }

  /**
   * Get the next batch ready while the current one trains: each task's layer materialized and held (until the next
   * call), its gold verdict when checks are on, and up to `sandboxes` sandboxes per task in the warm pool (bounded
   * by the pool's `max` and the owner's cap). Per-task problems are reported, not thrown. Batches and pool
   * sandboxes are per owner: another owner's prewarm neither replaces nor takes them.
   */
  async prewarm(
    tasks: readonly (Instance | string)[],
    opts: { sandboxes?: number; owner?: RolloutOwner } = {},
  ): Promise<PrewarmReport> {
    this.open();
    const t0 = performance.now();
    const perTask = this.sandboxesPerTask(opts.sandboxes);
    const owner = opts.owner ?? ANONYMOUS_OWNER;
    const held = new Map<string, () => void>();
    const report = await pool(tasks, 4, (ref) => this.prewarmTask(ref, perTask, held, owner));
    // The new batch is held before the previous one is let go: layers in both stay leased throughout.
    const previous = this.prewarmed.get(owner.name);
    this.prewarmed.set(owner.name, held);
    for (const letGo of previous?.values() ?? []) letGo();
    return {
      tasks: report,
      pool: { size: this.pool.size, max: this.pool.max },
      durationMs: round(performance.now() - t0),
    };
  }

  /** Pool sandboxes per task a prewarm asks for: none when absent; fewer than 1, or no pool to hold them: refused. */
  private sandboxesPerTask(sandboxes: number | undefined): number {
    if (sandboxes === undefined) return 0;
    if (!Number.isInteger(sandboxes) || sandboxes < 1 || sandboxes > MAX_GROUP_SIZE)
      throw new InvalidInputError(
        `sandboxes must be a whole number from 1 to ${MAX_GROUP_SIZE}, got ${sandboxes}; ` +
          "leave it out to prewarm layers only",
        { field: "sandboxes" },
      );
    if (this.pool.max === 0)
      throw new InvalidInputError(
        `prewarm asked for ${sandboxes} sandboxes per task, but there is no warm pool to hold them: start the server ` +
          "with --warm-pool N (RolloutEngine: warmPool: { max: N }), or leave sandboxes out to prewarm layers only",
        { field: "sandboxes" },
      );
    return sandboxes;
  }

  private async prewarmTask(
    ref: Instance | string,
    perTask: number,
    held: Map<string, () => void>,
    owner: RolloutOwner,
  ): Promise<PrewarmTask> {
    const out: PrewarmTask = {
      instanceId: typeof ref === "string" ? ref : ref.instance_id,
      envKey: null,
      layer: null,
      layerMs: 0,
      warmSandboxes: 0,
    };
    try {
      const instance = await this.task(ref);
      const te = await this.taskEnv(instance);
      const key = te.key;
      out.envKey = key;
      const t = performance.now();
      const cached = await nodeCacheFor(this.home).has(key);
      const { share, letGo } = await this.holdWorkspace(instance, te);
      if (held.has(taskKey(instance, key))) letGo();
      else held.set(taskKey(instance, key), letGo);
      out.layer = cached ? "cached" : "materialized";
      out.layerMs = round(performance.now() - t);
      if (this.opts.goldCheck) out.goldCheck = (await this.gold.verdict(instance, key)).passed ? "passed" : "failed";
      const slot = poolKey(owner, taskKey(instance, key));
      if (out.goldCheck !== "failed") await this.fillPool(slot, share, perTask, owner);
      out.warmSandboxes = this.pool.sizeFor(slot);
    } catch (e) {
      out.error = (e as Error).message;
    }
    return out;
  }

  private async fillPool(task: string, share: Workspace, want: number, owner: RolloutOwner): Promise<void> {
    const missing = Math.min(want - this.pool.sizeFor(task), this.pool.free, this.roomOf(owner));
    if (missing <= 0) return;
    // Reserved while they start (so concurrent fills and groups see them), then counted as the owner's pool.
    this.reserve(missing, owner);
    const started = await Promise.allSettled(Array.from({ length: missing }, () => share.start()));
    this.unreserve(missing, owner);
    for (const s of started) if (s.status === "fulfilled") await this.pool.put(task, s.value);
    const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed) throw failed.reason;
  }

  /** Close every group, the pool and the prewarmed layers; nothing is left running. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.live.keys()].map((id) => this.closeGroup(id)));
    await this.pool.clear();
    for (const batch of this.prewarmed.values()) for (const letGo of batch.values()) letGo();
    this.prewarmed.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** The most live rollouts an engine allows unless told otherwise, however large the machine. */
const MAX_DEFAULT_ROLLOUTS = 256;

/**
 * How many rollouts the engine admits, and the limits of its sandboxes: the caller's, over maxima derived from the
 * machine (src/sandbox/capacity.ts) so that every rollout and warm pool sandbox at its maxima fits the host at once,
 * as a server derives its own; without `maxRollouts`, as many rollouts as get a default sandbox's share each.
 */
function engineAdmission(o: RolloutEngineOptions): { maxRollouts: number; maxFreshRewards: number; limits: Limits } {
  const maxRollouts = o.maxRollouts ?? Math.min(MAX_DEFAULT_ROLLOUTS, defaultAdmitted());
  const maxFreshRewards = freshRewardSlots(o);
  const given = Object.fromEntries(Object.entries(o.limits ?? {}).filter(([, v]) => v !== undefined));
  const admitted = maxRollouts + (o.warmPool?.max ?? 0) + maxFreshRewards;
  return { maxRollouts, maxFreshRewards, limits: { ...derivedMaxima(admitted), ...given } };
}

/** Fresh reward sandboxes an engine runs at once: the option, else the machine's CPUs (tests are CPU-bound). */
export function freshRewardSlots(o: Pick<RolloutEngineOptions, "maxFreshRewards">): number {
  const n = o.maxFreshRewards ?? defaultBesideSandboxes();
  if (!Number.isInteger(n) || n < 1)
    throw new InvalidInputError(`maxFreshRewards must be a whole number, at least 1, got ${n}`, {
      field: "maxFreshRewards",
    });
  return n;
}

/** The pool's size: absent is no pool; a pool of 0 or fewer sandboxes would hold nothing and is refused. */
function warmPoolMax(o: RolloutEngineOptions["warmPool"]): number {
  if (o === undefined) return 0;
  if (!Number.isInteger(o.max) || o.max < 1)
    throw new InvalidInputError(
      `warmPool.max must be a whole number of sandboxes, at least 1, got ${o.max}; leave warmPool out for no pool`,
      { field: "warmPool.max" },
    );
  return o.max;
}

const ANONYMOUS_OWNER: RolloutOwner = { name: "" };

/** A task's environment as the engine keys it (`RolloutEngine.taskEnv`). */
interface TaskEnv {
  env: InstanceEnv;
  image?: string;
  key: string;
}

/** A warm pool slot: the owner's own, per task. */
function poolKey(owner: Pick<RolloutOwner, "name">, task: string): string {
  return `${owner.name}\u0001${task}`;
}

function taskKey(instance: Instance, envKey: string): string {
  return `${instance.instance_id}\0${envKey}`;
}

const round = (n: number): number => Math.round(n * 10) / 10;
