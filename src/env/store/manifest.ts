/** Layer manifests: types, strict validation (they may come from untrusted packs), reading and atomic writing. */
import * as fsp from "node:fs/promises";
import { errCode, errMessage, InvalidInputError, NotFoundError, StoreCorruptError } from "../../errors.js";
import type { LayerKey } from "../types.js";
import { writeFileAtomic } from "./fsutil.js";
import { IMAGE_ID_COUNT } from "./ids.js";
import {
  imageFileAttrs,
  isLayerKey,
  isTreeName,
  manifestPath,
  OBJECT_ID_RE,
  isExecutableId,
  type ObjectId,
  type Store,
} from "./layout.js";
import { decodeName, displayName, isEncodedName, pathKeys, type EncodedName } from "./names.js";

export const MANIFEST_FORMAT = 1;

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** Owner inside an image (host ids: the store's range base + these; see ids.ts). Only in image trees. */
export interface EntryOwner {
  uid?: number;
  gid?: number;
}
/** Extended attributes an image recorded (name -> base64 value): kept for the record, never set on a host inode. */
export type Xattrs = Record<string, string>;

export interface DirEntry extends EntryOwner {
  path: EncodedName;
  type: "dir";
  mode: number;
  xattrs?: Xattrs;
}
export interface FileEntry {
  path: EncodedName;
  type: "file";
  /**
   * Mode at ingest. Built trees: informational (materialized files are 0444, or 0555 when executable). Image trees:
   * the archived bits, setuid/setgid included (the object's inode has them without: see README "Images").
   */
  mode: number;
  object: ObjectId;
  size: number;
  xattrs?: Xattrs;
}
export interface SymlinkEntry extends EntryOwner {
  path: EncodedName;
  type: "symlink";
  target: EncodedName;
}
/** A second name for a file of the same tree; `target` is the path of an earlier file entry. */
export interface HardlinkEntry {
  path: EncodedName;
  type: "hardlink";
  target: EncodedName;
}
export type ManifestEntry = DirEntry | FileEntry | SymlinkEntry | HardlinkEntry;

export interface TreeManifest {
  /** Mode of the tree's root directory. */
  mode: number;
  /**
   * Present on an image's root filesystem, and the owner of its root directory: modes are materialized as recorded
   * (setuid dropped) and every dir and symlink entry has an owner (`uid`, `gid`), every file an image object id.
   */
  owner?: { uid: number; gid: number };
  /** Pre-order: every entry's parent directory comes before it. Paths are relative, "/"-separated. */
  entries: ManifestEntry[];
}

export interface LayerManifest {
  format: typeof MANIFEST_FORMAT;
  key: LayerKey;
  /** Every file, dir and symlink is materialized with this mtime (see README "mtimes"). */
  mtime: { policy: "fixed"; epochSec: number };
  trees: Record<string, TreeManifest>;
  meta?: { [key: string]: JsonValue };
}

export interface ManifestSummary {
  files: number;
  dirs: number;
  symlinks: number;
  hardlinks: number;
  /** Sum of file sizes (hard links counted once, as on disk). */
  logicalBytes: number;
}

export function summarizeManifest(m: LayerManifest): ManifestSummary {
  const s: ManifestSummary = { files: 0, dirs: 0, symlinks: 0, hardlinks: 0, logicalBytes: 0 };
  for (const tree of Object.values(m.trees)) {
    for (const e of tree.entries) {
      if (e.type === "file") {
        s.files++;
        s.logicalBytes += e.size;
      } else if (e.type === "dir") s.dirs++;
      else if (e.type === "symlink") s.symlinks++;
      else s.hardlinks++;
    }
  }
  return s;
}

/** Distinct objects a manifest needs, with their sizes. */
export function referencedObjects(m: LayerManifest): Map<ObjectId, number> {
  const refs = new Map<ObjectId, number>();
  for (const tree of Object.values(m.trees))
    for (const e of tree.entries) if (e.type === "file") refs.set(e.object, e.size);
  return refs;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isMode = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 0o7777;
const isSize = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isImageId = (v: unknown): v is number =>
  Number.isInteger(v) && (v as number) >= 0 && (v as number) < IMAGE_ID_COUNT;
const isXattrs = (v: unknown): boolean =>
  v === undefined || (isObj(v) && Object.values(v).every((x) => typeof x === "string"));

/**
 * Check that a parsed value is a well-formed manifest whose entries cannot escape their tree when materialized:
 * clean relative paths, parents declared as dirs before children (so no entry is written through a symlink),
 * unique paths, hard links to earlier files, object ids consistent with the exec bit.
 */
export function validateManifest(value: unknown, expectedKey?: LayerKey): LayerManifest {
  const fail = (why: string): never => {
    throw new InvalidInputError(`invalid manifest${expectedKey ? ` for layer ${expectedKey}` : ""}: ${why}`);
  };
  if (!isObj(value)) return fail("not a JSON object");
  if (value.format !== MANIFEST_FORMAT) fail(`unsupported format ${JSON.stringify(value.format)}`);
  if (typeof value.key !== "string" || !isLayerKey(value.key)) return fail("missing or invalid key");
  if (expectedKey !== undefined && value.key !== expectedKey) fail(`key ${value.key} does not match ${expectedKey}`);
  const mtime = value.mtime;
  if (!isObj(mtime) || mtime.policy !== "fixed" || !Number.isSafeInteger(mtime.epochSec)) fail("invalid mtime policy");
  if (value.meta !== undefined && !isObj(value.meta)) fail("meta must be an object");
  if (!isObj(value.trees) || Object.keys(value.trees).length === 0) return fail("no trees");
  for (const [name, tree] of Object.entries(value.trees)) {
    if (!isTreeName(name)) fail(`invalid tree name ${JSON.stringify(name)}`);
    if (!isObj(tree) || !isMode(tree.mode) || !Array.isArray(tree.entries)) return fail(`tree ${name}: malformed`);
    const image = tree.owner !== undefined;
    if (image && !(isObj(tree.owner) && isImageId(tree.owner.uid) && isImageId(tree.owner.gid)))
      fail(`tree ${name}: invalid owner`);
    validateEntries(name, tree.entries, image, fail);
  }
  return value as unknown as LayerManifest;
}

/** Owners and xattrs where (and only where) an image tree has them; a file's object id matching its mode. */
function entryAttrsProblem(e: Record<string, unknown>, image: boolean): string | undefined {
  const owned = e.uid !== undefined || e.gid !== undefined;
  if (!image) {
    if (owned || e.xattrs !== undefined) return "owner or xattrs outside an image tree";
    if (e.type === "file" && isExecutableId(e.object as string) !== (((e.mode as number) & 0o111) !== 0))
      return "exec bit disagrees with object id";
    return undefined;
  }
  if (!isXattrs(e.xattrs)) return "invalid xattrs";
  if (e.type === "file") {
    const attrs = imageFileAttrs(e.object as string);
    if (!attrs || attrs.mode !== ((e.mode as number) & 0o777)) return "object id does not carry the file's mode";
    if (!isImageId(attrs.uid) || !isImageId(attrs.gid)) return "object owner out of range";
  } else if ((e.type === "dir" || e.type === "symlink") && !(isImageId(e.uid) && isImageId(e.gid)))
    return "missing or invalid owner";
  return undefined;
}

function validateEntries(tree: string, entries: unknown[], image: boolean, fail: (why: string) => never): void {
  const dirs = new Set<string>([""]);
  const files = new Set<string>();
  const seen = new Set<string>();
  for (const e of entries) {
    if (!isObj(e) || !isEncodedName(e.path)) fail(`tree ${tree}: malformed entry`);
    // Keys by bytes, whatever the encoding: one path written twice (as text and as b64) is still a duplicate.
    const { problem, key, parent } = pathKeys(e.path as EncodedName);
    const bad = (why: string): never =>
      fail(`tree ${tree}, ${JSON.stringify(displayName(e.path as EncodedName))}: ${why}`);
    if (problem) bad(problem);
    if (seen.has(key)) bad("duplicate path");
    seen.add(key);
    if (!dirs.has(parent)) bad("parent is not a directory listed before it");
    switch (e.type) {
      case "dir":
        if (!isMode(e.mode)) bad("invalid mode");
        dirs.add(key);
        break;
      case "file":
        if (!isMode(e.mode) || !isSize(e.size)) bad("invalid mode or size");
        if (typeof e.object !== "string" || !OBJECT_ID_RE.test(e.object)) bad("invalid object id");
        files.add(key);
        break;
      case "symlink": {
        if (!isEncodedName(e.target)) bad("invalid symlink target");
        const target = e.target as EncodedName;
        if (typeof target === "string" ? target.length === 0 || target.includes("\0") : badTarget(target)) {
          bad("invalid symlink target");
        }
        break;
      }
      case "hardlink":
        if (!isEncodedName(e.target) || !files.has(pathKeys(e.target).key)) {
          bad("hard link target is not an earlier file of the tree");
        }
        break;
      default:
        bad(`unknown entry type ${JSON.stringify(e.type)}`);
    }
    const problem2 = entryAttrsProblem(e, image);
    if (problem2) bad(problem2);
  }
}

function badTarget(target: EncodedName): boolean {
  const bytes = decodeName(target);
  return bytes.length === 0 || bytes.includes(0);
}

/** Parse and validate manifest text; problems become StoreCorruptError (for the local store) via the caller. */
export function parseManifest(text: string, expectedKey?: LayerKey): LayerManifest {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new InvalidInputError(`invalid manifest${expectedKey ? ` for layer ${expectedKey}` : ""}: ${errMessage(e)}`);
  }
  return validateManifest(value, expectedKey);
}

export async function readManifest(store: Store, key: LayerKey): Promise<LayerManifest> {
  if (!isLayerKey(key))
    throw new NotFoundError(`layer ${JSON.stringify(key)} not found in store ${store.root} (not a valid layer key)`);
  let text: string;
  try {
    text = await fsp.readFile(manifestPath(store, key), "utf8");
  } catch (e) {
    if (errCode(e) === "ENOENT") throw new NotFoundError(`layer ${key} not found in store ${store.root}`);
    throw e;
  }
  try {
    return parseManifest(text, key);
  } catch (e) {
    throw new StoreCorruptError(`store ${store.root}: manifest of layer ${key} is corrupt: ${errMessage(e)}`);
  }
}

export async function writeManifest(store: Store, manifest: LayerManifest): Promise<void> {
  await writeFileAtomic(manifestPath(store, manifest.key), `${JSON.stringify(manifest)}\n`, store.tmpDir);
}

/**
 * Layer keys name immutable layers: refuse to overwrite an existing layer with different content (a hostile pack
 * could otherwise swap a trusted layer) unless `replace`. An unreadable existing manifest may be replaced.
 */
export async function assertCanWrite(store: Store, manifest: LayerManifest, replace: boolean): Promise<void> {
  if (replace || !(await hasLayer(store, manifest.key))) return;
  let existing: LayerManifest;
  try {
    existing = await readManifest(store, manifest.key);
  } catch (e) {
    if (e instanceof StoreCorruptError) return;
    throw e;
  }
  if (JSON.stringify(existing) !== JSON.stringify(manifest)) {
    throw new InvalidInputError(
      `layer ${manifest.key} already exists in store ${store.root} with different content ` +
        "(use replace to overwrite it)",
    );
  }
}

export async function hasLayer(store: Store, key: LayerKey): Promise<boolean> {
  if (!isLayerKey(key)) return false;
  try {
    await fsp.access(manifestPath(store, key));
    return true;
  } catch {
    return false;
  }
}

export async function listLayers(store: Store): Promise<LayerKey[]> {
  const names = await fsp.readdir(store.manifestsDir);
  return names
    .filter((n) => n.endsWith(".json"))
    .map((n) => n.slice(0, -".json".length))
    .filter(isLayerKey)
    .sort();
}

/** Forget a layer (its objects stay until gc). */
export async function removeLayer(store: Store, key: LayerKey): Promise<void> {
  await readManifest(store, key).catch((e: unknown) => {
    if (!(e instanceof StoreCorruptError)) throw e;
  });
  await fsp.rm(manifestPath(store, key), { force: true });
}

/**
 * The layer a user means by `given`: its full key, or the start of exactly one key (prepare and `store list` show
 * the first 12 characters). Unknown or ambiguous: an error saying so and where the full keys are listed.
 */
export async function resolveLayerKey(store: Store, given: string): Promise<LayerKey> {
  if (await hasLayer(store, given)) return given;
  const matches = given === "" ? [] : (await listLayers(store)).filter((k) => k.startsWith(given));
  if (matches.length === 1) return matches[0]!;
  if (matches.length > 1)
    throw new InvalidInputError(
      `layer ${JSON.stringify(given)} is ambiguous in store ${store.root}: ${matches.length} keys start with it ` +
        `(${matches.slice(0, 3).join(", ")}${matches.length > 3 ? ", …" : ""}); give more of the key`,
    );
  throw new NotFoundError(
    `layer ${JSON.stringify(given)} not found in store ${store.root} ('minisandbox store list' shows every key)`,
  );
}
