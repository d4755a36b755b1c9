/**
 * Sandboxes started ahead of need, per task, bounded: a group takes them instead of starting its own. A pool
 * sandbox was started exactly as a group's own and nothing ran in it; one that died meanwhile is never handed out.
 */
import { isRunning } from "../sandbox/procfs.js";
import type { Sandbox } from "../sandbox/sandbox.js";

interface Entry {
  sandbox: Sandbox;
  timer: NodeJS.Timeout;
}

export class WarmPool {
  private readonly byTask = new Map<string, Entry[]>();
  private count = 0;

  constructor(
    readonly max: number,
    private readonly ttlMs: number,
  ) {}

  get size(): number {
    return this.count;
  }

  sizeFor(task: string): number {
    return this.byTask.get(task)?.length ?? 0;
  }

  /** Sandboxes held for every task whose key starts with `prefix` (an owner's, when keys start with it). */
  sizeWhere(prefix: string): number {
    let n = 0;
    for (const [task, list] of this.byTask) if (task.startsWith(prefix)) n += list.length;
    return n;
  }

  /** Room left in the pool. */
  get free(): number {
    return Math.max(0, this.max - this.count);
  }

  /** Keep `sandbox` for `task`; false (and the sandbox closed) when the pool is full. */
  async put(task: string, sandbox: Sandbox): Promise<boolean> {
    if (this.count >= this.max || sandbox.isClosed) {
      await sandbox.close();
      return false;
    }
    const entry: Entry = {
      sandbox,
      timer: setTimeout(() => void this.drop(task, entry), this.ttlMs),
    };
    entry.timer.unref();
    const list = this.byTask.get(task) ?? [];
    list.push(entry);
    this.byTask.set(task, list);
    this.count++;
    return true;
  }

  /** Up to `n` live sandboxes of `task`, oldest first; dead ones found on the way are dropped. */
  take(task: string, n: number): Sandbox[] {
    const list = this.byTask.get(task) ?? [];
    const out: Sandbox[] = [];
    while (out.length < n && list.length > 0) {
      const entry = list.shift()!;
      this.count--;
      clearTimeout(entry.timer);
      if (entry.sandbox.isClosed || !isRunning(entry.sandbox.pid1)) void entry.sandbox.close();
      else out.push(entry.sandbox);
    }
    if (list.length === 0) this.byTask.delete(task);
    return out;
  }

  /** Close every pool sandbox of `task` (all tasks when absent). */
  async clear(task?: string): Promise<void> {
    const tasks = task === undefined ? [...this.byTask.keys()] : [task];
    await Promise.all(tasks.map((t) => Promise.all(this.take(t, Number.POSITIVE_INFINITY).map((s) => s.close()))));
  }

  private async drop(task: string, entry: Entry): Promise<void> {
    const list = this.byTask.get(task);
    const i = list?.indexOf(entry) ?? -1;
    if (i < 0) return;
    list!.splice(i, 1);
    if (list!.length === 0) this.byTask.delete(task);
    this.count--;
    await entry.sandbox.close();
  }
}
