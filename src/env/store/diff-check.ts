/**
 * A diff record that did not come from unpacking its layer here (a peer's): checked against the rules an unpack
 * applies, since its entries cannot be checked against the diff id (that needs the layer's tar, which no store
 * keeps). What can be checked is: its form, clean relative paths (no `..`, within the length limits), whiteouts that
 * name a file, owners within 0..65535, image object ids; its counts are recomputed. A record that passes can only
 * say what an image holds, never reach outside it (flattening resolves every path inside the image).
 */
import { ImageInvalidError } from "../../errors.js";
import { IMAGE_ID_COUNT } from "./ids.js";
import { cleanPath, type DiffEntry, type DiffRecord } from "./layer-diff.js";
import { OBJECT_ID_RE } from "./layout.js";
import { decodeName, displayName, isEncodedName } from "./names.js";

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const isId = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0 && (v as number) < IMAGE_ID_COUNT;
const isMode = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 0o7777;
/** An image's file object: content hash, then `.MODE.UID.GID[.MTIME]`. */
const IMAGE_OBJECT_RE = /^[0-9a-f]{64}\.0[0-7]{3}\.\d{1,5}\.\d{1,5}(?:\.\d{1,11})?$/;

/** Parse and check a diff record of layer `diffId` given by `from` (e.g. a peer's origin); it is marked as `from`'s. */
export function checkDiffRecord(bytes: Buffer, diffId: string, from: string): DiffRecord {
  const what = `${from}: layer ${diffId}`;
  let doc: unknown;
  try {
    doc = JSON.parse(bytes.toString("utf8"));
  } catch (e) {
    throw new ImageInvalidError(`${what}: its record is not JSON (${(e as Error).message})`);
  }
  if (!isObj(doc) || doc.format !== 1 || doc.diffId !== diffId || !Array.isArray(doc.entries))
    throw new ImageInvalidError(`${what}: its record is malformed (format, diffId or entries)`);
  const entries = doc.entries.map((e, i) => checkEntry(e, `${what}: entry ${i + 1}`));
  const files = entries.filter((e) => e.type === "file");
  const warnings = Array.isArray(doc.warnings)
    ? doc.warnings.filter((w): w is string => typeof w === "string").map((w) => w.slice(0, 500))
    : [];
  return {
    format: 1,
    diffId,
    entries,
    files: files.length,
    bytes: files.reduce((n, e) => n + e.size, 0),
    warnings: warnings.slice(0, 20),
    peer: from,
  };
}

function cleanName(v: unknown, what: string): DiffEntry["path"] {
  if (!isEncodedName(v)) throw new ImageInvalidError(`${what}: a name is neither a string nor {b64}`);
  const raw = decodeName(v);
  if (raw.includes(0)) throw new ImageInvalidError(`${what}: a name holds a NUL byte`);
  const clean = cleanPath(raw, what);
  if (!clean.equals(raw)) throw new ImageInvalidError(`${what}: ${JSON.stringify(displayName(raw))} is not clean`);
  return v;
}

function checkEntry(e: unknown, what: string): DiffEntry {
  if (!isObj(e) || typeof e.type !== "string") throw new ImageInvalidError(`${what}: not an entry`);
  const path = cleanName(e.path, what);
  const at = `${what} (${displayName(path) || "/"})`;
  const xattrs = checkXattrs(e.xattrs, at);
  switch (e.type) {
    case "dir":
      if (!isMode(e.mode) || !isId(e.uid) || !isId(e.gid)) throw new ImageInvalidError(`${at}: bad mode or owner`);
      return { path, type: "dir", mode: e.mode, uid: e.uid, gid: e.gid, ...xattrs };
    case "file":
      if (!isMode(e.mode) || typeof e.object !== "string" || !IMAGE_OBJECT_RE.test(e.object))
        throw new ImageInvalidError(`${at}: bad mode or object id`);
      if (!Number.isSafeInteger(e.size) || (e.size as number) < 0) throw new ImageInvalidError(`${at}: bad size`);
      return { path, type: "file", mode: e.mode, object: e.object, size: e.size as number, ...xattrs };
    case "symlink": {
      if (!isEncodedName(e.target) || decodeName(e.target).length === 0 || decodeName(e.target).includes(0))
        throw new ImageInvalidError(`${at}: bad symlink target`);
      if (!isId(e.uid) || !isId(e.gid)) throw new ImageInvalidError(`${at}: bad owner`);
      return { path, type: "symlink", target: e.target, uid: e.uid, gid: e.gid };
    }
    case "hardlink":
      return { path, type: "hardlink", target: cleanName(e.target, at) };
    case "whiteout":
      if (decodeName(path).length === 0) throw new ImageInvalidError(`${at}: a whiteout that names no file`);
      return { path, type: "whiteout" };
    case "opaque":
      return { path, type: "opaque" };
    case "special":
      if (e.kind !== "device" && e.kind !== "fifo") throw new ImageInvalidError(`${at}: bad kind of special file`);
      return { path, type: "special", kind: e.kind };
    default:
      throw new ImageInvalidError(`${at}: unknown entry type ${JSON.stringify(e.type.slice(0, 40))}`);
  }
}

function checkXattrs(v: unknown, what: string): { xattrs?: Record<string, string> } {
  if (v === undefined) return {};
  if (!isObj(v) || !Object.values(v).every((x) => typeof x === "string"))
    throw new ImageInvalidError(`${what}: bad xattrs`);
  return { xattrs: v as Record<string, string> };
}

/** Objects a set of diff records name, with their sizes (for what a fetch must bring). */
export function diffObjects(records: Iterable<DiffRecord>): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of records)
    for (const e of r.entries) if (e.type === "file" && OBJECT_ID_RE.test(e.object)) out.set(e.object, e.size);
  return out;
}
