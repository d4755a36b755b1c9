/**
 * One image, from wherever it comes (a registry, an archive, a local tool), into the store: its config checked
 * against its manifest and the platform asked for, each layer the store lacks (by diff id) unpacked once, the root
 * filesystem flattened, then the record and its names. Layers the store has are neither read nor unpacked.
 */
import { createHash } from "node:crypto";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { DiskFullError, ImageInvalidError } from "../../errors.js";
import { mapLimit, sweepDeadScratch } from "../store/fsutil.js";
import {
  digestHex,
  ensureImageDirs,
  findImage,
  flattenImage,
  hasDiff,
  hasLayer,
  lockFile,
  readDiff,
  rootfsManifest,
  storeIds,
  summarizeManifest,
  writeBlob,
  writeImage,
  type DiffRecord,
  type ImageLayer,
  type ImagePlatform,
  type LayerManifest,
  type ImageRecord,
  type Store,
  type UnpackBudget,
} from "../store/index.js";
import { unpackStoredLayer } from "./layer-unpack.js";
import { parseImageConfig, type Descriptor, type ImageManifest } from "./media.js";
import { formatPlatform, platformMatches } from "./platform.js";

/** An image as a source offers it; `openLayer` is called only for layers the store lacks. */
export interface ImageInput {
  /** For messages and the record: a reference, an archive path. */
  source: string;
  manifest: ImageManifest;
  manifestBytes: Buffer;
  manifestDigest: string;
  configBytes: Buffer;
  /** The layer's bytes as stored, and what to do with what the source kept of them once the layer is settled. */
  openLayer(layer: Descriptor, index: number, onBytes: (n: number) => void): Promise<OpenedLayer>;
  /** Check each layer's bytes against its descriptor's digest while reading (a download has checked already). */
  verifyLayerDigests: boolean;
}

export interface OpenedLayer {
  stream: AsyncIterable<Buffer>;
  /**
   * Called once: "stored" just before the layer's record is made durable (a download can go: it is not synced to
   * disk for nothing), "invalid" when its content was refused, "interrupted" when anything else stopped it.
   */
  settle?: (outcome: "stored" | "invalid" | "interrupted") => Promise<void>;
  /**
   * After the layer's content was refused midway: the real cause if it is the source's (the rest of a downloaded
   * blob fetched and hashed: a corrupt tar may be a blob that is not what its digest says).
   */
  explain?: () => Promise<Error | undefined>;
}

export type ImageEvent =
  | { type: "layers"; total: number; missing: number; bytes: number }
  | { type: "bytes"; n: number }
  | { type: "layer"; index: number; diffId: string; stored: boolean; newObjects: number; newBytes: number }
  | { type: "flatten" }
  | { type: "retry"; what: string; attempt: number; waitMs: number; reason: string }
  | { type: "resume"; what: string; fromByte: number };

export interface StoreImageOptions {
  platform: ImagePlatform;
  refs: readonly string[];
  budget?: UnpackBudget;
  /** Layers fetched and unpacked at once (default 3). */
  jobs?: number;
  /** Layers of at least this many stored bytes are unpacked on a thread of their own (default 16 MiB). */
  unpackThreadMinBytes?: number;
  onEvent?: (e: ImageEvent) => void;
}

export interface LayerOutcome {
  diffId: string;
  /** false: the store had it (not read at all). */
  stored: boolean;
  newObjects: number;
  newBytes: number;
}

export interface StoreImageResult {
  image: ImageRecord;
  refs: string[];
  /** The store had this image already: nothing but its names was written. */
  cached: boolean;
  layers: LayerOutcome[];
  durationMs: number;
}

const sha256 = (b: Buffer): string => `sha256:${createHash("sha256").update(b).digest("hex")}`;

/** Store `input` under `opts.refs`; takes the store's lock (shared) for the whole time. */
export async function storeImage(store: Store, input: ImageInput, opts: StoreImageOptions): Promise<StoreImageResult> {
  const started = performance.now();
  const { manifest } = input;
  const what = `image ${input.source}`;
  if (sha256(input.configBytes) !== manifest.config.digest || input.configBytes.length !== manifest.config.size)
    throw new ImageInvalidError(`${what}: its config does not match the digest and size its manifest gives`);
  const config = parseImageConfig(input.configBytes, `${what}: config`);
  if (!platformMatches(config.platform, opts.platform)) {
    throw new ImageInvalidError(
      `${what} is ${formatPlatform(config.platform)}, not ${formatPlatform(opts.platform)} (see --platform)`,
    );
  }
  if (config.diffIds.length !== manifest.layers.length)
    throw new ImageInvalidError(`${what}: ${manifest.layers.length} layers but ${config.diffIds.length} diff ids`);
  const lock = await lockFile(store.lockPath, { shared: true });
  try {
    ensureImageDirs(store);
    storeIds(store);
    await sweepDeadScratch(store.tmpDir);
    const id = manifest.config.digest;
    const existing = await findImage(store, id);
    if (existing && (await hasLayer(store, existing.rootfs))) {
      await writeImage(store, existing, opts.refs);
      const layers = existing.layers.map((l) => ({ diffId: l.diffId, stored: false, newObjects: 0, newBytes: 0 }));
      return { image: existing, refs: [...opts.refs], cached: true, layers, durationMs: performance.now() - started };
    }
    const ahead = new RootfsAhead(store, config.diffIds);
    const layers = await storeLayers(store, input, config.diffIds, { ...opts, ahead });
    opts.onEvent?.({ type: "flatten" });
    const rootfs = await flattenImage(store, config.diffIds, await ahead.manifest());
    await writeBlob(store, input.manifestDigest, input.manifestBytes);
    await writeBlob(store, id, input.configBytes);
    const record: ImageRecord = {
      format: 1,
      id,
      manifestDigest: input.manifestDigest,
      platform: config.platform,
      config: config.config,
      layers: manifest.layers.map((l, i): ImageLayer => ({ ...descriptorOf(l), diffId: config.diffIds[i]! })),
      rootfs: rootfs.key,
      sizes: {
        rootfsBytes: summarizeManifest(rootfs.manifest).logicalBytes,
        layersBytes: manifest.layers.reduce((n, l) => n + l.size, 0),
      },
      ...(config.created ? { created: config.created } : {}),
      source: input.source,
      storedAt: new Date().toISOString(),
    };
    await writeImage(store, record, opts.refs);
    return { image: record, refs: [...opts.refs], cached: false, layers, durationMs: performance.now() - started };
  } finally {
    await lock.release();
  }
}

function descriptorOf(d: Descriptor): Omit<ImageLayer, "diffId"> {
  return { digest: d.digest, mediaType: d.mediaType, size: d.size };
}

/** Each layer the store lacks, `jobs` at a time, each under its own lock (one unpack per layer across processes). */
async function storeLayers(
  store: Store,
  input: ImageInput,
  diffIds: string[],
  opts: LayerOptions,
): Promise<LayerOutcome[]> {
  const present = await Promise.all(diffIds.map((d) => hasDiff(store, d)));
  opts.ahead.read(diffIds.filter((_, i) => present[i]));
  const missing = input.manifest.layers.filter((_, i) => !present[i]);
  opts.onEvent?.({ type: "layers", total: diffIds.length, missing: missing.length, bytes: sum(missing) });
  const outcomes: LayerOutcome[] = diffIds.map((diffId) => ({ diffId, stored: false, newObjects: 0, newBytes: 0 }));
  const todo = diffIds.map((_, i) => i).filter((i) => !present[i]);
  await mapLimit(todo, opts.jobs ?? 3, async (i) => {
    const diffId = diffIds[i]!;
    const lock = await lockFile(join(ensureImageDirs(store).locks, `${digestHex(diffId)}.lock`));
    try {
      if (!(await hasDiff(store, diffId))) outcomes[i] = await storeLayer(store, input, i, diffId, opts);
    } finally {
      await lock.release();
    }
    opts.onEvent?.({ type: "layer", index: i, ...outcomes[i]! });
  });
  return outcomes;
}

async function storeLayer(
  store: Store,
  input: ImageInput,
  i: number,
  diffId: string,
  opts: LayerOptions,
): Promise<LayerOutcome> {
  const desc = input.manifest.layers[i]!;
  const what = `layer ${i + 1}/${input.manifest.layers.length} of ${input.source} (${desc.digest.slice(0, 19)})`;
  const opened = await input.openLayer(desc, i, (n) => opts.onEvent?.({ type: "bytes", n }));
  let settled = false;
  const settle = async (outcome: "stored" | "invalid" | "interrupted"): Promise<void> => {
    if (!settled) await opened.settle?.(outcome);
    settled = true;
  };
  try {
    // A download has hashed its bytes already: hashing them twice would cost as much as the diff id's hash.
    const r = await unpackStoredLayer(store, diffId, opened.stream, {
      what,
      budget: opts.budget,
      expect: input.verifyLayerDigests ? { digest: desc.digest, size: desc.size } : undefined,
      size: desc.size,
      threadMinBytes: opts.unpackThreadMinBytes,
      beforeRecord: () => settle("stored"),
      whileSyncing: (record) => opts.ahead.recorded(record),
    });
    return { diffId, stored: true, newObjects: r.newObjects, newBytes: r.newBytes };
  } catch (e) {
    const invalid = e instanceof ImageInvalidError || e instanceof DiskFullError;
    const cause = e instanceof ImageInvalidError ? await opened.explain?.().catch(() => undefined) : undefined;
    await settle(invalid ? "invalid" : "interrupted");
    throw cause ?? e;
  }
}

interface LayerOptions extends StoreImageOptions {
  ahead: RootfsAhead;
}

/**
 * The root filesystem's manifest made while the last new layer's objects are synced (the disk is waited for, the
 * processor is free), from the records of the layers present, read while the new ones download.
 */
class RootfsAhead {
  private readonly records = new Map<string, DiffRecord>();
  private reading: Promise<void> = Promise.resolve();
  private made: Promise<LayerManifest> | undefined;

  constructor(
    private readonly store: Store,
    private readonly diffIds: readonly string[],
  ) {}

  read(present: readonly string[]): void {
    const read = async (d: string) => void this.records.set(d, await readDiff(this.store, d));
    // A record that cannot be read now is read (and its error given) by the flatten itself.
    this.reading = Promise.all(present.map(read)).then(
      () => undefined,
      () => undefined,
    );
  }

  /** A layer's verified record: once every layer has one, the manifest is made now. */
  async recorded(record: DiffRecord): Promise<void> {
    this.records.set(record.diffId, record);
    await this.reading;
    if (this.made || !this.diffIds.every((d) => this.records.has(d))) return;
    this.made = rootfsManifest(this.store, this.diffIds, this.records);
    await this.made.catch(() => undefined);
  }

  /** What was made ahead; undefined when nothing was, or it failed (the flatten then says why). */
  async manifest(): Promise<LayerManifest | undefined> {
    return this.made?.catch(() => undefined);
  }
}

function sum(layers: Descriptor[]): number {
  return layers.reduce((n, l) => n + l.size, 0);
}
