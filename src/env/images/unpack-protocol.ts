/** What the main thread and a layer's unpacking thread (layer-unpack.ts, unpack-worker.ts) say to each other. */
import { DiskFullError, ImageInvalidError, InvalidInputError, StoreCorruptError } from "../../errors.js";
import type { DiffRecord, Store, UnpackBudget, UnpackResult } from "../store/index.js";

export interface UnpackWorkerData {
  store: Store;
  diffId: string;
  what: string;
  budget: UnpackBudget;
  expect: { digest: string; size: number } | null;
}

/** An error as it crosses threads: its class by name (the ones an unpack throws), message and errno code. */
export interface WireError {
  name: string;
  message: string;
  code?: string | undefined;
}

export type ToWorker =
  | { t: "chunk"; bytes: Uint8Array }
  | { t: "end" }
  /** The source failed: drop what was begun. */
  | { t: "fail"; message: string }
  /** The answer to "before" or "syncing". */
  | { t: "ok" }
  | { t: "refuse"; error: WireError };

export type FromWorker =
  /** Bytes taken so far (the sender's flow control). */
  | { t: "credit"; bytes: number }
  /** The content is verified: may its objects be synced and its record written? */
  | { t: "before" }
  /** The verified record, while the objects are synced. */
  | { t: "syncing"; record: DiffRecord }
  | { t: "done"; result: UnpackResult }
  | { t: "error"; error: WireError };

const CLASSES: Record<string, new (message: string) => Error> = {
  ImageInvalidError,
  DiskFullError,
  StoreCorruptError,
  InvalidInputError,
};

export function toWire(e: unknown): WireError {
  const err = e instanceof Error ? e : new Error(String(e));
  const code = (err as { code?: unknown }).code;
  return { name: err.name, message: err.message, ...(typeof code === "string" ? { code } : {}) };
}

export function fromWire(w: WireError): Error {
  const Class = CLASSES[w.name];
  const e = Class ? new Class(w.message) : new Error(w.message);
  if (w.code) Object.assign(e, { code: w.code });
  return e;
}
