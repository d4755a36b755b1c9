/**
 * I/O budget for cold starts: a cap on materializations running at once (optionally across every process that
 * shares `slotDir`, via flock slots) and a token bucket on bytes copied per second, so a burst of cold starts
 * queues instead of thrashing the disk.
 */
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { sleep } from "../store/fsutil.js";
import { tryLockFile, type FileLock } from "../store/lock.js";

export interface IoBudgetOptions {
  /** Materializations at once (default 2). */
  maxConcurrent?: number;
  /** Bytes copied per second (default: unlimited). Per process. */
  bytesPerSec?: number;
  /** Bytes that may be copied at once without waiting (default: one second's worth). */
  burstBytes?: number;
  /** When set, maxConcurrent holds across processes sharing this directory. */
  slotDir?: string;
  /** Poll interval while every cross-process slot is taken (default 25). */
  slotPollMs?: number;
}

export class IoBudget {
  readonly maxConcurrent: number;
  private inUse = 0;
  private readonly waiters: (() => void)[] = [];
  private readonly rate: number;
  private readonly burst: number;
  private tokens: number;
  private refilledAtMs = performance.now();

  constructor(private readonly opts: IoBudgetOptions = {}) {
    this.maxConcurrent = Math.max(1, Math.floor(opts.maxConcurrent ?? 2));
    this.rate = opts.bytesPerSec ?? Infinity;
    this.burst = opts.burstBytes ?? (Number.isFinite(this.rate) ? this.rate : Infinity);
    this.tokens = this.burst;
  }

  /** Materializations currently holding a slot in this process. */
  get active(): number {
    return this.inUse;
  }

  /** Run fn while holding one of the maxConcurrent slots. */
  async withSlot<T>(fn: () => Promise<T>): Promise<T> {
    await this.takeLocal();
    let shared: FileLock | undefined;
    try {
      if (this.opts.slotDir) shared = await this.takeShared(this.opts.slotDir);
      return await fn();
    } finally {
      await shared?.release();
      this.releaseLocal();
    }
  }

  /** Wait until `bytes` more may be copied (token bucket; concurrent callers queue behind each other's debt). */
  readonly consume = async (bytes: number): Promise<void> => {
    if (!Number.isFinite(this.rate)) return;
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.refilledAtMs) * this.rate) / 1000);
    this.refilledAtMs = now;
    this.tokens -= bytes;
    if (this.tokens < 0) await sleep((-this.tokens / this.rate) * 1000);
  };

  private async takeLocal(): Promise<void> {
    if (this.inUse < this.maxConcurrent) {
      this.inUse++;
      return;
    }
    // The releaser hands its slot straight to us (inUse stays the same), so no one can barge in between.
    await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  private releaseLocal(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.inUse--;
  }

  private async takeShared(dir: string): Promise<FileLock> {
    const start = Math.floor(Math.random() * this.maxConcurrent);
    for (;;) {
      for (let i = 0; i < this.maxConcurrent; i++) {
        const lock = await tryLockFile(join(dir, `io-slot-${(start + i) % this.maxConcurrent}.lock`));
        if (lock) return lock;
      }
      await sleep((this.opts.slotPollMs ?? 25) * (1 + Math.random()));
    }
  }
}
