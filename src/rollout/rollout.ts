/**
 * One rollout: one sandbox of a group's task, its commands and files, its reward, its forks. A sandbox that ends
 * without `close()` (killed, out of time) makes the rollout *lost*: its commands throw SandboxLostError. Its reward
 * is decided by who ended it: once the agent has run anything, its own memory use killing the sandbox
 * (`sandbox_oom`) or the rollout's time running out (`rollout_expired`) is a 0; anything else (killed from
 * outside, never used) is an infrastructure failure.
 */
import { InvalidInputError, SandboxLostError } from "../errors.js";
import { evaluate, type EvaluateOptions } from "../eval/reward-api.js";
import type { ExecOptions, ExecResult } from "../sandbox/exec.js";
import type { SandboxFiles } from "../sandbox/files.js";
import { isRunning } from "../sandbox/procfs.js";
import type { Sandbox, SessionManager } from "../sandbox/sandbox.js";
import type { Instance } from "../tasks/types.js";
import { classifyOutcome, infraOutcome, scoredZero, type OutcomeSubject } from "./outcome.js";
import type {
  InfraFailureKind,
  RewardMode,
  RewardOptions,
  RolloutInfo,
  RolloutOutcome,
  RolloutState,
} from "./types.js";

/** What a rollout needs from its group. */
export interface RolloutContext {
  groupId: string;
  instance: Instance;
  /** Evaluation settings of the engine (home, dataset, timeouts, reward). */
  evaluateOptions: EvaluateOptions;
  rewardMode: RewardMode;
  /** Runs a fresh reward holding one of the engine's reward slots (a sandbox more, counted in its limits). */
  freshReward: <T>(f: () => Promise<T>) => Promise<T>;
  ttlMs: number;
  /** Fork this rollout's sandbox (or a checkpoint of the group) into `k` rollouts of the same group. */
  fork: (parent: Rollout, k: number, checkpoint?: string) => Promise<Rollout[]>;
  /** This rollout's sandbox back to the group's start state, or to a checkpoint's, in place. */
  reset: (r: Rollout, checkpoint?: string) => Promise<void>;
  /** A checkpoint of this rollout's state, kept by the group: its id. */
  checkpoint: (r: Rollout) => Promise<string>;
  /** Called once when the rollout is over (closed, lost or failed). */
  onEnd: (rollout: Rollout) => void;
  /** Told of each outcome as it is decided. */
  onOutcome?: (outcome: RolloutOutcome) => void;
}

export interface RolloutStart {
  repetition: number;
  parent?: string;
  fromPool?: boolean;
  startMs: number;
}

export class Rollout {
  readonly id: string;
  readonly groupId: string;
  readonly instanceId: string;
  readonly repetition: number;
  readonly parent: string | null;
  readonly fromPool: boolean;
  readonly startMs: number;
  readonly createdAt = new Date();
  private current: RolloutState;
  private failure: { kind: InfraFailureKind; message: string } | undefined;
  /** Set when the loss was the agent's doing: its reward is then a 0 with this reason. */
  private agentLoss: "sandbox_oom" | "rollout_expired" | undefined;
  /** Whether the agent has had the sandbox (a command, files, sessions, the sandbox itself, or a forked parent's). */
  private used: boolean;
  private closeAsked = false;
  private lastOutcome: RolloutOutcome | undefined;
  private ttl: NodeJS.Timeout | undefined;
  /** A reset, fork or checkpoint in progress (the sandbox is held still or restored meanwhile). */
  private busy: "resetting" | undefined;
  /** OOM kills of the sandbox's memory group before the last reset: what the agent since did is counted after it. */
  private oomBaseline = 0;

  constructor(
    private readonly ctx: RolloutContext,
    start: RolloutStart,
    /** Absent when the sandbox could not start (`failed`). */
    readonly sandbox: Sandbox | undefined,
    startError?: string,
  ) {
    this.groupId = ctx.groupId;
    this.instanceId = ctx.instance.instance_id;
    this.repetition = start.repetition;
    this.id = `${ctx.groupId}.${start.repetition}`;
    this.parent = start.parent ?? null;
    this.fromPool = start.fromPool ?? false;
    this.used = start.parent !== undefined;
    this.startMs = Math.round(start.startMs * 10) / 10;
    if (!sandbox) {
      this.current = "failed";
      this.failure = { kind: "sandbox_failed", message: startError ?? "the sandbox did not start" };
      queueMicrotask(() => ctx.onEnd(this));
      return;
    }
    this.current = "ready";
    sandbox.onClose(() => this.ended());
    this.armTtl();
  }

  private armTtl(): void {
    if (this.ttl) clearTimeout(this.ttl);
    this.ttl = setTimeout(() => this.expire(), this.ctx.ttlMs);
    this.ttl.unref();
  }

  /** What cannot overlap with commands: a reward or a reset in progress. */
  private checkIdle(): void {
    if (this.current === "rewarding") throw new InvalidInputError(`rollout ${this.id} is being rewarded`);
    if (this.busy) throw new InvalidInputError(`rollout ${this.id} is being reset`);
  }

  get trajectoryId(): string {
    return `${this.instanceId}@${this.repetition}`;
  }

  get state(): RolloutState {
    return this.current;
  }

  get outcome(): RolloutOutcome | undefined {
    return this.lastOutcome;
  }

  /** The sandbox, while the rollout can use it: SandboxLostError once lost or failed, InvalidInputError once closed. */
  use(): Sandbox {
    return this.touch();
  }

  /** The live sandbox, handed to the agent: from now on what happens in it is the agent's doing. */
  private touch(): Sandbox {
    const sb = this.live();
    this.used = true;
    return sb;
  }

  private live(): Sandbox {
    if (this.failure) throw this.lostError();
    if (this.current === "closed") throw new InvalidInputError(`rollout ${this.id} is closed`);
    return this.sandbox!;
  }

  private lostError(): SandboxLostError {
    return new SandboxLostError(`rollout ${this.id}: ${this.failure!.kind}: ${this.failure!.message}`);
  }

  /** One command in a fresh process (see `Sandbox.exec`); a command that dies with its sandbox is a lost rollout. */
  async exec(cmd: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const sb = this.touch();
    this.checkIdle();
    let r: ExecResult;
    try {
      r = await sb.exec(cmd, opts);
    } catch (e) {
      if (this.checkLost()) throw this.lostError();
      throw e;
    }
    if ((r.signal !== undefined || r.exitCode !== 0) && this.checkLost()) throw this.lostError();
    return r;
  }

  get files(): SandboxFiles {
    return this.touch().files;
  }

  get sessions(): SessionManager {
    return this.touch().sessions;
  }

  /** True (and the rollout lost) when its sandbox is gone although nobody closed it. */
  private checkLost(): boolean {
    if (this.failure) return true;
    if (this.closeAsked || !this.sandbox) return false;
    if (this.sandbox.isClosed || !isRunning(this.sandbox.pid1)) {
      this.lose("sandbox_lost", "the sandbox ended without being closed (killed, out of memory or reaped)");
      void this.sandbox.close();
      return true;
    }
    return false;
  }

  /**
   * Grade the rollout's work with SWE-bench semantics: its diff in a fresh sandbox (default), or in place. Always
   * an outcome: a real grade (0 included) or an infrastructure failure; throws only for misuse (closed rollout).
   */
  async reward(opts: RewardOptions = {}): Promise<RolloutOutcome> {
    const mode = opts.mode ?? this.ctx.rewardMode;
    const who: OutcomeSubject = { ...this.subject(), mode };
    if (this.current === "closed") throw new InvalidInputError(`rollout ${this.id} is closed`);
    this.checkIdle();
    if (this.checkLost()) return this.remember(this.lostOutcome(who));
    this.current = "rewarding";
    let outcome: RolloutOutcome;
    try {
      const graded = () =>
        evaluate(this.sandbox!, {
          ...this.ctx.evaluateOptions,
          instance: this.ctx.instance,
          inPlace: mode === "in_place",
          ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
          ...(opts.reward !== undefined ? { reward: opts.reward } : {}),
          ...(opts.logDir !== undefined ? { logDir: opts.logDir } : {}),
        });
      const r = mode === "in_place" ? await graded() : await this.ctx.freshReward(graded);
      // A sandbox that died before its diff was taken (fresh) or while its tests ran (in place) says nothing about
      // the agent; once a fresh sandbox has graded the diff, the verdict stands whatever happens to the rollout.
      const spoiled = (mode === "in_place" || r.status === "ERROR") && this.checkLost();
      outcome = spoiled ? this.lostOutcome(who, r.patch) : classifyOutcome(r, who);
    } catch (e) {
      outcome = this.checkLost()
        ? this.lostOutcome(who)
        : infraOutcome(who, { kind: "eval_error", message: (e as Error).message });
    } finally {
      if (this.current === "rewarding") this.current = "ready";
    }
    return this.remember(outcome);
  }

  /** The outcome of a lost rollout: a 0 when the agent caused the loss, else an infrastructure failure. */
  private lostOutcome(who: OutcomeSubject, patch = ""): RolloutOutcome {
    const failure = this.failure!;
    return this.agentLoss ? scoredZero(who, this.agentLoss, failure.message, patch) : infraOutcome(who, failure, patch);
  }

  private remember(o: RolloutOutcome): RolloutOutcome {
    this.lastOutcome = o;
    try {
      this.ctx.onOutcome?.(o);
    } catch {
      // a listener's failure changes no reward
    }
    return o;
  }

  /**
   * `k` children with this rollout's current state (or a checkpoint's of its group), as new rollouts of its group;
   * it keeps running.
   */
  fork(k = 1, opts: { checkpoint?: string } = {}): Promise<Rollout[]> {
    this.ready();
    return this.ctx.fork(this, k, opts.checkpoint);
  }

  /**
   * Back to the group's start state (or a checkpoint's), in place, keeping the sandbox: every process of the agent's
   * ends, every write is gone, and nothing it did can be told from inside (see `Sandbox.restore`); the rollout is as
   * if just started (no outcome, its time limit from now). A reset that fails leaves the rollout lost.
   */
  async reset(opts: { checkpoint?: string } = {}): Promise<void> {
    this.ready();
    this.busy = "resetting";
    try {
      await this.ctx.reset(this, opts.checkpoint);
    } catch (e) {
      if (this.checkLost()) throw this.lostError();
      throw e;
    } finally {
      this.busy = undefined;
    }
    this.used = false;
    this.lastOutcome = undefined;
    this.oomBaseline = this.sandbox!.limitCounters().oomKills;
    this.armTtl();
  }

  /** A checkpoint of this rollout's current state, kept by its group (reset or fork to it later): its id. */
  checkpoint(): Promise<string> {
    this.ready();
    return this.ctx.checkpoint(this);
  }

  /** Live, not lost, and doing nothing that a reset, fork or checkpoint would overlap. */
  private ready(): void {
    this.live();
    if (this.checkLost()) throw this.lostError();
    this.checkIdle();
  }

  /** End the rollout (idempotent): its sandbox closes; a lost or failed rollout keeps saying why. */
  async close(): Promise<void> {
    this.closeAsked = true;
    if (this.ttl) clearTimeout(this.ttl);
    if (!this.failure) this.current = "closed";
    await this.sandbox?.close();
  }

  private expire(): void {
    if (this.closeAsked || this.failure) return;
    this.lose("timeout", `the rollout ran past its time limit (${Math.round(this.ctx.ttlMs / 1000)} s)`);
    if (this.used) this.agentLoss = "rollout_expired";
    void this.sandbox?.close();
  }

  private lose(kind: InfraFailureKind, message: string): void {
    if (this.failure) return;
    this.failure = { kind, message };
    this.current = "lost";
    // Its own cgroup's OOM killer ended it: the agent's memory use (it may have made pid 1 the victim).
    if (kind === "sandbox_lost" && this.used && (this.sandbox?.limitCounters().oomKills ?? 0) > this.oomBaseline) {
      this.agentLoss = "sandbox_oom";
      this.failure.message = "the agent's processes filled the sandbox's memory and the OOM killer ended it";
    }
  }

  /** The sandbox closed: asked for, or not (then the rollout is lost). */
  private ended(): void {
    if (this.ttl) clearTimeout(this.ttl);
    if (!this.closeAsked) this.lose("sandbox_lost", "the sandbox ended without being closed (killed or reaped)");
    this.ctx.onEnd(this);
  }

  private subject(): Omit<OutcomeSubject, "mode"> {
    return { rolloutId: this.id, groupId: this.groupId, instanceId: this.instanceId, repetition: this.repetition };
  }

  info(): RolloutInfo {
    return {
      id: this.id,
      groupId: this.groupId,
      instanceId: this.instanceId,
      repetition: this.repetition,
      trajectoryId: this.trajectoryId,
      parent: this.parent,
      sandboxId: this.sandbox?.id ?? null,
      state: this.current,
      fromPool: this.fromPool,
      startMs: this.startMs,
      createdAt: this.createdAt.toISOString(),
      ...(this.failure ? { failure: this.failure } : {}),
      ...(this.lastOutcome ? { outcome: this.lastOutcome } : {}),
    };
  }
}
