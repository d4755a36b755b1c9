/**
 * What a group keeps of its task that no agent ever had, each counted as a sandbox of the group's owner:
 * - the pristine sandbox (started as the group's rollouts are, the task's setup included, never handed out, then
 *   sealed: nothing runs in it): the state a reset goes back to, copied from it (started at the first reset; a
 *   rollout reset from it has its next generation refilled from it ahead, so that its next reset is a swap);
 * - spares, sandboxes started the same way for forks and checkpoints to copy into (then a fork is a copy and nothing
 *   else): `keep` of them once the group has forked, refilled in the background after each use;
 * - checkpoints: a sandbox each, holding the state of a rollout at the time (sealed: nothing runs in it), until
 *   dropped.
 */
import { CheckpointNotFoundError, InvalidInputError, LimitError } from "../errors.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import type { Workspace } from "../env/workspace.js";

/**
 * `seed` (a sandbox of `workspace`) forked into `k`: `into` (sandboxes `workspace` started, which hold it already)
 * first, then new ones, each holding the workspace until it closes.
 */
export async function forkInto(workspace: Workspace, seed: Sandbox, k: number, into: Sandbox[]): Promise<Sandbox[]> {
  const children = await seed.fork(k, { into });
  for (const child of children.slice(into.length)) workspace.adopt(child);
  return children;
}

/** Checkpoints a group holds at most. */
export const MAX_CHECKPOINTS = 64;

export interface SpareAccounting {
  reserve: (k: number) => void;
  unreserve: (k: number) => void;
}

export class GroupSpares {
  private pristineOne: Promise<Sandbox> | undefined;
  private readonly ready: Sandbox[] = [];
  private refilling = 0;
  private forked = false;
  private readonly checkpoints = new Map<string, Sandbox>();
  /** Ids of dropped checkpoints: using one again says it was dropped, not that it never existed. */
  private readonly dropped = new Set<string>();
  private checkpointCount = 0;
  /** Sandboxes held here, each one of the owner's reserved sandboxes until it closes (or becomes a rollout). */
  private readonly held = new Set<Sandbox>();
  private closed = false;

  constructor(
    private readonly workspace: Workspace,
    private readonly keep: number,
    private readonly accounting: SpareAccounting,
  ) {}

  /** A sandbox started for the group, counted as the owner's until it closes or is handed over (`take`). */
  private async startOne(): Promise<Sandbox> {
    this.accounting.reserve(1);
    let sb: Sandbox;
    try {
      sb = await this.workspace.start();
    } catch (e) {
      this.accounting.unreserve(1);
      throw e;
    }
    this.held.add(sb);
    sb.onClose(() => {
      if (this.held.delete(sb)) this.accounting.unreserve(1);
    });
    if (this.closed) await sb.close();
    return sb;
  }

  /** The pristine sandbox (started the first time, or again if it ended). */
  async pristine(): Promise<Sandbox> {
    if (this.closed) throw new InvalidInputError("the group is closed");
    this.pristineOne ??= this.startOne().then(async (sb) => {
      await sb.seal();
      return sb;
    });
    const p = this.pristineOne;
    const sb = await p.catch((e: unknown) => {
      if (this.pristineOne === p) this.pristineOne = undefined;
      throw e;
    });
    if (!sb.isClosed) return sb;
    if (this.pristineOne === p) this.pristineOne = undefined;
    return this.pristine();
  }

  /** Up to `k` ready spares, handed over: the caller makes rollouts of them (their count is the rollouts' now). */
  take(k: number): Sandbox[] {
    this.forked = true;
    const out = this.ready.splice(0, k).filter((sb) => !sb.isClosed);
    for (const sb of out) this.held.delete(sb);
    return out;
  }

  /** Spares taken but not used (the fork was refused before it began): held again. */
  putBack(spares: Sandbox[]): void {
    for (const sb of spares) {
      this.held.add(sb);
      this.ready.push(sb);
    }
  }

  /** Start spares in the background until `keep` are ready (once the group has forked). */
  refill(): void {
    while (!this.closed && this.forked && this.ready.length + this.refilling < this.keep) {
      this.refilling++;
      void this.startOne()
        .then((sb) => {
          if (sb.isClosed) return;
          // A fork copies into it: its restore's own helper, so that the child's first command finds its own.
          sb.prepareRestore();
          this.ready.push(sb);
        })
        .catch(() => {
          /* at the owner's cap, or the start failed: forks start their sandboxes themselves */
        })
        .finally(() => this.refilling--);
    }
  }

  /** A checkpoint of `sandbox` (a rollout's): a spare (or a new sandbox) given its state; its id. */
  async checkpoint(rolloutId: string, sandbox: Sandbox): Promise<string> {
    if (this.closed) throw new InvalidInputError("the group is closed");
    if (this.checkpoints.size >= MAX_CHECKPOINTS)
      throw new LimitError(`the group holds ${MAX_CHECKPOINTS} checkpoints: drop some first`);
    const into = this.take(1);
    if (into.length === 0) this.accounting.reserve(1);
    let copy: Sandbox;
    try {
      [copy] = (await forkInto(this.workspace, sandbox, 1, into)) as [Sandbox];
      await copy.seal().catch(async (e: unknown) => {
        await copy.close();
        throw e;
      });
    } catch (e) {
      this.accounting.unreserve(1);
      throw e;
    } finally {
      this.refill();
    }
    this.held.add(copy);
    copy.onClose(() => {
      if (this.held.delete(copy)) this.accounting.unreserve(1);
    });
    const id = `${rolloutId}~${++this.checkpointCount}`;
    this.checkpoints.set(id, copy);
    return id;
  }

  checkpointSandbox(id: string): Sandbox {
    const sb = this.checkpoints.get(id);
    if (sb) return sb;
    throw new CheckpointNotFoundError(
      this.dropped.has(id)
        ? `checkpoint ${id} was dropped: its state is gone (checkpoint again to keep one)`
        : `no checkpoint ${id} in this group: ids come from checkpointing one of its rollouts`,
    );
  }

  async dropCheckpoint(id: string): Promise<void> {
    const sb = this.checkpointSandbox(id);
    this.checkpoints.delete(id);
    this.dropped.add(id);
    await sb.close();
  }

  /** Everything held closes (idempotent). */
  async close(): Promise<void> {
    this.closed = true;
    const pristine = await this.pristineOne?.catch(() => undefined);
    const all = [...this.held, ...(pristine ? [pristine] : [])];
    this.ready.length = 0;
    this.checkpoints.clear();
    await Promise.all(all.map((sb) => sb.close()));
  }
}
