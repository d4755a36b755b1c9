/**
 * A build's scratch trees thrown away off the worker's path. Deleting a few thousand files costs seconds of disk
 * time on a busy machine (unlinks wait on the journal) that a worker need not wait for: the directory is renamed
 * into the home's trash at once (nothing looks for it there), then deleted in the background while the process goes
 * on. What a process left there when it died is deleted by the next build's sweep.
 */
import { mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { rm } from "node:fs/promises";
import { basename, join } from "node:path";

const FORCE = { recursive: true, force: true } as const;
const pending = new Map<string, Promise<void>>();

/** `dir` moved into `trash` and deleted in the background (in place, and at once, if it cannot be moved). */
export function discard(dir: string, trash: string): void {
  const target = join(trash, basename(dir));
  try {
    mkdirSync(trash, { recursive: true });
    renameSync(dir, target);
  } catch {
    rmSync(dir, FORCE);
    return;
  }
  deleteLater(target);
}

/** Delete in the background whatever `trash` holds that nothing here is deleting yet (left by a process that died). */
export function sweep(trash: string): void {
  let names: string[];
  try {
    names = readdirSync(trash);
  } catch {
    return;
  }
  for (const name of names) deleteLater(join(trash, name));
}

/** Settles once every deletion started so far has finished (tests; a caller about to exit). */
export async function discarded(): Promise<void> {
  await Promise.all(pending.values());
}

function deleteLater(path: string): void {
  if (pending.has(path)) return;
  const p = rm(path, FORCE)
    .catch(() => undefined)
    .finally(() => pending.delete(path));
  pending.set(path, p);
}
