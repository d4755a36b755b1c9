/**
 * Small objects received whole (a peer's answer), verified and placed. Placing one is five file-system calls (write,
 * chown, chmod, utimes, rename); made one by one through the thread pool, each is a round trip of the event loop,
 * and a layer of thousands of small files spends more time in those trips than in the calls. So many objects go to
 * a thread of their own that makes the calls synchronously (`putVerifiedSync`, the very function used for a few,
 * here): the main thread keeps receiving and hashing the large ones meanwhile, and with a core free the calls cost
 * no time of it. A handful are placed here, synchronously (a thread costs more than they do).
 */
import { Worker } from "node:worker_threads";
import type { ObjectId, Store } from "./layout.js";
import { putVerifiedSync } from "./objects.js";

export interface ObjectWriter {
  /** Place `data` as object `id` if it hashes to it, else `mismatch()` is thrown (here, or by a later call). */
  put(id: ObjectId, data: Buffer, mismatch: () => Error): Promise<void>;
  /** Everything put is placed (or the first failure is thrown); the writer is done. */
  finish(): Promise<void>;
  /** Stop without waiting (after a failure elsewhere); what was not placed yet is not. */
  abort(): void;
}

/** What the thread is sent: objects to place, in order; what it answers: how many it placed, or why it stopped. */
export interface WriterBatch {
  seq: number;
  ids: ObjectId[];
  sizes: number[];
  /** The objects' bytes, concatenated (moved to the thread, not copied again). */
  bytes: ArrayBuffer;
}
export type WriterAnswer = { seq: number; placed: number; error?: { message: string; code?: string } };

/** Below this many objects, the calls are made here (a few milliseconds of this thread at most). */
export const THREAD_MIN_OBJECTS = 64;
const BATCH_BYTES = 1 << 20;
const BATCH_OBJECTS = 128;
/** Bytes sent to the thread and not placed yet, past which `put` waits. */
const MAX_IN_FLIGHT = 32 << 20;

/** A writer for `count` objects about to arrive: a thread of its own when there are many. */
export function objectWriter(store: Store, count: number, threadMinObjects = THREAD_MIN_OBJECTS): ObjectWriter {
  return count >= threadMinObjects ? new ThreadWriter(store) : new InlineWriter(store);
}

class InlineWriter implements ObjectWriter {
  constructor(private readonly store: Store) {}
  async put(id: ObjectId, data: Buffer, mismatch: () => Error): Promise<void> {
    putVerifiedSync(this.store, data, id, mismatch);
  }
  async finish(): Promise<void> {}
  abort(): void {}
}

class ThreadWriter implements ObjectWriter {
  private readonly worker: Worker;
  private seq = 0;
  private ids: ObjectId[] = [];
  private parts: Buffer[] = [];
  private batchBytes = 0;
  /** Per batch sent and not answered: its objects' sizes and mismatch errors. */
  private readonly sent = new Map<number, { bytes: number; mismatches: (() => Error)[] }>();
  private mismatches: (() => Error)[] = [];
  private inFlight = 0;
  private failed: { error: Error } | undefined;
  /** Who waits for an answer (the pull's batches put at once). */
  private waiters: (() => void)[] = [];

  constructor(store: Store) {
    this.worker = new Worker(new URL("./object-writer-worker.js", import.meta.url), { workerData: { store } });
    this.worker.on("message", (a: WriterAnswer) => this.answered(a));
    this.worker.on("error", (e) => this.fail(e));
    this.worker.on("exit", (code) => this.fail(new Error(`the object writing thread exited (${code})`)));
  }

  async put(id: ObjectId, data: Buffer, mismatch: () => Error): Promise<void> {
    this.check();
    this.ids.push(id);
    this.parts.push(data);
    this.mismatches.push(mismatch);
    this.batchBytes += data.length;
    if (this.batchBytes >= BATCH_BYTES || this.ids.length >= BATCH_OBJECTS) this.send();
    while (this.inFlight > MAX_IN_FLIGHT && !this.failed) await this.answer();
    this.check();
  }

  async finish(): Promise<void> {
    this.send();
    while (this.sent.size > 0 && !this.failed) await this.answer();
    this.check();
    void this.worker.terminate();
  }

  private answer(): Promise<void> {
    return new Promise<void>((r) => this.waiters.push(r));
  }

  private wakeAll(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  private check(): void {
    if (this.failed) throw this.failed.error;
  }

  abort(): void {
    this.fail(new Error("the object writer was stopped"));
  }

  private send(): void {
    if (this.ids.length === 0 || this.failed) return;
    // One buffer of its own per batch (the parts may be views into larger chunks), moved to the thread.
    const all = Buffer.allocUnsafeSlow(this.batchBytes);
    let at = 0;
    for (const p of this.parts) at += p.copy(all, at);
    const batch: WriterBatch = {
      seq: this.seq++,
      ids: this.ids,
      sizes: this.parts.map((p) => p.length),
      bytes: all.buffer,
    };
    this.sent.set(batch.seq, { bytes: this.batchBytes, mismatches: this.mismatches });
    this.inFlight += this.batchBytes;
    this.worker.postMessage(batch, [batch.bytes]);
    this.ids = [];
    this.parts = [];
    this.batchBytes = 0;
    this.mismatches = [];
  }

  private answered(a: WriterAnswer): void {
    const batch = this.sent.get(a.seq);
    if (!batch) return;
    this.sent.delete(a.seq);
    this.inFlight -= batch.bytes;
    if (a.error?.code === "mismatch") this.fail(batch.mismatches[a.placed]!());
    else if (a.error) this.fail(Object.assign(new Error(a.error.message), { code: a.error.code }));
    this.wakeAll();
  }

  private fail(error: Error): void {
    if (!this.failed) this.failed = { error };
    this.wakeAll();
    void this.worker.terminate();
  }
}
