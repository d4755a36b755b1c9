/**
 * A layer's bytes as stored (compressed or not) -> the store, on a thread of its own when the layer is large: the
 * main thread keeps downloading (network, the blob's hash, its file) while the other one inflates, hashes the tar
 * against the diff id, parses it and stores its files. The main thread then does less than half the work (a server
 * pulling an image keeps answering its clients), and with a core free a large layer costs the slower half rather
 * than the sum. Small layers are unpacked here (a thread costs more than they do).
 */
import { Worker } from "node:worker_threads";
import { ImageInvalidError } from "../../errors.js";
import { unpackLayer, type DiffRecord, type Store, type UnpackBudget, type UnpackResult } from "../store/index.js";
import { decompress, measured } from "./layer-stream.js";
import { fromWire, toWire, type FromWorker, type ToWorker } from "./unpack-protocol.js";

export interface LayerUnpackOptions {
  what: string;
  budget?: UnpackBudget | undefined;
  /** The stored bytes must match these (an archive's layer); a download has checked its own already. */
  expect?: { digest: string; size: number } | undefined;
  /** Once the content is verified, before its new objects are synced (a refusal here stores nothing). */
  beforeRecord: () => Promise<void>;
  /** Work that needs the verified record, done while the new objects are synced; must not fail. */
  whileSyncing: (record: DiffRecord) => Promise<void>;
  /** The layer's stored size: at or above `threadMinBytes` it is unpacked on its own thread. */
  size: number;
  /** Default 16 MiB: below, a thread costs more than it saves. */
  threadMinBytes?: number | undefined;
}

const THREAD_MIN_BYTES = 16 << 20;
/** Bytes sent to the unpacking thread and not yet taken by it, past which the sender waits. */
const MAX_IN_FLIGHT = 16 << 20;

/** Unpack `stream` (a layer's stored bytes) into the store as `diffId`. */
export async function unpackStoredLayer(
  store: Store,
  diffId: string,
  stream: AsyncIterable<Buffer>,
  o: LayerUnpackOptions,
): Promise<UnpackResult> {
  if (o.size < (o.threadMinBytes ?? THREAD_MIN_BYTES)) return unpackOnThisThread(store, diffId, stream, o);
  return new LayerThread(store, diffId, o).run(stream);
}

/** The unpack itself, on whichever thread calls it (the worker runs this very function). */
export async function unpackOnThisThread(
  store: Store,
  diffId: string,
  stream: AsyncIterable<Buffer>,
  o: Omit<LayerUnpackOptions, "size" | "threadMinBytes">,
): Promise<UnpackResult> {
  const raw = o.expect ? measured(stream) : undefined;
  return unpackLayer(store, diffId, decompress(raw?.stream ?? stream, o.what), {
    ...o.budget,
    what: o.what,
    beforeRecord: async () => {
      if (raw && o.expect && (raw.digest() !== o.expect.digest || raw.bytes() !== o.expect.size))
        throw new ImageInvalidError(`${o.what}: its bytes do not match the digest and size its manifest gives`);
      await o.beforeRecord();
    },
    whileSyncing: o.whileSyncing,
  });
}

/** One layer unpacked by a worker thread, fed the stored bytes from here with bounded buffering. */
class LayerThread {
  private readonly worker: Worker;
  private credited = 0;
  private wake: (() => void) | undefined;
  private settled: Promise<UnpackResult>;
  private finished = false;

  constructor(store: Store, diffId: string, o: LayerUnpackOptions) {
    this.worker = new Worker(new URL("./unpack-worker.js", import.meta.url), {
      workerData: { store, diffId, what: o.what, budget: o.budget ?? {}, expect: o.expect ?? null },
    });
    this.settled = new Promise<UnpackResult>((resolve, reject) => {
      this.worker.on("message", (m: FromWorker) => {
        if (m.t === "credit") {
          this.credited = m.bytes;
          this.wake?.();
        } else if (m.t === "before") void this.answer(o.beforeRecord);
        else if (m.t === "syncing") void this.answer(() => o.whileSyncing(m.record));
        else if (m.t === "done") this.end(() => resolve(m.result));
        else this.end(() => reject(fromWire(m.error)));
      });
      this.worker.on("error", (e) => this.end(() => reject(e)));
      this.worker.on("exit", (code) =>
        this.end(() => reject(new Error(`the layer's unpacking thread exited (${code})`))),
      );
    });
    this.settled.catch(() => undefined);
  }

  async run(stream: AsyncIterable<Buffer>): Promise<UnpackResult> {
    let sent = 0;
    try {
      for await (const chunk of stream) {
        if (this.finished) break; // the thread refused the content: its error is the answer
        this.post({ t: "chunk", bytes: chunk });
        sent += chunk.length;
        while (sent - this.credited > MAX_IN_FLIGHT && !this.finished) await new Promise<void>((r) => (this.wake = r));
      }
      this.post({ t: "end" });
    } catch (e) {
      // The source failed (a download cut for good, a full disk): the thread drops what it began, then this error.
      this.post({ t: "fail", message: (e as Error).message });
      await this.settled.catch(() => undefined);
      throw e;
    }
    return this.settled;
  }

  private async answer(work: () => Promise<void>): Promise<void> {
    try {
      await work();
      this.post({ t: "ok" });
    } catch (e) {
      this.post({ t: "refuse", error: toWire(e) });
    }
  }

  private post(m: ToWorker): void {
    if (!this.finished) this.worker.postMessage(m);
  }

  private end(settle: () => void): void {
    if (this.finished) return;
    this.finished = true;
    this.wake?.();
    settle();
    void this.worker.terminate();
  }
}
