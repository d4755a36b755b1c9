/**
 * The node cache: layers materialized once on this machine, read-only, shared by every sandbox here.
 *
 *   layers/<key>/<tree>/…   materialized layer (placed by an atomic rename, so it is complete or absent)
 *   images/<key>/           a layer's metadata image (layer.erofs) and meta.json, placed the same way
 *   meta/<key>.json         size and trees; its mtime is the layer's last use (LRU)
 *   leases/<key>/lease-…    one file per acquire() not yet released (in-use tracking)
 *   locks/<key>.lock        flock: one materialization per layer across processes; io-slot-N.lock: I/O budget
 *   evicting/<key>          marker while a layer is being evicted (see evictOne for the protocol)
 *   tmp/, trash/            in-flight materializations and layers being deleted
 */
import { EventEmitter } from "node:events";
import { appendFileSync, mkdirSync } from "node:fs";
import * as fsp from "node:fs/promises";
import { basename, join } from "node:path";
import { errCode, errMessage, LayerUnavailableError, NotFoundError, TimeoutError } from "../../errors.js";
import { homeLayout } from "../../util/home.js";
import type { LayerKey } from "../types.js";
import { exists, processAlive, removeTree, scratchName, sleep, writeFileAtomic } from "../store/fsutil.js";
import { assertLayerKey, openStore, type Store } from "../store/layout.js";
import { lockFile } from "../store/lock.js";
import { hasLayer } from "../store/manifest.js";
import { findStoredLayerImage, type StoredLayerImage, storeLayerImage } from "../store/layer-image.js";
import { materializeLayer, type MaterializeOptions } from "../store/materialize.js";
import { imageLower } from "../../sandbox/plan.js";
import { pullLayer, type PullResult } from "../store/remote.js";
import { pullLayerHttp, sourceBase, type HttpSource } from "../store/http-remote.js";
import { IoBudget } from "./io-budget.js";
import { chooseLayerForm, type LayerForm } from "./layer-form.js";
import { countLiveLeases, createLease, identityAlive, identityText } from "./leases.js";

export interface NodeCacheOptions {
  /** The local store layers come from. */
  store: Store;
  /** Cache root (a home's cache/). */
  dir: string;
  /** Remote store directories tried in order when the local store lacks a layer (before any per-call source). */
  remotes?: string[];
  /** After each materialization, evict least recently used unleased layers beyond this many logical bytes. */
  maxBytes?: number;
  /** Materializations at once across all processes sharing `dir` (default 2). */
  maxConcurrent?: number;
  /** Bytes copied per second by this process while materializing or pulling (default unlimited). */
  bytesPerSec?: number;
  /** Longest wait for another process's materialization of the same layer (default 10 minutes). */
  lockTimeoutMs?: number;
  /** Passed to materializeLayer (e.g. force copies, or a low maxLinks in tests). */
  materialize?: Pick<MaterializeOptions, "mode" | "maxLinks" | "concurrency">;
  /**
   * How acquire() gives layers by default: `tree` (materialized; the default), `image` (a metadata image each
   * sandbox mounts over the store), or `auto` (a tree already materialized here, else an image where this host can
   * mount one: `chooseLayerForm`).
   */
  form?: LayerForm | "auto";
}

/** A layer held in use until release(); eviction never removes a layer with a live lease. */
export interface CacheLease {
  readonly key: LayerKey;
  readonly form: LayerForm;
  /** layers/<key> (one subdirectory per tree), or images/<key>. */
  readonly path: string;
  /**
   * Tree name -> an overlay's lower for it (e.g. testbed, venv): the tree's absolute path, or, in the image form, a
   * layer image lower (`imageLower`). Read-only: mount copy-on-write.
   */
  readonly trees: Record<string, string>;
  release(): Promise<void>;
}

export interface CachedLayer {
  key: LayerKey;
  /** Where it is: layers/<key> when materialized, else images/<key>. */
  path: string;
  forms: LayerForm[];
  logicalBytes: number;
  lastUsedMs: number;
  /** Live leases (stale ones are dropped while counting). */
  leases: number;
}

export interface MaterializeEvent {
  key: LayerKey;
  form: LayerForm;
  durationMs: number;
  files: number;
  linked: number;
  copied: number;
  bytesCopied: number;
}

/** Where a layer may come from when the local store lacks it, for one call (peers' servers, tried in order). */
export interface FetchOptions {
  sources?: readonly HttpSource[];
}

export interface AcquireOptions extends FetchOptions {
  /** The form wanted (default: the cache's `form`). */
  form?: LayerForm | "auto";
}

/** One layer brought into the local store from elsewhere (a line of `pulls.jsonl`). */
export interface PullRecord {
  key: LayerKey;
  /** A remote directory, or a peer's origin (never its token). */
  source: string;
  objects: number;
  bytes: number;
  ms: number;
  at: string;
}

export interface NodeCacheEvents {
  "materialize-start": [{ key: LayerKey }];
  materialize: [MaterializeEvent];
  pull: [PullResult & { remote: string; durationMs: number }];
  evict: [{ key: LayerKey; logicalBytes: number }];
  /** Non-fatal problems (e.g. a failed background eviction). */
  warning: [string];
}

interface LayerMeta {
  key: LayerKey;
  /** Tree form: the sum of file sizes; image form: the image's size. */
  logicalBytes: number;
  trees: string[];
  materializedAtMs: number;
}

const MAX_ACQUIRE_ATTEMPTS = 5;
const IMAGE_FILE = "layer.erofs";

export class NodeCache extends EventEmitter<NodeCacheEvents> {
  readonly store: Store;
  readonly dir: string;
  readonly budget: IoBudget;
  private readonly inflight = new Map<LayerKey, Promise<void>>();
  private readonly fetching = new Map<LayerKey, Promise<void>>();
  private readonly d: Record<"layers" | "images" | "meta" | "leases" | "locks" | "tmp" | "trash" | "evicting", string>;

  constructor(private readonly opts: NodeCacheOptions) {
    super();
    this.store = opts.store;
    this.dir = opts.dir;
    this.d = {
      layers: join(opts.dir, "layers"),
      images: join(opts.dir, "images"),
      meta: join(opts.dir, "meta"),
      leases: join(opts.dir, "leases"),
      locks: join(opts.dir, "locks"),
      tmp: join(opts.dir, "tmp"),
      trash: join(opts.dir, "trash"),
      evicting: join(opts.dir, "evicting"),
    };
    for (const dir of Object.values(this.d)) mkdirSync(dir, { recursive: true });
    this.budget = new IoBudget({
      maxConcurrent: opts.maxConcurrent,
      bytesPerSec: opts.bytesPerSec,
      slotDir: this.d.locks,
    });
  }

  /** The cache of a minisandbox home, backed by that home's store. */
  static forHome(home: string, opts: Omit<NodeCacheOptions, "store" | "dir"> = {}): NodeCache {
    const layout = homeLayout(home);
    return new NodeCache({ ...opts, store: openStore(layout.store), dir: layout.cache });
  }

  layerPath(key: LayerKey): string {
    return join(this.d.layers, key);
  }

  imagePath(key: LayerKey): string {
    return join(this.d.images, key);
  }

  /** Is the layer here right now, in either form? */
  async has(key: LayerKey): Promise<boolean> {
    assertLayerKey(key);
    return (await exists(this.layerPath(key))) || exists(this.imagePath(key));
  }

  /** The form `acquire` gives by default on this host, and why. */
  async formChoice(): Promise<{ form: LayerForm; reason: string }> {
    const asked = this.opts.form ?? "tree";
    if (asked !== "auto") return { form: asked, reason: `layers in the ${asked} form, as configured` };
    return chooseLayerForm(this.store);
  }

  /**
   * Get a read-only materialized layer, materializing it (once, even under concurrent calls from any number of
   * processes) on first use, pulling it from a remote store or one of `sources` if the local store lacks it.
   */
  async acquire(key: LayerKey, opts: AcquireOptions = {}): Promise<CacheLease> {
    assertLayerKey(key);
    const form = await this.formFor(key, opts);
    // The lease comes first: an evictor that checks leases after this point will see it (see evictOne).
    const leaseFile = await createLease(join(this.d.leases, key));
    try {
      for (let attempt = 0; attempt < MAX_ACQUIRE_ATTEMPTS; attempt++) {
        await this.waitWhileEvicting(key);
        const meta = await this.placed(key, form);
        if (meta) {
          await this.touch(key, form);
          return this.lease(key, form, meta, leaseFile);
        }
        if (form === "image" && (await this.placeStoredImage(key))) continue;
        await this.ensurePlaced(key, form, opts);
      }
      throw new Error(`layer ${key} kept disappearing from node cache ${this.dir} while being acquired`);
    } catch (e) {
      await fsp.rm(leaseFile, { force: true });
      throw e;
    }
  }

  /**
   * The form a lease gets: as asked (auto: a tree already here, else this host's choice). An image is the cheaper
   * cold start (no link per file), a tree the cheaper sandbox once placed: each launch mounts an image anew, so a
   * sandbox's first walk of its files and its teardown instantiate and drop every inode it touched twice (the image
   * and the overlay giving it its objects), where a tree's inodes are the host's, cached across sandboxes.
   */
  private async formFor(key: LayerKey, opts: AcquireOptions): Promise<LayerForm> {
    const asked = opts.form ?? this.opts.form ?? "tree";
    if (asked === "auto" && (await this.placed(key, "tree"))) return "tree";
    return asked === "auto" ? (await chooseLayerForm(this.store)).form : asked;
  }

  /**
   * Where leases of the layer would be images, have the store write its image now (after a build, a fetch or a
   * pull), so that its first cold start links it instead. Best effort: a failure is a `warning`, and the first
   * placement writes it as before.
   */
  async prepareImage(key: LayerKey): Promise<void> {
    try {
      if ((await this.formFor(key, {})) === "image") await storeLayerImage(this.store, key);
    } catch (e) {
      this.emit("warning", `the image of layer ${key} was not written ahead: ${errMessage(e)}`);
    }
  }

  /** Layers here (in one form or both), least recently used first. */
  async list(): Promise<CachedLayer[]> {
    const byKey = new Map<LayerKey, CachedLayer>();
    const keys = [
      ...(await fsp.readdir(this.d.meta)).filter((n) => n.endsWith(".json")).map((n) => n.slice(0, -".json".length)),
      ...(await fsp.readdir(this.d.images)),
    ];
    for (const key of keys) {
      for (const form of ["tree", "image"] as const) {
        const meta = await this.placed(key, form);
        const st = meta && (await fsp.stat(this.metaPath(key, form)).catch(() => undefined));
        if (!meta || !st) continue;
        const known = byKey.get(key);
        if (known) {
          if (known.forms.includes(form)) continue;
          known.forms.push(form);
          known.logicalBytes += meta.logicalBytes;
          known.lastUsedMs = Math.max(known.lastUsedMs, st.mtimeMs);
          continue;
        }
        const leases = await countLiveLeases(join(this.d.leases, key));
        const path = form === "tree" ? this.layerPath(key) : this.imagePath(key);
        byKey.set(key, { key, path, forms: [form], logicalBytes: meta.logicalBytes, lastUsedMs: st.mtimeMs, leases });
      }
    }
    return [...byKey.values()].sort((a, b) => a.lastUsedMs - b.lastUsedMs || a.key.localeCompare(b.key));
  }

  /**
   * Evict least recently used layers that no one holds until the total is at most maxBytes (default: the
   * cache's maxBytes). Also clears leftovers of crashed processes. Returns what was removed.
   */
  async evict(opts: { maxBytes?: number } = {}): Promise<{ evicted: LayerKey[]; freedBytes: number }> {
    const maxBytes = opts.maxBytes ?? this.opts.maxBytes ?? Infinity;
    const lock = await lockFile(join(this.d.locks, "evict.lock"), { timeoutMs: this.opts.lockTimeoutMs });
    try {
      await this.sweepLeftovers();
      const result = { evicted: [] as LayerKey[], freedBytes: 0 };
      const layers = await this.list();
      let total = layers.reduce((n, l) => n + l.logicalBytes, 0);
      for (const layer of layers) {
        if (total <= maxBytes) break;
        if (layer.leases > 0 || !(await this.evictOne(layer.key))) continue;
        total -= layer.logicalBytes;
        result.evicted.push(layer.key);
        result.freedBytes += layer.logicalBytes;
        this.emit("evict", { key: layer.key, logicalBytes: layer.logicalBytes });
      }
      return result;
    } finally {
      await lock.release();
    }
  }

  private lease(key: LayerKey, form: LayerForm, meta: LayerMeta, leaseFile: string): CacheLease {
    const path = form === "tree" ? this.layerPath(key) : this.imagePath(key);
    const image = join(path, IMAGE_FILE);
    const lower = (tree: string): string =>
      form === "tree" ? join(path, tree) : imageLower({ image, objects: this.store.objectsDir, tree });
    let released = false;
    return {
      key,
      form,
      path,
      trees: Object.fromEntries(meta.trees.map((t) => [t, lower(t)])),
      release: async () => {
        if (released) return;
        released = true;
        await fsp.rm(leaseFile, { force: true });
        await this.touch(key, form);
      },
    };
  }

  /**
   * Make sure the local store holds layer `key` (without materializing it): pulled from the remote directories or
   * `sources` when missing, once per key across concurrent calls and processes, within the I/O budget.
   */
  async fetch(key: LayerKey, opts: FetchOptions = {}): Promise<void> {
    assertLayerKey(key);
    let p = this.fetching.get(key);
    if (!p) {
      p = (async () => {
        if (await hasLayer(this.store, key)) return;
        const lock = await lockFile(join(this.d.locks, `${key}.lock`), { timeoutMs: this.opts.lockTimeoutMs });
        try {
          if (await hasLayer(this.store, key)) return;
          await this.budget.withSlot(() => this.pullFromRemotes(key, opts.sources ?? []));
        } finally {
          await lock.release();
        }
      })().finally(() => this.fetching.delete(key));
      this.fetching.set(key, p);
    }
    return p;
  }

  /** Remove leases whose holder is gone (a killed process's); returns how many. Live leases are never touched. */
  async pruneStaleLeases(): Promise<number> {
    let pruned = 0;
    for (const key of await fsp.readdir(this.d.leases).catch(() => [] as string[])) {
      const dir = join(this.d.leases, key);
      const before = (await fsp.readdir(dir).catch(() => [] as string[])).length;
      pruned += before - (await countLiveLeases(dir));
    }
    return pruned;
  }

  /** Layers brought in from elsewhere, oldest first (`pulls.jsonl`). */
  async pulls(): Promise<PullRecord[]> {
    let text = "";
    try {
      text = await fsp.readFile(join(this.dir, "pulls.jsonl"), "utf8");
    } catch (e) {
      if (errCode(e) !== "ENOENT") throw e;
    }
    return text
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as PullRecord);
  }

  /** Single-flight: one placement per key and form in this process; the per-key flock extends it across processes. */
  private ensurePlaced(key: LayerKey, form: LayerForm, opts: FetchOptions): Promise<void> {
    const id = `${form}/${key}`;
    let p = this.inflight.get(id);
    if (!p) {
      p = this.placeOnce(key, form, opts).finally(() => this.inflight.delete(id));
      this.inflight.set(id, p);
    }
    return p;
  }

  private async placeOnce(key: LayerKey, form: LayerForm, opts: FetchOptions): Promise<void> {
    const lock = await lockFile(join(this.d.locks, `${key}.lock`), { timeoutMs: this.opts.lockTimeoutMs });
    let event: MaterializeEvent | undefined;
    try {
      if (await this.placed(key, form)) return;
      // We hold the key's lock, so any scratch dir for this key is a crashed attempt's leftover.
      for (const name of await fsp.readdir(this.d.tmp))
        if (name.startsWith(`${key}@`)) await removeTree(join(this.d.tmp, name));
      event = await this.budget.withSlot(async () => {
        if (!(await hasLayer(this.store, key))) await this.pullFromRemotes(key, opts.sources ?? []);
        this.emit("materialize-start", { key });
        const tmp = join(this.d.tmp, scratchName(`${key}@`));
        const done = form === "tree" ? await this.materializeTree(key, tmp) : await this.writeImage(key, tmp);
        this.emit("materialize", done); // inside the slot: start..end events bracket the budgeted work
        return done;
      });
    } finally {
      await lock.release();
    }
    if (event) await this.evictPastLimit(key);
  }

  /** After a placement, with a size limit: make room (best effort: a failure is a warning). */
  private async evictPastLimit(key: LayerKey): Promise<void> {
    if (this.opts.maxBytes === undefined) return;
    await this.evict().catch((e: unknown) =>
      this.emit("warning", `eviction after materializing ${key} failed: ${String(e)}`),
    );
  }

  private async materializeTree(key: LayerKey, tmp: string): Promise<MaterializeEvent> {
    const r = await materializeLayer(this.store, key, tmp, { ...this.opts.materialize, throttle: this.budget.consume });
    const meta: LayerMeta = {
      key,
      logicalBytes: r.logicalBytes,
      trees: Object.keys(r.trees),
      materializedAtMs: Date.now(),
    };
    await placeOrDrop(tmp, async () => {
      await writeFileAtomic(this.metaPath(key, "tree"), `${JSON.stringify(meta)}\n`, this.d.tmp);
      const damaged = await this.moveToTrash(this.layerPath(key)); // a layer dir without meta: replace it
      await renameDir(tmp, this.layerPath(key));
      if (damaged) await removeTree(damaged);
    });
    const { durationMs, files, linked, copied, bytesCopied } = r;
    return { key, form: "tree", durationMs, files, linked, copied, bytesCopied };
  }

  /**
   * The image form: images/<key>/ holds layer.erofs (a link to the image the store keeps, written there first if it
   * is not) and meta.json, moved into place by one rename.
   */
  private async writeImage(key: LayerKey, tmp: string): Promise<MaterializeEvent> {
    const started = performance.now();
    const r = await storeLayerImage(this.store, key);
    await placeOrDrop(tmp, async () => {
      await this.imageDir(tmp, key, r);
      const damaged = await this.moveToTrash(this.imagePath(key)); // an image dir without meta: replace it
      await fsp.rename(tmp, this.imagePath(key));
      if (damaged) await removeTree(damaged);
    });
    return imageEvent(key, r, started);
  }

  /**
   * A layer whose image the store already keeps is placed without the key's lock or an I/O slot: a link and a
   * rename, which concurrent placers (in any process) may both make; one rename wins, and the others find it placed.
   * False when the store keeps no image of it, or its place is taken by a damaged one (the locked path replaces it).
   */
  private async placeStoredImage(key: LayerKey): Promise<boolean> {
    const started = performance.now();
    const r = await findStoredLayerImage(this.store, key);
    if (!r) return false;
    const tmp = join(this.d.tmp, scratchName(`${key}@`));
    try {
      await this.imageDir(tmp, key, r);
      await fsp.rename(tmp, this.imagePath(key));
    } catch (e) {
      await removeTree(tmp);
      if (errCode(e) !== "ENOTEMPTY" && errCode(e) !== "EEXIST") throw e;
      return (await this.placed(key, "image")) !== undefined;
    }
    this.emit("materialize", imageEvent(key, r, started));
    await this.evictPastLimit(key);
    return true;
  }

  /** A scratch dir holding a layer's image (linked from the store's, copied across filesystems) and its meta. */
  private async imageDir(dir: string, key: LayerKey, r: StoredLayerImage): Promise<void> {
    await fsp.mkdir(dir);
    await fsp.link(r.path, join(dir, IMAGE_FILE)).catch((e: unknown) => {
      if (errCode(e) !== "EXDEV") throw e;
      return fsp.copyFile(r.path, join(dir, IMAGE_FILE));
    });
    const meta: LayerMeta = { key, logicalBytes: r.imageBytes, trees: r.trees, materializedAtMs: Date.now() };
    await fsp.writeFile(join(dir, "meta.json"), `${JSON.stringify(meta)}\n`);
  }

  /**
   * Try each remote directory, then each source, in order; an unusable remote (e.g. shared storage not mounted) is
   * reported, not fatal. With sources given, failing them all is `LayerUnavailableError` (retry elsewhere).
   */
  private async pullFromRemotes(key: LayerKey, sources: readonly HttpSource[]): Promise<void> {
    const problems: string[] = [];
    for (const remote of this.opts.remotes ?? []) {
      try {
        openStore(remote, { create: false });
      } catch (e) {
        problems.push(errMessage(e));
        this.emit("warning", `remote ${remote} skipped: ${errMessage(e)}`);
        continue;
      }
      try {
        const t = performance.now();
        const r = await pullLayer(this.store, remote, key, { throttle: this.budget.consume });
        this.recordPull(r, remote, performance.now() - t);
        return;
      } catch (e) {
        if (!(e instanceof NotFoundError)) throw e;
      }
    }
    for (const source of sources) {
      const origin = sourceBase(source.url).origin;
      try {
        const t = performance.now();
        const r = await pullLayerHttp(this.store, source, key, { throttle: this.budget.consume });
        this.recordPull(r, origin, performance.now() - t);
        return;
      } catch (e) {
        problems.push(errMessage(e));
        this.emit("warning", `source ${origin} failed for layer ${key}: ${errMessage(e)}`);
      }
    }
    const where = [this.store.root, ...(this.opts.remotes ?? [])].join(", ");
    const why = problems.length ? ` (${problems.join("; ")})` : "";
    if (sources.length > 0)
      throw new LayerUnavailableError(`layer ${key}: no source could supply it: not in store ${where}${why}`);
    throw new NotFoundError(`layer ${key} not found in store ${where}${why}`);
  }

  private recordPull(r: PullResult, source: string, durationMs: number): void {
    const ms = Math.round(durationMs);
    const record: PullRecord = {
      key: r.key,
      source,
      objects: r.objectsFetched,
      bytes: r.bytesFetched,
      ms,
      at: new Date().toISOString(),
    };
    appendFileSync(join(this.dir, "pulls.jsonl"), `${JSON.stringify(record)}\n`);
    this.emit("pull", { ...r, remote: source, durationMs });
  }

  /**
   * Eviction protocol (with acquire): the evictor writes a marker, then counts leases; acquire writes its lease,
   * then checks for a marker. Whatever the interleaving, one of them sees the other: either the evictor backs
   * off, or acquire waits for the eviction to finish and materializes again.
   */
  private async evictOne(key: LayerKey): Promise<boolean> {
    const marker = join(this.d.evicting, key);
    try {
      await fsp.writeFile(marker, identityText(), { flag: "wx" });
    } catch (e) {
      if (errCode(e) === "EEXIST") return false;
      throw e;
    }
    const trash: string[] = [];
    try {
      if ((await countLiveLeases(join(this.d.leases, key))) > 0) return false;
      for (const path of [this.layerPath(key), this.imagePath(key)]) {
        const t = await this.moveToTrash(path);
        if (t) trash.push(t);
      }
      if (trash.length === 0) return false;
      await fsp.rm(this.metaPath(key, "tree"), { force: true });
    } finally {
      await fsp.rm(marker, { force: true });
    }
    for (const t of trash) await removeTree(t);
    return true;
  }

  /** Atomically take a layer's dir (either form) out of place (undefined if there was none); the caller deletes it. */
  private async moveToTrash(path: string): Promise<string | undefined> {
    const trash = join(this.d.trash, scratchName(basename(path)));
    try {
      await renameDir(path, trash);
      return trash;
    } catch (e) {
      if (errCode(e) === "ENOENT") return undefined;
      throw e;
    }
  }

  private async waitWhileEvicting(key: LayerKey): Promise<void> {
    const marker = join(this.d.evicting, key);
    const deadline = Date.now() + (this.opts.lockTimeoutMs ?? 600_000);
    for (;;) {
      let text: string;
      try {
        text = await fsp.readFile(marker, "utf8");
      } catch (e) {
        if (errCode(e) === "ENOENT") return;
        throw e;
      }
      if (!identityAlive(text)) {
        await fsp.rm(marker, { force: true }); // its evictor died; the layer is intact or already renamed away
        return;
      }
      if (Date.now() > deadline)
        throw new TimeoutError(`timed out waiting for eviction of layer ${key} in ${this.dir}`);
      await sleep(10);
    }
  }

  /**
   * Remove leftovers of crashed processes. Runs under the evict lock: every eviction marker then belongs to a dead
   * evictor (only lock holders create them); trash is garbage by definition; scratch dirs are checked by pid.
   */
  private async sweepLeftovers(): Promise<void> {
    for (const name of await fsp.readdir(this.d.evicting)) await fsp.rm(join(this.d.evicting, name), { force: true });
    for (const name of await fsp.readdir(this.d.trash)) await removeTree(join(this.d.trash, name));
    for (const name of await fsp.readdir(this.d.tmp)) {
      const pid = /-(\d+)-[0-9a-f]+$/.exec(name)?.[1];
      if (pid !== undefined && !processAlive(Number(pid))) await removeTree(join(this.d.tmp, name));
    }
  }

  /** meta/<key>.json for a materialized layer, images/<key>/meta.json for an image (whose dir is placed whole). */
  private metaPath(key: LayerKey, form: LayerForm): string {
    return form === "tree" ? join(this.d.meta, `${key}.json`) : join(this.imagePath(key), "meta.json");
  }

  /** The layer's meta when it is in place in that form. */
  private async placed(key: LayerKey, form: LayerForm): Promise<LayerMeta | undefined> {
    const meta = await this.readMeta(key, form);
    if (!meta || (form === "tree" && !(await exists(this.layerPath(key))))) return undefined;
    return meta;
  }

  private async readMeta(key: LayerKey, form: LayerForm): Promise<LayerMeta | undefined> {
    try {
      return JSON.parse(await fsp.readFile(this.metaPath(key, form), "utf8")) as LayerMeta;
    } catch (e) {
      if (errCode(e) === "ENOENT" || errCode(e) === "ENOTDIR" || e instanceof SyntaxError) return undefined;
      throw e;
    }
  }

  /** Record a use for LRU (the meta file's mtime). */
  private async touch(key: LayerKey, form: LayerForm): Promise<void> {
    const now = new Date();
    await fsp.utimes(this.metaPath(key, form), now, now).catch(() => undefined);
  }
}

function imageEvent(key: LayerKey, r: StoredLayerImage, startedMs: number): MaterializeEvent {
  const durationMs = performance.now() - startedMs;
  return { key, form: "image", durationMs, files: r.files, linked: 0, copied: 0, bytesCopied: 0 };
}

/**
 * Move a read-only (0555) directory to another parent. Without root, that needs write permission on the
 * directory itself (its ".." entry changes), so it is granted for the move and taken back after.
 */
async function renameDir(from: string, to: string): Promise<void> {
  const mode = (await fsp.stat(from)).mode & 0o7777;
  await fsp.chmod(from, mode | 0o200);
  await fsp.rename(from, to);
  await fsp.chmod(to, mode);
}

/** Run `move`, which puts the scratch dir `tmp` in place; if it fails, the scratch goes. */
async function placeOrDrop(tmp: string, move: () => Promise<void>): Promise<void> {
  try {
    await move();
  } catch (e) {
    await removeTree(tmp);
    throw e;
  }
}
