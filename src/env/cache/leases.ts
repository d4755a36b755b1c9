/**
 * In-use tracking: one empty file per lease, named by the holder's pid and process start time. A lease whose
 * process is gone (or whose pid now belongs to another process) is stale and gets removed when counted.
 */
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { errCode } from "../../errors.js";
import { processAlive, scratchName, selfIdentity } from "../store/fsutil.js";

const self = selfIdentity();

/** Create a lease in `dir`; returns its path (delete it to release). */
export async function createLease(dir: string): Promise<string> {
  await fsp.mkdir(dir, { recursive: true });
  const path = join(dir, scratchName(`lease-${self.startTime}`));
  await fsp.writeFile(path, "", { flag: "wx" });
  return path;
}

/** Leases in `dir` held by live processes; stale ones are deleted on the way. */
export async function countLiveLeases(dir: string): Promise<number> {
  let names: string[];
  try {
    names = await fsp.readdir(dir);
  } catch (e) {
    if (errCode(e) === "ENOENT") return 0;
    throw e;
  }
  let live = 0;
  for (const name of names) {
    // lease-<startTime>-<pid>-<random>
    const m = /^lease-(\d+)-(\d+)-[0-9a-f]+$/.exec(name);
    if (m && processAlive(Number(m[2]), m[1])) live++;
    else await fsp.rm(join(dir, name), { force: true });
  }
  return live;
}

/** Marker contents identifying this process (used for eviction markers). */
export function identityText(): string {
  return `${self.pid} ${self.startTime}`;
}

/** Is the process named by identityText() output still alive? */
export function identityAlive(text: string): boolean {
  const [pid, startTime] = text.trim().split(" ");
  return processAlive(Number(pid), startTime);
}
