/**
 * Image records: what the store knows of each image (by id: its config's digest) and the names that point to one.
 * A record is written only once everything it needs is in the store (its layers' diff records, its root filesystem
 * layer, its manifest and config blobs), so a record is a promise `readImage` can keep.
 */
import { createHash } from "node:crypto";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { errCode, NotFoundError, StoreCorruptError } from "../../errors.js";
import type { LayerKey } from "../types.js";
import { writeFileAtomic } from "./fsutil.js";
import { DIGEST_RE, digestHex, ensureImageDirs, imageDirs } from "./image-layout.js";
import { isDerivedFrom } from "./flatten.js";
import { hasLayer, listLayers, removeLayer } from "./manifest.js";
import type { Store } from "./layout.js";

/** The parts of an image's config a sandbox on it needs (OCI image config `config`, Docker's names kept). */
export interface ImageConfig {
  Env: string[];
  WorkingDir: string;
  User: string;
  Entrypoint: string[] | null;
  Cmd: string[] | null;
  Labels: Record<string, string>;
  StopSignal?: string;
}

export interface ImageLayer {
  /** The blob as distributed (compressed), when known. */
  digest: string;
  mediaType: string;
  size: number;
  /** sha256 of the uncompressed tar: the key of its diff record. */
  diffId: string;
}

export interface ImagePlatform {
  os: string;
  architecture: string;
  variant?: string;
}

export interface ImageRecord {
  format: 1;
  /** The image id: sha256 digest of its config (what `podman images --no-trunc` shows). */
  id: string;
  /** Digest of the manifest it was stored from (a docker archive has none: one is made from its parts). */
  manifestDigest: string;
  platform: ImagePlatform;
  config: ImageConfig;
  layers: ImageLayer[];
  /** The flattened root filesystem, a layer of this store (tree "rootfs"). */
  rootfs: LayerKey;
  /** Sum of the root filesystem's file sizes, and of the layers as distributed. */
  sizes: { rootfsBytes: number; layersBytes: number };
  /** The image config's `created`, when it has one. */
  created?: string;
  /** Where it came from: a registry reference, an archive path, a local tool's image. */
  source: string;
  /** The peer (origin) it was taken from, when it was: its layers' records are that peer's word (see diff-check). */
  peer?: string;
  storedAt: string;
}

export interface ImageListing {
  record: ImageRecord;
  refs: string[];
}

interface RefFile {
  ref: string;
  id: string;
}

function recordPath(store: Store, id: string): string {
  return join(imageDirs(store).records, `${digestHex(id)}.json`);
}

function refPath(store: Store, ref: string): string {
  return join(imageDirs(store).refs, `${createHash("sha256").update(ref).digest("hex")}.json`);
}

export function blobPath(store: Store, digest: string): string {
  return join(imageDirs(store).blobs, digestHex(digest));
}

/** Keep a verified manifest or config blob (written atomically; the same digest is the same bytes). */
export async function writeBlob(store: Store, digest: string, bytes: Buffer): Promise<void> {
  ensureImageDirs(store);
  await writeFileAtomic(blobPath(store, digest), bytes, store.tmpDir);
}

/** Record an image and point `refs` at it. Its rootfs layer and blobs must already be in the store. */
export async function writeImage(store: Store, record: ImageRecord, refs: readonly string[]): Promise<void> {
  ensureImageDirs(store);
  if (!(await hasLayer(store, record.rootfs)))
    throw new StoreCorruptError(`image ${record.id}: its root filesystem layer ${record.rootfs} is not in the store`);
  await writeFileAtomic(recordPath(store, record.id), `${JSON.stringify(record, null, 1)}\n`, store.tmpDir);
  for (const ref of refs) {
    const file: RefFile = { ref, id: record.id };
    await writeFileAtomic(refPath(store, ref), `${JSON.stringify(file)}\n`, store.tmpDir);
  }
}

async function readJson<T>(path: string, what: string): Promise<T | undefined> {
  try {
    return JSON.parse(await fsp.readFile(path, "utf8")) as T;
  } catch (e) {
    if (errCode(e) === "ENOENT") return undefined;
    throw new StoreCorruptError(`${what} is unreadable (${path}): ${(e as Error).message}`);
  }
}

async function recordById(store: Store, id: string): Promise<ImageRecord | undefined> {
  const r = await readJson<ImageRecord>(recordPath(store, id), `image ${id}`);
  if (r && (r.format !== 1 || r.id !== id)) throw new StoreCorruptError(`image ${id}: malformed record`);
  return r;
}

/**
 * The image a name or id stands for: a full reference as stored (`docker.io/library/debian:12`; callers normalize
 * what users type, see env/images), an image id (`sha256:…`), or a unique prefix of at least 12 hex digits.
 */
export async function findImage(store: Store, nameOrId: string): Promise<ImageRecord | undefined> {
  if (DIGEST_RE.test(nameOrId)) return recordById(store, nameOrId);
  const ref = await readJson<RefFile>(refPath(store, nameOrId), `image name ${nameOrId}`);
  if (ref) return recordById(store, ref.id);
  const hex = nameOrId.replace(/^sha256:/, "");
  if (!/^[0-9a-f]{12,63}$/.test(hex)) return undefined;
  const ids = (await recordIds(store)).filter((id) => id.slice(7).startsWith(hex));
  return ids.length === 1 ? recordById(store, ids[0]!) : undefined;
}

export async function readImage(store: Store, nameOrId: string): Promise<ImageRecord> {
  const r = await findImage(store, nameOrId);
  if (!r) throw new NotFoundError(`image ${nameOrId} is not in store ${store.root} (pull or import it first)`);
  return r;
}

async function recordIds(store: Store): Promise<string[]> {
  const names = await fsp.readdir(imageDirs(store).records).catch(() => [] as string[]);
  return names.filter((n) => /^[0-9a-f]{64}\.json$/.test(n)).map((n) => `sha256:${n.slice(0, 64)}`);
}

async function refFiles(store: Store): Promise<{ file: string; ref: RefFile }[]> {
  const dir = imageDirs(store).refs;
  const names = await fsp.readdir(dir).catch(() => [] as string[]);
  const out: { file: string; ref: RefFile }[] = [];
  for (const n of names.filter((x) => x.endsWith(".json"))) {
    const ref = await readJson<RefFile>(join(dir, n), `image name file ${n}`);
    if (ref) out.push({ file: join(dir, n), ref });
  }
  return out;
}

/** Every image with its names, newest first. */
export async function listImages(store: Store): Promise<ImageListing[]> {
  const refs = await refFiles(store);
  const out: ImageListing[] = [];
  for (const id of await recordIds(store)) {
    const record = await recordById(store, id);
    if (!record) continue;
    const names = refs.filter((r) => r.ref.id === id).map((r) => r.ref.ref);
    out.push({ record, refs: names.sort() });
  }
  return out.sort((a, b) => b.record.storedAt.localeCompare(a.record.storedAt));
}

export interface RemoveImageResult {
  /** Names removed. */
  refs: string[];
  /** Images whose record went (no name pointed to them any more, or removed by id). */
  removed: string[];
  /**
   * Root filesystem layers no other image used, and the layers derived from them (their objects go at the next
   * `store gc`).
   */
  layers: LayerKey[];
}

/**
 * Remove a name; the image itself goes when no name points to it any more (or when given by id: all its names
 * go). Its objects stay until `store gc`, like a removed layer's.
 */
export async function removeImage(store: Store, nameOrId: string): Promise<RemoveImageResult> {
  const record = await readImage(store, nameOrId);
  const refs = await refFiles(store);
  const byId = DIGEST_RE.test(nameOrId) || !refs.some((r) => r.ref.ref === nameOrId);
  const gone = refs.filter((r) => r.ref.id === record.id && (byId || r.ref.ref === nameOrId));
  for (const r of gone) await fsp.rm(r.file, { force: true });
  const result: RemoveImageResult = { refs: gone.map((r) => r.ref.ref), removed: [], layers: [] };
  if (refs.some((r) => r.ref.id === record.id && !gone.includes(r))) return result;
  await fsp.rm(recordPath(store, record.id), { force: true });
  result.removed.push(record.id);
  const others = (await listImages(store)).filter((l) => l.record.rootfs === record.rootfs);
  if (others.length === 0 && (await hasLayer(store, record.rootfs))) {
    await removeLayer(store, record.rootfs);
    result.layers.push(record.rootfs);
    for (const key of (await listLayers(store)).filter((k) => isDerivedFrom(k, record.rootfs))) {
      await removeLayer(store, key);
      result.layers.push(key);
    }
  }
  return result;
}

/** What gc must keep: every diff id and blob digest some image record names. */
export async function imageRoots(store: Store): Promise<{ diffIds: Set<string>; blobs: Set<string> }> {
  const diffIds = new Set<string>();
  const blobs = new Set<string>();
  for (const id of await recordIds(store)) {
    const r = await recordById(store, id);
    if (!r) continue;
    for (const l of r.layers) diffIds.add(l.diffId);
    blobs.add(r.id);
    blobs.add(r.manifestDigest);
  }
  return { diffIds, blobs };
}
