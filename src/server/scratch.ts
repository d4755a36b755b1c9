/**
 * The server's own scratch space for uploads: `<home>/server/uploads/`, never the host's shared /tmp. Emptied when
 * the server starts (what a killed server left), one fresh directory per upload, removed when the upload ends.
 */
import { mkdirSync, mkdtempSync, rmSync, statfsSync } from "node:fs";
import { join } from "node:path";
import { UploadTooLargeError } from "../errors.js";

/** Disk space an upload must leave free for everything else. */
const RESERVE_BYTES = 512 * 1024 ** 2;

export class UploadScratch {
  readonly dir: string;

  constructor(home: string) {
    this.dir = join(home, "server", "uploads");
  }

  /** Remove what an earlier server left (it was killed mid-upload), then make the directory. */
  reset(): void {
    rmSync(this.dir, { recursive: true, force: true });
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
  }

  /** A fresh directory for one upload; `dispose` removes it. */
  make(): { dir: string; dispose: () => void } {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const dir = mkdtempSync(join(this.dir, "up-"));
    return { dir, dispose: () => rmSync(dir, { recursive: true, force: true }) };
  }

  /** Refuse (413) when writing `bytes` more would leave less than the reserve free. */
  ensureFree(bytes: number, what: string): void {
    const s = statfsSync(this.dir);
    const free = s.bavail * s.bsize;
    if (bytes > free - RESERVE_BYTES)
      throw new UploadTooLargeError(`${what} needs ${bytes} bytes; the server's disk has ${Math.max(0, free)} free`);
  }
}
