/** Disk usage like `du`: allocated blocks, every inode counted once across all the paths given to one counter. */
import * as fsp from "node:fs/promises";
import { join } from "node:path";

export class DiskUsage {
  private readonly seen = new Set<string>();
  /** Allocated bytes (st_blocks * 512): what the disk really holds. */
  allocated = 0;
  /** Sum of st_size. */
  apparent = 0;

  /** Count a file or a whole tree (symlinks are not followed). Missing paths count nothing. */
  async add(path: string): Promise<void> {
    let st: import("node:fs").BigIntStats;
    try {
      st = await fsp.lstat(path, { bigint: true });
    } catch {
      return;
    }
    const id = `${st.dev}:${st.ino}`;
    if (this.seen.has(id)) return;
    this.seen.add(id);
    this.allocated += Number(st.blocks) * 512;
    this.apparent += Number(st.size);
    if (!st.isDirectory()) return;
    let names: string[];
    try {
      names = await fsp.readdir(path);
    } catch {
      return;
    }
    // Bounded fan-out: trees can be large (a SWE-bench testbed has ~10^4 files).
    for (let i = 0; i < names.length; i += 64) {
      await Promise.all(names.slice(i, i + 64).map((n) => this.add(join(path, n))));
    }
  }
}

export async function diskUsage(paths: string[]): Promise<{ allocated: number; apparent: number }> {
  const du = new DiskUsage();
  for (const p of paths) await du.add(p);
  return { allocated: du.allocated, apparent: du.apparent };
}
