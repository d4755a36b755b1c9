/**
 * The thread that places small objects (see object-writer.ts): each batch's objects in order, each verified against
 * its id before anything of it is written (`putVerifiedSync`); the first that fails stops the batch, and the answer
 * says how many were placed before it and why.
 */
import { parentPort, workerData } from "node:worker_threads";
import { errCode } from "../../errors.js";
import type { Store } from "./layout.js";
import { putVerifiedSync } from "./objects.js";
import type { WriterAnswer, WriterBatch } from "./object-writer.js";

const port = parentPort!;
const { store } = workerData as { store: Store };
const MISMATCH = new Error("mismatch");

port.on("message", (b: WriterBatch) => {
  let placed = 0;
  let answer: WriterAnswer = { seq: b.seq, placed };
  try {
    for (let at = 0; placed < b.ids.length; placed++) {
      const size = b.sizes[placed]!;
      putVerifiedSync(store, Buffer.from(b.bytes, at, size), b.ids[placed]!, () => MISMATCH);
      at += size;
    }
    answer = { seq: b.seq, placed };
  } catch (e) {
    const code = e === MISMATCH ? "mismatch" : errCode(e);
    answer = { seq: b.seq, placed, error: { message: (e as Error).message, ...(code ? { code } : {}) } };
  }
  port.postMessage(answer);
});
