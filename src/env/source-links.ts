/**
 * The testbed's files taken from the store by git blob id: a file of the commit's tree whose blob (and mode) an
 * earlier layer of the repository holds byte for byte becomes a hard link to that layer's object, and git checks out
 * only the rest. A blob id names its bytes, so the file is exactly what `git checkout` of this commit writes — when
 * git converts nothing on the way out: paths with a conversion attribute (text, eol, crlf, filter, ident,
 * working-tree-encoding) and repositories set to convert line ends are checked out by git as before. Only the
 * commit's own tree is placed, so nothing of another commit reaches the testbed. Hard links only (the build
 * sandbox's writer is another user than the store's owner, the objects are read-only); otherwise nothing is placed.
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { homeLayout } from "../util/home.js";
import { hasObjectSync } from "./store/objects.js";
import { linkObject, type LayerManifest, type LinkedObject, type ObjectId, type Store } from "./store/index.js";

/** An entry of the index: `git ls-files -s`. */
export interface IndexEntry {
  mode: string;
  blob: string;
  path: string;
}

/** Blobs remembered per repository: the ones of the newest layers kept. */
const BLOBS_KEPT = 40_000;
/** Attributes under which git may write other bytes than the blob's. */
export const CONVERSION_ATTRIBUTES: readonly string[] = [
  "text",
  "eol",
  "crlf",
  "filter",
  "ident",
  "working-tree-encoding",
];

export class SourceLinks {
  private readonly record: string;
  /** The files placed, by `testbed/<path>` (`IngestOptions.linked`). */
  readonly linked = new Map<string, LinkedObject>();

  constructor(
    home: string,
    repo: string,
    private readonly store: Store,
    private readonly link: boolean,
  ) {
    const id = createHash("sha256").update(repo).digest("hex").slice(0, 32);
    this.record = join(homeLayout(home).envs, "blobs", `${id}.json`);
  }

  private known(): Record<string, { object: ObjectId; size: number }> {
    try {
      return JSON.parse(readFileSync(this.record, "utf8")) as Record<string, { object: ObjectId; size: number }>;
    } catch {
      return {};
    }
  }

  /**
   * Link the known regular files of `entries` (the commit's index) into `testbed`; `plain` says which paths git
   * converts nothing for. Each object once (two links of one object would be one file twice in the layer).
   * Returns the paths placed.
   */
  place(testbed: string, entries: readonly IndexEntry[], plain: (path: string) => boolean): Set<string> {
    const placed = new Set<string>();
    if (!this.link) return placed;
    const known = this.known();
    const used = new Set<ObjectId>();
    for (const e of entries) {
      const k = known[`${e.mode} ${e.blob}`];
      if (!k || used.has(k.object) || !plain(e.path) || !hasObjectSync(this.store, k.object, k.size)) continue;
      const dest = join(testbed, e.path);
      mkdirSync(dirname(dest), { recursive: true });
      if (!linkObject(this.store, k.object, dest)) continue;
      used.add(k.object);
      placed.add(e.path);
      this.linked.set(`testbed/${e.path}`, { object: k.object, mode: checkoutMode(e.mode) });
    }
    return placed;
  }

  /**
   * After the layer is stored: each file of the index whose stored bytes are its blob's (hashed as git does, so a
   * file the build changed is never remembered) is offered to the next builds.
   */
  remember(testbed: string, entries: readonly IndexEntry[], manifest: LayerManifest): void {
    const objects = new Map<string, { object: ObjectId; size: number }>();
    for (const e of manifest.trees["testbed"]?.entries ?? [])
      if (e.type === "file" && typeof e.path === "string") objects.set(e.path, { object: e.object, size: e.size });
    const fresh: Record<string, { object: ObjectId; size: number }> = {};
    for (const e of entries) {
      const o = objects.get(e.path);
      if (!o || !/^100(644|755)$/.test(e.mode) || o.object.endsWith("x") !== (e.mode === "100755")) continue;
      const key = `${e.mode} ${e.blob}`;
      // Linked here and stored as that very object: known to be its blob's bytes already.
      if (this.linked.get(`testbed/${e.path}`)?.object === o.object) {
        fresh[key] = o;
        continue;
      }
      let bytes: Buffer;
      try {
        bytes = readFileSync(join(testbed, e.path));
      } catch {
        continue;
      }
      if (blobId(bytes, e.blob.length) === e.blob) fresh[key] = o;
    }
    // The newest last: this layer's blobs, then the others remembered before, are what is kept.
    const older = Object.entries(this.known()).filter(([k]) => !(k in fresh));
    const all = [...older, ...Object.entries(fresh)];
    const kept = Object.fromEntries(all.slice(Math.max(0, all.length - BLOBS_KEPT)));
    mkdirSync(dirname(this.record), { recursive: true });
    const tmp = `${this.record}.tmp-${process.pid}`;
    writeFileSync(tmp, JSON.stringify(kept));
    renameSync(tmp, this.record);
  }
}

/** `git ls-files -s -z` output → its entries. */
export function indexEntries(out: string): IndexEntry[] {
  const entries: IndexEntry[] = [];
  for (const rec of out.split("\0")) {
    const m = /^(\d{6}) ([0-9a-f]{40,64}) \d+\t(.+)$/s.exec(rec);
    if (m) entries.push({ mode: m[1]!, blob: m[2]!, path: m[3]! });
  }
  return entries;
}

/** Paths for which `git check-attr -z` (of `CONVERSION_ATTRIBUTES`) said every one is unspecified. */
export function plainPaths(checkAttr: string): Set<string> {
  const parts = checkAttr.split("\0");
  const converted = new Set<string>();
  const seen = new Set<string>();
  for (let i = 0; i + 2 < parts.length; i += 3) {
    seen.add(parts[i]!);
    if (parts[i + 2] !== "unspecified") converted.add(parts[i]!);
  }
  return new Set([...seen].filter((p) => !converted.has(p)));
}

/** What a checkout by this process writes for a git mode (its umask applied). */
function checkoutMode(mode: string): number {
  return (mode === "100755" ? 0o777 : 0o666) & ~process.umask();
}

/** git's object id of a blob: SHA-1, or SHA-256 for a repository of 64-digit ids. */
function blobId(bytes: Buffer, digits: number): string {
  const h = createHash(digits === 64 ? "sha256" : "sha1");
  h.update(`blob ${bytes.length}\0`);
  return h.update(bytes).digest("hex");
}
