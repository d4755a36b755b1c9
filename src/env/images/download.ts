/**
 * A registry blob as a stream of its bytes, written on the way to a file that survives a kill: a later pull replays
 * what the file holds, then continues with `Range` where it ends. Every byte is counted against the size the
 * manifest gives (a registry sending more is lying, and stopped there) and the whole must hash to the digest,
 * checked before the stream ends, so its consumer never finishes on unverified bytes. The layer is unpacked while it
 * downloads; the file is dropped once the layer is stored (its pages usually never reach the disk).
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import * as fsp from "node:fs/promises";
import { errCode, ImageInvalidError, RegistryError } from "../../errors.js";
import { FileAppender } from "../store/appender.js";
import { sleep } from "../store/fsutil.js";
import { unpackError } from "../store/index.js";
import type { HttpAnswer } from "./http-get.js";
import type { Descriptor } from "./media.js";
import { backoffMs, type RegistryClient } from "./registry-client.js";

export interface DownloadOptions {
  what: string;
  /** Called with each new chunk's size (progress); bytes replayed from the file do not count. */
  onBytes?: (n: number) => void;
  /** Requests after a cut or stalled body, each continuing where the bytes end (default 5). */
  attempts?: number;
  /** A body that sends nothing for this long is cut and continued (default 60 s). */
  idleMs?: number;
  onResume?: (fromByte: number) => void;
}

interface Progress {
  hash: ReturnType<typeof createHash>;
  have: number;
}

/** One blob being downloaded into `path` (kept for a resume; deleted when the content turns out wrong). */
export class BlobDownload {
  private readonly p: Progress = { hash: createHash("sha256"), have: 0 };
  private digest?: string;

  constructor(
    private readonly client: RegistryClient,
    private readonly desc: Descriptor,
    private readonly path: string,
    private readonly o: DownloadOptions,
  ) {}

  /** The blob's bytes: what the file holds, then the rest from the registry; checked before the last one. */
  async *chunks(): AsyncGenerator<Buffer> {
    try {
      yield* replay(this.path, this.desc.size, this.p);
      if (this.p.have > 0 && this.p.have < this.desc.size) this.o.onResume?.(this.p.have);
      const out = new FileAppender(await fsp.open(this.path, "a", 0o600));
      try {
        yield* this.rest(out);
        await out.flush();
      } finally {
        await out.close();
      }
      const mismatch = this.mismatch();
      if (mismatch) throw mismatch;
    } catch (e) {
      if (errCode(e) === "ENOSPC" || e instanceof ImageInvalidError) {
        await fsp.rm(this.path, { force: true });
        throw unpackError(e, this.o.what);
      }
      throw e;
    }
  }

  /**
   * After the consumer refused the content midway: fetch and hash what it did not read (nothing is kept) and say
   * whether the blob is not what its digest says, the real cause then.
   */
  async explain(): Promise<Error | undefined> {
    for await (const _ of this.rest(undefined));
    return this.mismatch();
  }

  private mismatch(): ImageInvalidError | undefined {
    this.digest ??= `sha256:${this.p.hash.digest("hex")}`;
    if (this.digest === this.desc.digest) return undefined;
    return new ImageInvalidError(
      `${this.o.what}: the blob's content hashes to ${this.digest}, not to its digest ${this.desc.digest}`,
    );
  }

  private async *rest(out: FileAppender | undefined): AsyncGenerator<Buffer> {
    for (let attempt = 1; this.p.have < this.desc.size; attempt++) {
      if (attempt > (this.o.attempts ?? 5)) {
        throw new RegistryError(
          `${this.o.what}: the registry kept cutting the blob short (${this.p.have} of ${this.desc.size} bytes)`,
        );
      }
      if (attempt > 1) await sleep(backoffMs(attempt - 1));
      yield* fetchFrom(this.client, this.desc, out, this.p, this.o);
    }
  }
}

/** What an earlier attempt left in the file (nothing, if it is longer than the blob: then it is emptied). */
async function* replay(path: string, size: number, p: Progress): AsyncGenerator<Buffer> {
  const st = await fsp.stat(path).catch(() => undefined);
  if (!st) return;
  if (st.size > size) return void (await fsp.truncate(path, 0));
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
    p.hash.update(chunk);
    p.have += chunk.length;
    yield chunk;
  }
}

/**
 * One request from byte `p.have` on; a cut or stalled body just ends early (the caller asks again). A registry that
 * ignores the Range sends the blob from its start: the bytes we have are skipped (the digest still covers them).
 */
async function* fetchFrom(
  client: RegistryClient,
  desc: Descriptor,
  out: FileAppender | undefined,
  p: Progress,
  o: DownloadOptions,
): AsyncGenerator<Buffer> {
  const idle = new AbortController();
  const resume = p.have > 0;
  const res = await client.get(`blobs/${desc.digest}`, {
    what: o.what,
    ...(resume ? { range: `bytes=${p.have}-` } : {}),
    signal: idle.signal,
  });
  let skip = resume && !(res.status === 206 && rangeStart(res) === p.have) ? p.have : 0;
  const timer = setTimeout(() => idle.abort(), o.idleMs ?? 60_000);
  try {
    checkLength(res, desc.size - p.have + skip, o.what); // refused: the finally closes the connection
    for await (let chunk of res.body) {
      timer.refresh();
      if (skip > 0) {
        const n = Math.min(skip, chunk.length);
        skip -= n;
        chunk = chunk.subarray(n);
        if (chunk.length === 0) continue;
      }
      if (p.have + chunk.length > desc.size)
        throw new ImageInvalidError(`${o.what}: the registry sent more than the ${desc.size} bytes the manifest says`);
      await out?.append(chunk);
      p.hash.update(chunk);
      p.have += chunk.length;
      o.onBytes?.(chunk.length);
      yield chunk;
    }
  } catch (e) {
    if (e instanceof ImageInvalidError || errCode(e) === "ENOSPC") throw e;
    if (!isBodyCut(e)) throw e;
  } finally {
    clearTimeout(timer);
    idle.abort();
  }
}

/** The ways a body ends early: the connection cut or closed midway, our idle timer's abort. */
function isBodyCut(e: unknown): boolean {
  const name = (e as Error).name;
  const code = errCode(e);
  return name === "AbortError" || code === "ECONNRESET" || code === "ERR_STREAM_PREMATURE_CLOSE";
}

function rangeStart(res: HttpAnswer): number | undefined {
  const m = /^bytes (\d+)-/.exec(res.headers.get("content-range") ?? "");
  return m ? Number(m[1]) : undefined;
}

function checkLength(res: HttpAnswer, expected: number, what: string): void {
  const length = res.headers.get("content-length");
  if (length !== null && /^\d+$/.test(length) && Number(length) !== expected) {
    throw new ImageInvalidError(
      `${what}: the registry announces ${length} bytes where the manifest's size leaves ${expected}`,
    );
  }
}
