/**
 * The year packs of chronological testbeds (`repos.ts`), written once per home: a range's pack is the same bytes
 * for every commit that reaches it, so after the first build stored it, later testbeds take it from the store (a
 * hard link where the build sandbox cannot write it, else a copy) instead of running `git pack-objects` again.
 * A record names the range by its two commits, so it can only ever give the objects of that range: what the range's
 * last commit reaches and the previous one does not, all of it older than any commit whose history holds the range.
 */
import { copyFileSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { homeLayout } from "../util/home.js";
import { hasObjectSync } from "./store/objects.js";
import { linkObject, objectPath, type LayerManifest, type LinkedObject, type ObjectId } from "./store/index.js";
import type { Store } from "./store/index.js";
import type { PackRange, PackSource } from "./repos.js";

/** Where a range's pack files are in the store: by file suffix (`pack`, `idx`, `rev`). */
interface RangeRecord {
  name: string;
  files: Record<string, { object: ObjectId; size: number }>;
}

const PACK_DIR = ".git/objects/pack";
/** git writes its packs and their indexes read-only. */
const PACK_MODE = 0o444;

export class HistoryPacks implements PackSource {
  private readonly dir: string;
  /** The files placed as hard links to objects, by `testbed/<path>` (for the ingest: `IngestOptions.linked`). */
  readonly linked = new Map<string, LinkedObject>();

  /** `link`: hard links are safe (the build's writer is another user than the store's owner); else copies. */
  constructor(
    home: string,
    private readonly store: Store,
    private readonly link: boolean,
  ) {
    this.dir = join(homeLayout(home).envs, "history");
  }

  private recordPath(r: PackRange): string {
    return join(this.dir, `${r.prev ?? "root"}-${r.tip}.json`);
  }

  private read(r: PackRange): RangeRecord | undefined {
    try {
      return JSON.parse(readFileSync(this.recordPath(r), "utf8")) as RangeRecord;
    } catch {
      return undefined;
    }
  }

  /**
   * The range's pack into `packDir` from the store, when an earlier build stored it: its name, else undefined
   * (never stored, or gone from the store since).
   */
  place(r: PackRange, packDir: string): string | undefined {
    const rec = this.read(r);
    if (!rec || !/^pack-[0-9a-f]{40,64}$/.test(rec.name)) return undefined;
    const files = Object.entries(rec.files);
    if (!files.some(([ext]) => ext === "pack") || !files.some(([ext]) => ext === "idx")) return undefined;
    if (!files.every(([, f]) => hasObjectSync(this.store, f.object, f.size))) return undefined;
    for (const [ext, f] of files) {
      const dest = join(packDir, `${rec.name}.${ext}`);
      if (this.link && linkObject(this.store, f.object, dest))
        this.linked.set(`testbed/${PACK_DIR}/${rec.name}.${ext}`, { object: f.object, mode: PACK_MODE });
      else copyFileSync(objectPath(this.store, f.object), dest);
    }
    return rec.name;
  }

  /** After the layer is stored: where each range's files are, for the next builds (first writer wins). */
  remember(ranges: readonly PackRange[], manifest: LayerManifest): void {
    const entries = new Map<string, { object: ObjectId; size: number }>();
    for (const e of manifest.trees["testbed"]?.entries ?? [])
      if (e.type === "file" && typeof e.path === "string" && e.path.startsWith(`${PACK_DIR}/`))
        entries.set(e.path.slice(PACK_DIR.length + 1), { object: e.object, size: e.size });
    mkdirSync(this.dir, { recursive: true });
    for (const r of ranges) {
      if (!r.name || this.read(r)) continue;
      const files: RangeRecord["files"] = {};
      for (const ext of ["pack", "idx", "rev"]) {
        const f = entries.get(`${r.name}.${ext}`);
        if (f) files[ext] = f;
      }
      if (!files["pack"] || !files["idx"]) continue;
      const path = this.recordPath(r);
      const tmp = `${path}.tmp-${process.pid}`;
      writeFileSync(tmp, JSON.stringify({ name: r.name, files } satisfies RangeRecord));
      renameSync(tmp, path);
    }
  }
}
