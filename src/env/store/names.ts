/**
 * File names are bytes on Linux. Manifests keep them as JSON strings when they are valid UTF-8 and as
 * `{ b64 }` otherwise, so every name round-trips exactly.
 */
import { isUtf8 } from "node:buffer";

export type EncodedName = string | { b64: string };

export function encodeName(bytes: Buffer): EncodedName {
  const text = bytes.toString("utf8");
  return Buffer.from(text, "utf8").equals(bytes) ? text : { b64: bytes.toString("base64") };
}

export function decodeName(name: EncodedName): Buffer {
  return typeof name === "string" ? Buffer.from(name, "utf8") : Buffer.from(name.b64, "base64");
}

export function isEncodedName(v: unknown): v is EncodedName {
  if (typeof v === "string") return true;
  return (
    typeof v === "object" &&
    v !== null &&
    typeof (v as { b64?: unknown }).b64 === "string" &&
    Object.keys(v).length === 1
  );
}

/** Printable form for messages (invalid UTF-8 shown with replacement characters). */
export function displayName(name: EncodedName | Buffer): string {
  return Buffer.isBuffer(name)
    ? name.toString("utf8")
    : typeof name === "string"
      ? name
      : decodeName(name).toString("utf8");
}

const SLASH = 0x2f;

/** Why a manifest path is unsafe (absolute, empty component, ".", "..", NUL); null for a clean relative path. */
export function relPathProblem(path: Buffer): string | null {
  if (path.length === 0) return "empty path";
  if (path.includes(0)) return "NUL byte in path";
  if (path[0] === SLASH) return "absolute path";
  let start = 0;
  for (let i = 0; i <= path.length; i++) {
    if (i < path.length && path[i] !== SLASH) continue;
    const len = i - start;
    if (len === 0) return "empty path component";
    if (len === 1 && path[start] === 0x2e) return "'.' path component";
    if (len === 2 && path[start] === 0x2e && path[start + 1] === 0x2e) return "'..' path component";
    start = i + 1;
  }
  return null;
}

/** Parent of a relative byte path ("" for top-level names). */
export function parentOf(path: Buffer): Buffer {
  const i = path.lastIndexOf(SLASH);
  return i < 0 ? Buffer.alloc(0) : path.subarray(0, i);
}

/** base + "/" + rel as bytes (fs functions accept Buffer paths, which keeps non-UTF-8 names intact). */
export function joinBytes(base: string | Buffer, rel: Buffer): Buffer {
  return Buffer.concat([Buffer.isBuffer(base) ? base : Buffer.from(base, "utf8"), Buffer.from("/"), rel]);
}

/**
 * A path's bytes as one string key, whichever way its name was encoded (a string, or b64 of the same bytes): the
 * text for valid UTF-8, else NUL + latin1 (no valid path holds a NUL, so the two never meet).
 */
export function canonicalKey(path: Buffer): string {
  return isUtf8(path) ? path.toString("utf8") : `\0${path.toString("latin1")}`;
}

// A string without surrogates has UTF-8 bytes in which "/", "." and NUL are exactly its own ASCII ones.
const SURROGATE = /[\ud800-\udfff]/;

/**
 * `relPathProblem` and `canonicalKey` of a name and of its parent, on the string itself when its bytes are plainly
 * its UTF-8 (the common case: no buffer made), else on its bytes.
 */
export function pathKeys(name: EncodedName): { problem: string | null; key: string; parent: string } {
  if (typeof name !== "string" || SURROGATE.test(name)) {
    const bytes = decodeName(name);
    const problem = relPathProblem(bytes);
    return { problem, key: canonicalKey(bytes), parent: problem ? "" : canonicalKey(parentOf(bytes)) };
  }
  const slash = name.lastIndexOf("/");
  return { problem: textPathProblem(name), key: name, parent: slash < 0 ? "" : name.slice(0, slash) };
}

function textPathProblem(path: string): string | null {
  if (path.length === 0) return "empty path";
  if (path.includes("\0")) return "NUL byte in path";
  if (path.charCodeAt(0) === SLASH) return "absolute path";
  let start = 0;
  for (let i = 0; i <= path.length; i++) {
    if (i < path.length && path.charCodeAt(i) !== SLASH) continue;
    const len = i - start;
    if (len === 0) return "empty path component";
    if (len === 1 && path.charCodeAt(start) === 0x2e) return "'.' path component";
    if (len === 2 && path.charCodeAt(start) === 0x2e && path.charCodeAt(start + 1) === 0x2e)
      return "'..' path component";
    start = i + 1;
  }
  return null;
}

/** Map key for a byte path (latin1 is a bijection between bytes and strings). */
export function pathKey(path: Buffer): string {
  return path.toString("latin1");
}
