/**
 * Appends to a file off the producer's path: one write in flight, and whatever chunks arrived meanwhile written
 * together as soon as it is done, so the producer (a download, an inflating layer, a peer's objects) never waits for
 * the disk unless the disk falls 16 MiB behind. Waiting for each write instead would put a thread-pool round trip
 * on the path of every chunk. The chunks are kept until written: a producer must not reuse their memory.
 */
import type * as fsp from "node:fs/promises";

/** Bytes gathered past which `append` waits for the disk. */
const MAX_PENDING = 16 << 20;

export class FileAppender {
  private batch: Buffer[] = [];
  private batchBytes = 0;
  private writing: Promise<void> | undefined;
  private failed: unknown;

  constructor(private readonly fh: fsp.FileHandle) {}

  async append(chunk: Buffer): Promise<void> {
    if (this.failed) throw this.failed; // a failed write (ENOSPC) stops the producer at its next chunk
    this.batch.push(chunk);
    this.batchBytes += chunk.length;
    if (!this.writing) this.writeBatch();
    else if (this.batchBytes >= MAX_PENDING) await this.writing;
  }

  /** Until everything appended is written. */
  async flush(): Promise<void> {
    while (this.writing) await this.writing;
    if (this.failed) throw this.failed;
  }

  /** Everything appended written (a failure then is not this call's: the producer has failed or flushed already). */
  async close(): Promise<void> {
    await this.flush().catch(() => undefined);
    await this.fh.close();
  }

  private writeBatch(): void {
    const batch = this.batch;
    this.batch = [];
    this.batchBytes = 0;
    this.writing = writeAll(this.fh, batch).then(
      () => {
        this.writing = undefined;
        if (this.batch.length > 0 && !this.failed) this.writeBatch();
      },
      (e: unknown) => {
        this.failed = e;
        this.writing = undefined;
      },
    );
  }
}

/** All of `chunks`: a write may take fewer bytes than asked (a filling disk), the rest is written again. */
async function writeAll(fh: fsp.FileHandle, chunks: Buffer[]): Promise<void> {
  let rest = chunks;
  while (rest.length > 0) {
    let { bytesWritten } = await fh.writev(rest);
    if (bytesWritten === 0) throw Object.assign(new Error("the file took no byte of a write"), { code: "EIO" });
    let i = 0;
    while (i < rest.length && bytesWritten >= rest[i]!.length) bytesWritten -= rest[i++]!.length;
    rest = rest.slice(i);
    if (bytesWritten > 0) rest[0] = rest[0]!.subarray(bytesWritten);
  }
}
