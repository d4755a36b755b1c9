/**
 * A peer's store over HTTP (`minisandbox serve`'s /store routes): pull one layer by fetching its manifest, then only
 * the objects the local store lacks, in batches, each verified against its hash before it is placed; the manifest
 * is written last. Or fetch a whole pack and import it (every entry validated, as for any pack).
 */
import { createHash } from "node:crypto";
import { createReadStream, readFileSync, statSync } from "node:fs";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { InvalidInputError, NotFoundError, StoreCorruptError } from "../../errors.js";
import type { LayerKey } from "../types.js";
import { mapLimit, scratchName, yielder } from "./fsutil.js";
import { assertLayerKey, objectHash, objectPath, type ObjectId, type Store } from "./layout.js";
import { parseManifest } from "./manifest.js";
import { objectWriter, type ObjectWriter } from "./object-writer.js";
import { placeObject, SMALL_FILE_BYTES, writeHashed } from "./objects.js";
import { importPack, type ImportResult } from "./pack.js";
import { type PullResult, pullMissing } from "./remote.js";

/** Another node's server. `manifestSha256`, when known, is what the layer's manifest must hash to. */
export interface HttpSource {
  url: string;
  token?: string;
  manifestSha256?: string;
}

export interface HttpPullOptions {
  /** Awaited before writing each chunk (the node cache's I/O budget). */
  throttle?: (bytes: number) => Promise<void>;
  /** Batches in flight at once (default 2). */
  concurrency?: number;
  /** Objects per request at most (default 512; the server takes up to `MAX_OBJECTS_PER_REQUEST`). */
  batchObjects?: number;
  /** From this many small objects on, they are placed by a thread of their own (default 64; see object-writer). */
  threadMinObjects?: number;
  /** Bytes per request at most, unless one object is larger (default 64 MiB). */
  batchBytes?: number;
  /** Deadline of one request, answer included (default 10 minutes). */
  timeoutMs?: number;
  replace?: boolean;
}

/** What `POST /store/objects` accepts in one request. */
export const MAX_OBJECTS_PER_REQUEST = 1024;
const MAX_MANIFEST_BYTES = 256 << 20;

/** `http(s)://host[:port]` plus an optional path prefix, without credentials, query or fragment. */
export function sourceBase(url: string): URL {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new InvalidInputError(`source ${JSON.stringify(url)} is not a URL`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:")
    throw new InvalidInputError(`source ${u.origin}: only http and https sources are supported`);
  if (u.username || u.password || u.search || u.hash)
    throw new InvalidInputError(`source ${u.origin}: no credentials, query or fragment in a source URL`);
  return u;
}

function endpoint(source: HttpSource, path: string): string {
  return `${sourceBase(source.url).href.replace(/\/+$/, "")}${path}`;
}

/**
 * One request to a peer: never follows redirects (a source may only be the server it names), its token sent to that
 * origin only (`X-API-Key`).
 */
export async function peerRequest(
  source: HttpSource,
  path: string,
  init: RequestInit,
  timeoutMs: number,
): Promise<Response> {
  const headers: Record<string, string> = { ...(init.headers as Record<string, string> | undefined) };
  if (source.token) headers["X-API-Key"] = source.token;
  const where = `${sourceBase(source.url).origin}${path.split("?")[0]}`;
  let res: Response;
  try {
    res = await fetch(endpoint(source, path), {
      ...init,
      headers,
      redirect: "error",
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (e) {
    throw new Error(`${where}: ${(e as Error).cause ? String((e as Error).cause) : (e as Error).message}`);
  }
  if (res.ok) return res;
  const text = (await res.text().catch(() => "")).slice(0, 300);
  if (res.status === 404) throw new NotFoundError(`${where}: not found (${text})`);
  throw new Error(`${where}: HTTP ${res.status} ${text}`);
}

/**
 * The answer to `POST /store/objects`: the objects' bytes concatenated in the order asked, and their total (the
 * content length). NotFoundError names the first object the store lacks. Small objects are read whole and
 * synchronously (yielding to the event loop every few milliseconds), large ones streamed.
 */
export function objectsAnswer(store: Store, ids: readonly ObjectId[]): { bytes: number; stream: Readable } {
  const objects = ids.map((id) => {
    const st = statSync(objectPath(store, id), { throwIfNoEntry: false });
    if (!st?.isFile()) throw new NotFoundError(`object ${id} is not in this node's store`);
    return { path: objectPath(store, id), size: st.size };
  });
  async function* concatenated(): AsyncGenerator<Buffer> {
    const pause = yielder();
    for (const o of objects) {
      if (o.size > SMALL_FILE_BYTES) for await (const chunk of createReadStream(o.path)) yield chunk as Buffer;
      else yield readFileSync(o.path);
      await pause();
    }
  }
  return { bytes: objects.reduce((n, o) => n + o.size, 0), stream: Readable.from(concatenated()) };
}

/** Reads a byte stream in pieces of a requested size at most. */
class ChunkReader {
  private carry: Buffer = Buffer.alloc(0);
  constructor(private readonly it: AsyncIterator<Buffer>) {}

  async read(max: number): Promise<Buffer | null> {
    if (this.carry.length === 0) {
      const next = await this.it.next();
      if (next.done) return null;
      const v = next.value;
      this.carry = Buffer.from(v.buffer, v.byteOffset, v.byteLength); // a view, not a copy
    }
    const out = this.carry.subarray(0, max);
    this.carry = this.carry.subarray(out.length);
    return out;
  }

  /** Exactly `n` bytes as one buffer (for objects small enough to hold whole); a stream that ends early is an error. */
  async readExactly(n: number, what: string): Promise<Buffer> {
    if (this.carry.length >= n) {
      const out = this.carry.subarray(0, n);
      this.carry = this.carry.subarray(n);
      return out;
    }
    const parts: Buffer[] = [];
    for await (const b of this.take(n, what)) parts.push(b);
    return Buffer.concat(parts, n);
  }

  /** Exactly `n` bytes, as chunks; a stream that ends early is an error. */
  async *take(n: number, what: string): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      const b = await this.read(left);
      if (!b) throw new StoreCorruptError(`${what}: the answer ended early`);
      left -= b.length;
      yield b;
    }
  }
}

function batches(missing: [ObjectId, number][], maxObjects: number, maxBytes: number): [ObjectId, number][][] {
  const out: [ObjectId, number][][] = [];
  let cur: [ObjectId, number][] = [];
  let bytes = 0;
  for (const item of missing) {
    if (cur.length > 0 && (cur.length >= maxObjects || bytes + item[1] > maxBytes)) {
      out.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(item);
    bytes += item[1];
  }
  if (cur.length > 0) out.push(cur);
  return out;
}

/** Copy layer `key` from a peer's server into `local`: only missing objects move, each verified by its hash. */
export async function pullLayerHttp(
  local: Store,
  source: HttpSource,
  key: LayerKey,
  opts: HttpPullOptions = {},
): Promise<PullResult> {
  assertLayerKey(key);
  const timeoutMs = opts.timeoutMs ?? 600_000;
  const origin = sourceBase(source.url).origin;
  const res = await peerRequest(source, `/store/layers/${key}/manifest`, {}, timeoutMs);
  const bytes = Buffer.from(await res.arrayBuffer());
  if (bytes.length > MAX_MANIFEST_BYTES)
    throw new StoreCorruptError(`${origin}: manifest of ${key} is larger than ${MAX_MANIFEST_BYTES} bytes`);
  const digest = createHash("sha256").update(bytes).digest("hex");
  if (source.manifestSha256 && digest !== source.manifestSha256)
    throw new StoreCorruptError(`${origin}: manifest of ${key} hashes to ${digest}, expected ${source.manifestSha256}`);
  let manifest: ReturnType<typeof parseManifest>;
  try {
    manifest = parseManifest(bytes.toString("utf8"), key);
  } catch (e) {
    throw new StoreCorruptError(`${origin}: manifest of ${key} is invalid: ${(e as Error).message}`);
  }
  return pullMissing(local, manifest, opts.replace ?? false, (missing, result) =>
    fetchObjectsHttp(local, source, missing, result, opts, `layer ${key}`),
  );
}

/**
 * Bring `missing` objects (id, size) from a peer into `local`, in batches, each hashed on arrival before it is
 * placed; counted in `result`. `what` names what they belong to, for messages. The caller holds the store lock.
 */
export async function fetchObjectsHttp(
  local: Store,
  source: HttpSource,
  missing: [ObjectId, number][],
  result: { objectsFetched: number; bytesFetched: number },
  opts: HttpPullOptions,
  what: string,
): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 600_000;
  const maxObjects = Math.min(opts.batchObjects ?? 512, MAX_OBJECTS_PER_REQUEST);
  const groups = batches(missing, maxObjects, opts.batchBytes ?? 64 << 20);
  const small = missing.filter(([, size]) => size <= SMALL_FILE_BYTES).length;
  const writes = objectWriter(local, small, opts.threadMinObjects);
  try {
    await mapLimit(groups, opts.concurrency ?? 2, (group) =>
      fetchBatch(local, source, group, writes, result, { ...opts, timeoutMs, what }),
    );
    await writes.finish();
  } finally {
    writes.abort();
  }
}

/** One request's objects, in the order asked: each verified, then placed (small ones by `writes`). */
async function fetchBatch(
  local: Store,
  source: HttpSource,
  group: [ObjectId, number][],
  writes: ObjectWriter,
  result: { objectsFetched: number; bytesFetched: number },
  opts: HttpPullOptions & { timeoutMs: number; what: string },
): Promise<void> {
  const { timeoutMs, what } = opts;
  const origin = sourceBase(source.url).origin;
  const body = JSON.stringify({ ids: group.map(([id]) => id) });
  const answer = await peerRequest(
    source,
    "/store/objects",
    { method: "POST", body, headers: { "content-type": "application/json" } },
    timeoutMs,
  );
  if (!answer.body) throw new StoreCorruptError(`${origin}: objects of ${what}: empty answer`);
  const reader = new ChunkReader(
    Readable.fromWeb(answer.body as import("node:stream/web").ReadableStream)[Symbol.asyncIterator](),
  );
  for (const [id, size] of group) {
    await receiveObject(local, reader, writes, id, size, {
      what: `${origin}: object ${id}`,
      mismatch: () => new StoreCorruptError(`${origin}: object ${id} of ${what} does not match its hash`),
      throttle: opts.throttle,
    });
    result.objectsFetched++;
    result.bytesFetched += size;
  }
  if (await reader.read(1)) throw new StoreCorruptError(`${origin}: objects of ${what}: more bytes than asked for`);
}

/**
 * Take the next object of an answer into the store, verified before it is placed: a small one whole, handed to
 * `writes` (which hashes and places it while the next ones arrive); a large one streamed to a scratch file.
 */
async function receiveObject(
  local: Store,
  reader: ChunkReader,
  writes: ObjectWriter,
  id: ObjectId,
  size: number,
  o: { what: string; mismatch: () => Error; throttle?: (bytes: number) => Promise<void> },
): Promise<void> {
  if (size <= SMALL_FILE_BYTES) {
    const data = await reader.readExactly(size, o.what);
    if (o.throttle) await o.throttle(size);
    await writes.put(id, data, o.mismatch);
    return;
  }
  const tmp = join(local.tmpDir, scratchName("obj"));
  const got = await writeHashed(reader.take(size, o.what), tmp, o.throttle);
  if (objectHash(id) !== got.hex) {
    await fsp.rm(tmp, { force: true });
    throw o.mismatch();
  }
  placeObject(local, tmp, id);
}

/** Fetch layer `key` from a peer's server as one pack and import it (the pack is validated entry by entry). */
export async function fetchPackHttp(
  local: Store,
  source: HttpSource,
  key: LayerKey,
  opts: Pick<HttpPullOptions, "timeoutMs" | "replace" | "throttle"> = {},
): Promise<ImportResult & { packBytes: number }> {
  assertLayerKey(key);
  const res = await peerRequest(source, `/store/layers/${key}/pack`, {}, opts.timeoutMs ?? 600_000);
  if (!res.body) throw new StoreCorruptError(`${sourceBase(source.url).origin}: pack of ${key}: empty answer`);
  const file = join(local.tmpDir, scratchName("pack"));
  try {
    const stream = Readable.fromWeb(res.body as import("node:stream/web").ReadableStream);
    const { size } = await writeHashed(stream, file, opts.throttle);
    const imported = await importPack(local, file, { replace: opts.replace });
    return { ...imported, packBytes: size };
  } finally {
    await fsp.rm(file, { force: true });
  }
}
