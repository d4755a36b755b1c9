/**
 * A group of rollouts of one task (GRPO's N attempts at one prompt): its rollouts by repetition, forks added as
 * new repetitions after the group's, one shared workspace held until the group closes. For resets, forks and
 * checkpoints it keeps sandboxes of the task no agent ever had (`GroupSpares`).
 */
import { randomBytes } from "node:crypto";
import { InvalidInputError, NotFoundError } from "../errors.js";
import type { Workspace } from "../env/workspace.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import type { Instance } from "../tasks/types.js";
import { Rollout, type RolloutContext } from "./rollout.js";
import { forkInto, GroupSpares } from "./spares.js";
import type { GroupInfo, GroupTimings } from "./types.js";

export type GroupSettings = Omit<RolloutContext, "groupId" | "instance" | "fork" | "reset" | "checkpoint" | "onEnd"> & {
  /** Told when a rollout of the group starts (forks too) and when it ends. */
  onRolloutStart: (r: Rollout) => void;
  onRolloutEnd: (r: Rollout) => void;
  /** Live sandboxes may grow by `k` (throws LimitError otherwise); `unreserve` gives back what did not start. */
  reserve: (k: number) => void;
  unreserve: (k: number) => void;
  /** Sandboxes kept ready for forks and checkpoints once the group has forked (see GroupSpares). */
  forkSpares: number;
};

export const MAX_GROUP_SIZE = 256;

export class RolloutGroup {
  readonly id = `rg-${randomBytes(6).toString("hex")}`;
  readonly createdAt = new Date();
  readonly rollouts: Rollout[] = [];
  readonly timings: GroupTimings = { goldCheckMs: 0, workspaceMs: 0, startMs: 0, readyMs: 0 };
  private readonly spares: GroupSpares;
  private nextRepetition = 0;
  private closing: Promise<void> | undefined;

  /** `workspace` must be held by the caller until `start` returns; then the group's sandboxes hold it. */
  constructor(
    readonly instance: Instance,
    private readonly workspace: Workspace,
    private readonly settings: GroupSettings,
  ) {
    this.spares = new GroupSpares(workspace, settings.forkSpares, settings);
  }

  get instanceId(): string {
    return this.instance.instance_id;
  }

  /** The built environment's key, or the image's root filesystem's (the layer its sandboxes run on). */
  get envKey(): string {
    return this.workspace.env?.key ?? this.workspace.options.labels?.["env"] ?? "";
  }

  get isClosed(): boolean {
    return this.closing !== undefined;
  }

  /** Every rollout has ended (closed, lost or failed): nothing can use the group any more. */
  get isOver(): boolean {
    return this.rollouts.every((r) => r.state === "closed" || r.state === "lost" || r.state === "failed");
  }

  private context(): RolloutContext {
    const { onRolloutStart: _s, onRolloutEnd, reserve: _r, unreserve: _u, forkSpares: _f, ...rest } = this.settings;
    return {
      ...rest,
      groupId: this.id,
      instance: this.instance,
      fork: (parent, k, checkpoint) => this.fork(parent, k, checkpoint),
      reset: (r, checkpoint) => this.reset(r, checkpoint),
      checkpoint: (r) => this.spares.checkpoint(r.id, r.use()),
      onEnd: (r) => {
        onRolloutEnd(r);
        // Nothing can reset or fork any more: what was kept ready for it goes now, not when the group is forgotten.
        if (this.isOver) void this.spares.close();
      },
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

  /** `k` new rollouts with `parent`'s current state (or a checkpoint's): into the spares first, then new sandboxes. */
  private async fork(parent: Rollout, k: number, checkpoint?: string): Promise<Rollout[]> {
    if (!Number.isInteger(k) || k < 1 || k > MAX_GROUP_SIZE)
      throw new InvalidInputError(`fork count must be an integer from 1 to ${MAX_GROUP_SIZE}, got ${k}`, {
        field: "k",
      });
    if (this.isClosed) throw new InvalidInputError(`group ${this.id} is closed`);
    const seed = checkpoint === undefined ? parent.sandbox! : this.spares.checkpointSandbox(checkpoint);
    const t0 = performance.now();
    // Spares are the owner's sandboxes already: only the children started now are more.
    const into = this.spares.take(k);
    try {
      this.settings.reserve(k - into.length);
    } catch (e) {
      this.spares.putBack(into);
      throw e;
    }
    let children: Sandbox[];
    try {
      children = await forkInto(this.workspace, seed, k, into);
    } catch (e) {
      this.settings.unreserve(k);
      throw e;
    } finally {
      this.spares.refill();
    }
    const forkMs = performance.now() - t0;
    const ctx = this.context();
    const made = children.map(
      (sandbox) => new Rollout(ctx, { repetition: this.nextRepetition++, parent: parent.id, startMs: forkMs }, sandbox),
    );
    this.add(made);
    return made;
  }

  /** `r`'s sandbox back to the group's start state (a pristine sandbox's), or to a checkpoint's. */
  private async reset(r: Rollout, checkpoint?: string): Promise<void> {
    if (this.isClosed) throw new InvalidInputError(`group ${this.id} is closed`);
    const seed = checkpoint === undefined ? await this.spares.pristine() : this.spares.checkpointSandbox(checkpoint);
    await r.use().restore(seed);
  }

  /** Let go of a checkpoint (CheckpointNotFoundError when the group has none of that id). */
  dropCheckpoint(id: string): Promise<void> {
    return this.spares.dropCheckpoint(id);
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

  /** Close every rollout (forks included) and what was kept ready: their sandboxes let go of the workspace. */
  close(): Promise<void> {
    this.closing ??= Promise.all([...this.rollouts.map((r) => r.close()), this.spares.close()]).then(() => {});
    return this.closing;
  }
}
