/**
 * An image taken from a peer's store (another node's `minisandbox serve`, its /store routes) instead of its
 * registry: the record, its manifest and config, the diff records of the layers this store lacks, then only the
 * objects it lacks. Everything is checked before the store trusts it: the config by the image id (its digest), the
 * manifest by the record's digest and against the config, the record rebuilt here from those two (the peer's must
 * agree), each diff record against the rules of an unpack (`checkDiffRecord`), the root filesystem flattened here
 * from them, each object by its hash. Nothing the store keeps is written before all of that passed: what a failed
 * fetch leaves is verified objects no record names (gc removes them).
 */
import { createHash } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { ImageInvalidError, LayerUnavailableError, NotFoundError } from "../../errors.js";
import { mapLimit, sweepDeadScratch, syncFiles } from "../store/fsutil.js";
import { hasObjectSync } from "../store/objects.js";
import {
  checkDiffRecord,
  diffObjects,
  DIGEST_RE,
  ensureImageDirs,
  fetchObjectsHttp,
  findImage,
  flattenImage,
  hasDiff,
  hasLayer,
  lockFile,
  objectPath,
  peerRequest,
  readDiff,
  rootfsKey,
  rootfsManifest,
  sourceBase,
  storeIds,
  summarizeManifest,
  writeBlob,
  writeDiff,
  writeImage,
  type DiffRecord,
  type HttpPullOptions,
  type HttpSource,
  type ImagePlatform,
  type ImageRecord,
  type LayerManifest,
  type ObjectId,
  type Store,
} from "../store/index.js";
import { MAX_CONFIG_BYTES, MAX_MANIFEST_BYTES, parseImageConfig, parseManifestDocument } from "./media.js";
import { DEFAULT_PLATFORM, formatPlatform, platformMatches } from "./platform.js";
import { canonicalReference } from "./reference.js";

export interface PeerImageOptions extends HttpPullOptions {
  platform?: ImagePlatform;
}

export interface PeerImageResult {
  image: ImageRecord;
  /** The name written (the canonical reference asked for). */
  ref: string;
  /** The store had the image already: only its name was written. */
  cached: boolean;
  from: string;
  diffsFetched: number;
  objectsFetched: number;
  bytesFetched: number;
  objectsPresent: number;
}

const MAX_RECORD_BYTES = 4 << 20;
const MAX_DIFF_BYTES = 512 << 20;
const sha256 = (b: Buffer): string => `sha256:${createHash("sha256").update(b).digest("hex")}`;

/** A peer's answer, refused as soon as it passes `max` bytes. */
async function bounded(res: Response, max: number, what: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  if (res.body)
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      n += chunk.length;
      if (n > max) {
        await res.body.cancel().catch(() => undefined);
        throw new ImageInvalidError(`${what}: the answer is larger than ${max} bytes`);
      }
      parts.push(Buffer.from(chunk));
    }
  return Buffer.concat(parts);
}

async function get(source: HttpSource, path: string, max: number, what: string, timeoutMs: number): Promise<Buffer> {
  return bounded(await peerRequest(source, path, {}, timeoutMs), max, what);
}

/** The record the peer keeps for `ref`, only as far as its form goes (what it says is checked later). */
function peerRecord(bytes: Buffer, from: string, ref: string): ImageRecord {
  let doc: { record?: ImageRecord };
  try {
    doc = JSON.parse(bytes.toString("utf8")) as { record?: ImageRecord };
  } catch {
    throw new ImageInvalidError(`${from}: image ${ref}: its record is not JSON`);
  }
  const r = doc.record;
  if (r?.format !== 1 || !DIGEST_RE.test(String(r.id)) || !DIGEST_RE.test(String(r.manifestDigest)))
    throw new ImageInvalidError(`${from}: image ${ref}: its record is malformed (format, id or manifest digest)`);
  if (!Array.isArray(r.layers) || r.layers.some((l) => !DIGEST_RE.test(String(l?.diffId))))
    throw new ImageInvalidError(`${from}: image ${ref}: its record is malformed (layers)`);
  return r;
}

/**
 * The record this store keeps, made from the verified manifest and config alone; the peer's must say the same of
 * everything they determine (else its record disagrees: refused).
 */
function rebuiltRecord(
  peer: ImageRecord,
  manifestBytes: Buffer,
  configBytes: Buffer,
  o: { from: string; ref: string; platform: ImagePlatform },
): { record: Omit<ImageRecord, "sizes" | "storedAt">; diffIds: string[] } {
  const what = `${o.from}: image ${o.ref}`;
  const doc = parseManifestDocument(manifestBytes, undefined, `${what}: manifest`);
  if (doc.kind !== "manifest") throw new ImageInvalidError(`${what}: its manifest is an index`);
  const manifest = doc.manifest;
  if (manifest.config.digest !== peer.id || manifest.config.size !== configBytes.length)
    throw new ImageInvalidError(`${what}: its manifest names another config than the image id`);
  const config = parseImageConfig(configBytes, `${what}: config`);
  if (!platformMatches(config.platform, o.platform))
    throw new ImageInvalidError(`${what} is ${formatPlatform(config.platform)}, not ${formatPlatform(o.platform)}`);
  if (config.diffIds.length !== manifest.layers.length)
    throw new ImageInvalidError(`${what}: ${manifest.layers.length} layers but ${config.diffIds.length} diff ids`);
  const record = {
    format: 1 as const,
    id: peer.id,
    manifestDigest: peer.manifestDigest,
    platform: config.platform,
    config: config.config,
    layers: manifest.layers.map((l, i) => ({
      digest: l.digest,
      mediaType: l.mediaType,
      size: l.size,
      diffId: config.diffIds[i]!,
    })),
    rootfs: rootfsKey(config.diffIds),
    ...(config.created ? { created: config.created } : {}),
    source: typeof peer.source === "string" ? peer.source.slice(0, 1000) : o.ref,
    peer: o.from,
  };
  for (const field of ["platform", "config", "layers", "rootfs", "created"] as const) {
    if (!isDeepStrictEqual(peer[field], record[field]))
      throw new ImageInvalidError(`${what}: its record disagrees with its config and manifest (${field})`);
  }
  return { record, diffIds: config.diffIds };
}

/**
 * Take image `name` from the peer `source` into `store` (under the canonical reference of `name`). `NotFoundError`
 * when the peer lacks it; `ImageInvalidError` / `StoreCorruptError` when what it sent is not what it claims.
 */
export async function fetchImageHttp(
  store: Store,
  source: HttpSource,
  name: string,
  opts: PeerImageOptions = {},
): Promise<PeerImageResult> {
  const ref = canonicalReference(name);
  const from = sourceBase(source.url).origin;
  const timeoutMs = opts.timeoutMs ?? 600_000;
  const platform = opts.platform ?? DEFAULT_PLATFORM;
  const what = `${from}: image ${ref}`;
  const peer = peerRecord(
    await get(source, `/store/images/record?name=${encodeURIComponent(ref)}`, MAX_RECORD_BYTES, what, timeoutMs),
    from,
    ref,
  );
  const result = { ref, from, diffsFetched: 0, objectsFetched: 0, bytesFetched: 0, objectsPresent: 0 };
  const have = await findImage(store, peer.id);
  if (have && (await hasLayer(store, have.rootfs))) {
    await writeImage(store, have, [ref]);
    return { ...result, image: have, cached: true };
  }
  const blob = (digest: string, max: number): Promise<Buffer> =>
    get(source, `/store/images/blobs/${digest}`, max, `${what}: blob ${digest}`, timeoutMs);
  const configBytes = await blob(peer.id, MAX_CONFIG_BYTES);
  const manifestBytes = await blob(peer.manifestDigest, MAX_MANIFEST_BYTES);
  if (sha256(configBytes) !== peer.id) throw new ImageInvalidError(`${what}: its config does not hash to the image id`);
  if (sha256(manifestBytes) !== peer.manifestDigest)
    throw new ImageInvalidError(`${what}: its manifest does not hash to the digest its record gives`);
  const { record, diffIds } = rebuiltRecord(peer, manifestBytes, configBytes, { from, ref, platform });

  const lock = await lockFile(store.lockPath, { shared: true });
  try {
    ensureImageDirs(store);
    storeIds(store);
    await sweepDeadScratch(store.tmpDir);
    const fetched = await takeLayers(store, source, diffIds, result, { ...opts, timeoutMs, what, from, ref });
    await writeBlob(store, peer.manifestDigest, manifestBytes);
    await writeBlob(store, peer.id, configBytes);
    const flat = await flattenImage(store, diffIds, fetched.rootfs);
    const image: ImageRecord = {
      ...record,
      sizes: {
        rootfsBytes: summarizeManifest(flat.manifest).logicalBytes,
        layersBytes: record.layers.reduce((n, l) => n + l.size, 0),
      },
      storedAt: new Date().toISOString(),
    };
    await writeImage(store, image, [ref]);
    return { ...result, image, cached: false };
  } finally {
    await lock.release();
  }
}

/**
 * The layers' diff records this store lacks, checked, the root filesystem flattened from them in memory (a record
 * that cannot make one is refused before a single object moves), then the objects it lacks; the records are written
 * once every object is synced. The caller holds the store lock.
 */
async function takeLayers(
  store: Store,
  source: HttpSource,
  diffIds: readonly string[],
  result: { diffsFetched: number; objectsFetched: number; bytesFetched: number; objectsPresent: number },
  o: PeerImageOptions & { timeoutMs: number; what: string; from: string; ref: string },
): Promise<{ rootfs: LayerManifest }> {
  const records = new Map<string, DiffRecord>();
  const fetched: DiffRecord[] = [];
  await mapLimit([...new Set(diffIds)], 4, async (diffId) => {
    if (await hasDiff(store, diffId)) return void records.set(diffId, await readDiff(store, diffId));
    const bytes = await get(source, `/store/images/diffs/${diffId}`, MAX_DIFF_BYTES, `${o.what}: layer`, o.timeoutMs);
    const diff = checkDiffRecord(bytes, diffId, o.from);
    records.set(diffId, diff);
    fetched.push(diff);
  });
  const rootfs = await rootfsManifest(store, diffIds, records).catch((e: unknown) => {
    throw new ImageInvalidError(`${o.what}: its layers do not make a root filesystem: ${(e as Error).message}`);
  });
  const missing: [ObjectId, number][] = [];
  for (const [id, size] of diffObjects(records.values())) {
    if (hasObjectSync(store, id, size)) result.objectsPresent++;
    else missing.push([id, size]);
  }
  await fetchObjectsHttp(store, source, missing, result, o, `image ${o.ref}`);
  await syncFiles(
    missing.map(([id]) => objectPath(store, id)),
    store.objectsDir,
  );
  for (const diff of fetched) if (!(await hasDiff(store, diff.diffId))) await writeDiff(store, diff);
  result.diffsFetched = fetched.length;
  return { rootfs };
}

/** The first source that has the image and sends what it claims; every source's failure, in order, when none did. */
export async function fetchImageFromPeers(
  store: Store,
  sources: readonly HttpSource[],
  name: string,
  opts: PeerImageOptions = {},
): Promise<PeerImageResult> {
  const failures: string[] = [];
  for (const source of sources) {
    try {
      return await fetchImageHttp(store, source, name, opts);
    } catch (e) {
      failures.push(e instanceof NotFoundError ? `${sourceBase(source.url).origin}: not there` : (e as Error).message);
    }
  }
  throw new LayerUnavailableError(`image ${name}: no peer could give it (${failures.join("; ") || "no peers"})`);
}
