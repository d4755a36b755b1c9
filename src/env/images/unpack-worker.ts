/**
 * The thread that unpacks one large layer (see layer-unpack.ts): the stored bytes arrive as messages and are
 * inflated, hashed and stored by the very function the main thread uses for small layers (`unpackOnThisThread`);
 * the main thread is asked before the record is made durable, and given the verified record while the objects are
 * synced.
 */
import { parentPort, workerData } from "node:worker_threads";
import { unpackOnThisThread } from "./layer-unpack.js";
import { fromWire, toWire, type FromWorker, type ToWorker, type UnpackWorkerData } from "./unpack-protocol.js";

const port = parentPort!;
const data = workerData as UnpackWorkerData;
/** Credit is returned each time this many more bytes were taken (fewer messages than one per chunk). */
const CREDIT_EVERY = 4 << 20;

const send = (m: FromWorker): void => port.postMessage(m);

/** Messages as they come: chunks for the stream, answers for whoever waits for one. */
const inbox: ToWorker[] = [];
let notify: (() => void) | undefined;
port.on("message", (m: ToWorker) => {
  inbox.push(m);
  notify?.();
});

async function next(): Promise<ToWorker> {
  while (inbox.length === 0) await new Promise<void>((r) => (notify = r));
  notify = undefined;
  return inbox.shift()!;
}

/** The stored bytes; a source that failed ends the stream with its error. */
async function* chunks(): AsyncGenerator<Buffer> {
  let taken = 0;
  let credited = 0;
  for (;;) {
    const m = await next();
    if (m.t === "end") return;
    if (m.t === "fail") throw new Error(m.message);
    if (m.t !== "chunk") throw new Error(`unexpected message ${m.t} while reading the layer`);
    taken += m.bytes.length;
    if (taken - credited >= CREDIT_EVERY) {
      credited = taken;
      send({ t: "credit", bytes: taken });
    }
    yield Buffer.from(m.bytes.buffer, m.bytes.byteOffset, m.bytes.byteLength);
  }
}

/** Ask the main thread, wait for its answer (a refusal is thrown here, as its own error). */
async function ask(m: FromWorker): Promise<void> {
  send(m);
  const answer = await next();
  if (answer.t === "refuse") throw fromWire(answer.error);
  if (answer.t !== "ok") throw new Error(`unexpected message ${answer.t} while waiting for an answer`);
}

async function main(): Promise<void> {
  try {
    const result = await unpackOnThisThread(data.store, data.diffId, chunks(), {
      what: data.what,
      budget: data.budget,
      expect: data.expect ?? undefined,
      beforeRecord: () => ask({ t: "before" }),
      whileSyncing: (record) => ask({ t: "syncing", record }),
    });
    send({ t: "done", result });
  } catch (e) {
    send({ t: "error", error: toWire(e) });
  }
}

void main();
