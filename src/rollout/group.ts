/**
 * A group of rollouts of one task (GRPO's N attempts at one prompt): its rollouts by repetition, forks added as
 * new repetitions after the group's, one shared workspace held until the group closes.
 */
import { randomBytes } from "node:crypto";
import { InvalidInputError, NotFoundError } from "../errors.js";
import type { Workspace } from "../env/workspace.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import type { Instance } from "../tasks/types.js";
import { Rollout, type RolloutContext } from "./rollout.js";
import type { GroupInfo, GroupTimings } from "./types.js";

export type GroupSettings = Omit<RolloutContext, "groupId" | "instance" | "fork" | "onEnd"> & {
  /** Told when a rollout of the group starts (forks too) and when it ends. */
  onRolloutStart: (r: Rollout) => void;
  onRolloutEnd: (r: Rollout) => void;
  /** Live rollouts may grow by `k` (throws LimitError otherwise); `unreserve` gives back what did not start. */
  reserve: (k: number) => void;
  unreserve: (k: number) => void;
};

export const MAX_GROUP_SIZE = 256;

export class RolloutGroup {
  readonly id = `rg-${randomBytes(6).toString("hex")}`;
  readonly createdAt = new Date();
  readonly rollouts: Rollout[] = [];
  readonly timings: GroupTimings = { goldCheckMs: 0, workspaceMs: 0, startMs: 0, readyMs: 0 };
  private nextRepetition = 0;
  private closing: Promise<void> | undefined;

  /** `workspace` must be held by the caller until `start` returns; then the group's sandboxes hold it. */
  constructor(
    readonly instance: Instance,
    private readonly workspace: Workspace,
    private readonly settings: GroupSettings,
  ) {}

  get instanceId(): string {
    return this.instance.instance_id;
  }

  get envKey(): string {
    return this.workspace.env!.key;
  }

  get isClosed(): boolean {
    return this.closing !== undefined;
  }

  /** Every rollout has ended (closed, lost or failed): nothing can use the group any more. */
  get isOver(): boolean {
    return this.rollouts.every((r) => r.state === "closed" || r.state === "lost" || r.state === "failed");
  }

  private context(): RolloutContext {
    const { onRolloutStart: _s, onRolloutEnd, reserve: _r, unreserve: _u, ...rest } = this.settings;
    return {
      ...rest,
      groupId: this.id,
      instance: this.instance,
      fork: (parent, k) => this.fork(parent, k),
      onEnd: onRolloutEnd,
    };
  }

  /** Add rollouts for the next repetitions: taken from the pool, then started together. */
  async start(n: number, fromPool: Sandbox[]): Promise<Rollout[]> {
    const t0 = performance.now();
    const reps = Array.from({ length: n }, () => this.nextRepetition++);
    const ctx = this.context();
    const made = await Promise.all(
      reps.map(async (repetition, i) => {
        const pooled = fromPool[i];
        if (pooled) return new Rollout(ctx, { repetition, fromPool: true, startMs: performance.now() - t0 }, pooled);
        const { sandbox, error } = await this.startSandbox();
        return new Rollout(ctx, { repetition, startMs: performance.now() - t0 }, sandbox, error);
      }),
    );
    this.add(made);
    return made;
  }

  /** One sandbox, with one retry: a start that fails twice leaves its repetition failed, not the group. */
  private async startSandbox(): Promise<{ sandbox?: Sandbox; error?: string }> {
    let error = "";
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        return { sandbox: await this.workspace.start() };
      } catch (e) {
        error = (e as Error).message;
      }
    }
    return { error };
  }

  private add(rollouts: Rollout[]): void {
    for (const r of rollouts) {
      this.rollouts.push(r);
      this.settings.onRolloutStart(r);
    }
  }

  private async fork(parent: Rollout, k: number): Promise<Rollout[]> {
    if (!Number.isInteger(k) || k < 1 || k > MAX_GROUP_SIZE)
      throw new InvalidInputError(`fork count must be an integer from 1 to ${MAX_GROUP_SIZE}, got ${k}`, {
        field: "k",
      });
    if (this.isClosed) throw new InvalidInputError(`group ${this.id} is closed`);
    this.settings.reserve(k);
    const t0 = performance.now();
    let children: Sandbox[];
    try {
      children = await parent.sandbox!.fork(k);
      for (const child of children) this.workspace.adopt(child);
    } catch (e) {
      this.settings.unreserve(k);
      throw e;
    }
    const forkMs = performance.now() - t0;
    const ctx = this.context();
    const made = children.map(
      (sandbox) => new Rollout(ctx, { repetition: this.nextRepetition++, parent: parent.id, startMs: forkMs }, sandbox),
    );
    this.add(made);
    return made;
  }

  rollout(repetition: number): Rollout {
    const r = this.rollouts.find((x) => x.repetition === repetition);
    if (!r) throw new NotFoundError(`group ${this.id} has no repetition ${repetition}`);
    return r;
  }

  info(): GroupInfo {
    return {
      id: this.id,
      instanceId: this.instanceId,
      envKey: this.envKey,
      createdAt: this.createdAt.toISOString(),
      problemStatement: this.instance.problem_statement ?? "",
      timings: { ...this.timings },
      rollouts: this.rollouts.map((r) => r.info()),
    };
  }

  /** Close every rollout (forks included): their sandboxes let go of the workspace. Idempotent. */
  close(): Promise<void> {
    this.closing ??= Promise.all(this.rollouts.map((r) => r.close())).then(() => {});
    return this.closing;
  }
}
