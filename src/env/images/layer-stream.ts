/**
 * A layer's bytes as stored (tar, gzip or zstd: recognised by their magic bytes, whatever the media type claims)
 * -> the uncompressed tar stream, with the stored bytes hashed on the way when their digest is to be checked.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { Readable, type TransformOptions } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, type ZlibOptions } from "node:zlib";
import { ImageInvalidError } from "../../errors.js";

export type Compression = "gzip" | "zstd" | "none";

function sniff(head: Buffer): Compression {
  if (head[0] === 0x1f && head[1] === 0x8b) return "gzip";
  if (head.readUInt32LE(0) === 0xfd2fb528) return "zstd";
  return "none";
}

/** The source again, with its first bytes looked at (at least 4, unless it is shorter). */
async function peek(source: AsyncIterable<Buffer>): Promise<{ head: Buffer; rest: AsyncIterable<Buffer> }> {
  const it = source[Symbol.asyncIterator]();
  const parts: Buffer[] = [];
  let n = 0;
  while (n < 4) {
    const r = await it.next();
    if (r.done) break;
    parts.push(r.value);
    n += r.value.length;
  }
  const head = Buffer.concat(parts);
  const rest = (async function* () {
    try {
      if (head.length > 0) yield head;
      for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
    } finally {
      await it.return?.(); // stopping early stops the source too (a download closes its file)
    }
  })();
  return { head, rest };
}

/** Decompressed chunks of a layer. Stopping early (an error downstream) stops the decompressor too. */
export async function* decompress(source: AsyncIterable<Buffer>, what: string): AsyncGenerator<Buffer> {
  const { head, rest } = await peek(source);
  const kind = head.length >= 4 ? sniff(head) : "none";
  if (kind === "none") {
    yield* rest;
    return;
  }
  if (kind === "gzip") yield* gunzip(coalesced(rest, GUNZIP_CHUNK_BYTES), what);
  else yield* unzstd(rest, what);
}

/** The source's chunks gathered into chunks of at least `bytes` (the last one may be shorter). */
async function* coalesced(source: AsyncIterable<Buffer>, bytes: number): AsyncGenerator<Buffer> {
  let parts: Buffer[] = [];
  let n = 0;
  for await (const chunk of source) {
    parts.push(chunk);
    n += chunk.length;
    if (n < bytes) continue;
    yield parts.length === 1 ? parts[0]! : Buffer.concat(parts, n);
    parts = [];
    n = 0;
  }
  if (n > 0) yield Buffer.concat(parts, n);
}

/**
 * Input and output chunks of 1 MiB: zlib answers each write (64 KiB from the network) with an output chunk of its
 * own, at most 16 KiB by default; a layer of 250 MB would be sixteen thousand thread-pool round trips and as many
 * buffers for every stage after it (4x the time of the inflating itself).
 */
const GUNZIP_CHUNK_BYTES = 1 << 20;

async function* gunzip(source: AsyncIterable<Buffer>, what: string): AsyncGenerator<Buffer> {
  const input = Readable.from(source);
  // Up to 8 MiB inflated ahead: zlib (thread pool) works while the tar reader, on the main thread, does too.
  const options: ZlibOptions & TransformOptions = {
    chunkSize: GUNZIP_CHUNK_BYTES,
    readableHighWaterMark: 8 * GUNZIP_CHUNK_BYTES,
  };
  const z = createGunzip(options);
  const piped = pipeline(input, z).catch(() => undefined); // errors surface on z's iterator
  try {
    for await (const chunk of z) yield chunk as Buffer;
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && code.startsWith("Z_"))
      throw new ImageInvalidError(`${what}: corrupt gzip data (${(e as Error).message})`);
    throw e;
  } finally {
    input.destroy();
    z.destroy();
    await piped;
  }
}

async function* unzstd(source: AsyncIterable<Buffer>, what: string): AsyncGenerator<Buffer> {
  const child = spawn("zstd", ["-dcq"], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (b: Buffer) => (stderr = (stderr + b.toString()).slice(-500)));
  const exited = new Promise<number | null>((r) => child.once("close", (code) => r(code)));
  const spawned = new Promise<void>((resolve, reject) => {
    child.once("spawn", resolve);
    child.once("error", (e) => reject(new Error(`cannot run zstd (install it): ${e.message}`)));
  });
  await spawned;
  const feeding = pipeline(Readable.from(source), child.stdin).catch(() => undefined);
  let complete = false;
  try {
    for await (const chunk of child.stdout) yield chunk as Buffer;
    const code = await exited;
    if (code !== 0) throw new ImageInvalidError(`${what}: corrupt zstd data (${stderr.trim() || `exit ${code}`})`);
    complete = true;
  } finally {
    if (!complete) child.kill("SIGKILL");
    await feeding;
    await exited;
  }
}

/** The source, with a sha256 and a byte count of what passed; `onBytes` sees each chunk's size. */
export function measured(
  source: AsyncIterable<Buffer>,
  onBytes?: (n: number) => void,
): { stream: AsyncIterable<Buffer>; digest: () => string; bytes: () => number } {
  const hash = createHash("sha256");
  let bytes = 0;
  const stream = (async function* () {
    for await (const chunk of source) {
      hash.update(chunk);
      bytes += chunk.length;
      onBytes?.(chunk.length);
      yield chunk;
    }
  })();
  return { stream, digest: () => `sha256:${hash.digest("hex")}`, bytes: () => bytes };
}
