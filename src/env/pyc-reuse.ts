/**
 * Bytecode reuse across the builds of one repository. A testbed source that is byte for byte the same, at the same
 * path, as in one of the last layers built from that repository with the same interpreter gets that layer's `.pyc`
 * files before compileall runs, which then compiles only the rest (it keeps a `.pyc` whose header matches its
 * source). A reused `.pyc` was compiled from the very same bytes at the very same path (which it records) by the
 * very same interpreter, with the normalized mtime every built source has: a changed source never matches.
 */
import { createHash } from "node:crypto";
import { chownSync, copyFileSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { homeLayout } from "../util/home.js";
import { objectIdFor } from "./store/layout.js";
import { linkObject, objectPath, readManifest, type LinkedObject, type ObjectId } from "./store/index.js";
import type { Store } from "./store/index.js";
import type { LayerKey } from "./types.js";

/** What compileall writes in the build sandbox (umask 022): a reused `.pyc` is recorded as one it wrote. */
const PYC_MODE = 0o644;
/** Layers of one repository and interpreter whose bytecode is offered to the next build. */
const LAYERS_KEPT = 4;

/** What a build's bytecode depends on besides its sources. */
export interface PycScope {
  repo: string;
  /** The interpreter's path and full version. */
  python: string;
  version: string;
}

interface Pyc {
  rel: string;
  object: ObjectId;
}

export class PycReuse {
  private readonly record: string;
  /** `a/__pycache__/b.cpython-39.pyc` (or `.opt-1.pyc`) → `a/b.py`, for this interpreter's tag only. */
  private readonly pycName: RegExp;
  /** The `.pyc` files placed as hard links to objects, by `testbed/<path>` (`IngestOptions.linked`). */
  readonly linked = new Map<string, LinkedObject>();

  /** `link`: hard links are safe (the build's writer is another user than the store's owner); else copies. */
  constructor(
    home: string,
    private readonly store: Store,
    scope: PycScope,
    private readonly link: boolean,
  ) {
    const id = createHash("sha256")
      .update(JSON.stringify([scope.repo, scope.python, scope.version]))
      .digest("hex");
    this.record = join(homeLayout(home).envs, "pyc", `${id}.json`);
    const [major, minor] = scope.version.split(".");
    this.pycName = new RegExp(`^(?:(.*)/)?__pycache__/([^/]+)\\.cpython-${major}${minor}(?:\\.opt-[12])?\\.pyc$`);
  }

  private sourceOf(path: string): string | undefined {
    const m = this.pycName.exec(path);
    if (!m) return undefined;
    return m[1] ? `${m[1]}/${m[2]}.py` : `${m[2]}.py`;
  }

  private layers(): LayerKey[] {
    try {
      return (JSON.parse(readFileSync(this.record, "utf8")) as { layers: LayerKey[] }).layers;
    } catch {
      return [];
    }
  }

  /** `<source path>\0<source object>` → its `.pyc` files, from the recorded layers (the newest first wins). */
  private async known(): Promise<Map<string, Pyc[]>> {
    const byKey = new Map<string, Pyc[]>();
    for (const key of this.layers()) {
      const m = await readManifest(this.store, key).catch(() => undefined);
      if (!m?.trees["testbed"]) continue;
      const sources = new Map<string, ObjectId>();
      const pycs = new Map<string, Pyc[]>();
      for (const e of m.trees["testbed"].entries) {
        if (e.type !== "file" || typeof e.path !== "string") continue;
        if (e.path.endsWith(".py")) sources.set(e.path, e.object);
        const source = this.sourceOf(e.path);
        if (source) pycs.set(source, [...(pycs.get(source) ?? []), { rel: e.path, object: e.object }]);
      }
      for (const [source, list] of pycs) {
        const object = sources.get(source);
        const k = `${source}\0${object}`;
        if (object && !byKey.has(k)) byKey.set(k, list);
      }
    }
    return byKey;
  }

  /**
   * Give the testbed's sources the `.pyc` files of identical sources; a `__pycache__` made here goes to `owner`
   * (the build sandbox's writer, so compileall can add the rest). Returns how many files were placed.
   */
  async place(testbed: string, owner: { uid: number; gid: number }): Promise<number> {
    const known = await this.known();
    if (known.size === 0) return 0;
    let placed = 0;
    for (const rel of pythonSources(testbed)) {
      const abs = join(testbed, rel);
      const st = lstatSync(abs);
      const id = objectIdFor(createHash("sha256").update(readFileSync(abs)).digest("hex"), (st.mode & 0o111) !== 0);
      for (const pyc of known.get(`${rel}\0${id}`) ?? []) {
        const dest = join(testbed, pyc.rel);
        const dir = join(dest, "..");
        if (!existsSync(dir)) {
          mkdirSync(dir);
          chownSync(dir, owner.uid, owner.gid);
        }
        if (existsSync(dest)) continue;
        if (this.link && linkObject(this.store, pyc.object, dest))
          this.linked.set(`testbed/${pyc.rel}`, { object: pyc.object, mode: PYC_MODE });
        else copyFileSync(objectPath(this.store, pyc.object), dest);
        placed++;
      }
    }
    return placed;
  }

  /** After the layer is stored: offer its bytecode to the next builds. */
  remember(key: LayerKey): void {
    const layers = [key, ...this.layers().filter((k) => k !== key)].slice(0, LAYERS_KEPT);
    mkdirSync(join(this.record, ".."), { recursive: true });
    const tmp = `${this.record}.tmp-${process.pid}`;
    writeFileSync(tmp, JSON.stringify({ layers }));
    renameSync(tmp, this.record);
  }
}

/** Every regular `.py` file of the testbed (its `.git` left out), by path relative to it. */
function pythonSources(testbed: string): string[] {
  const out: string[] = [];
  const visit = (rel: string): void => {
    for (const d of readdirSync(join(testbed, rel), { withFileTypes: true })) {
      const child = rel ? `${rel}/${d.name}` : d.name;
      if (d.isDirectory() && !(rel === "" && d.name === ".git") && d.name !== "__pycache__") visit(child);
      else if (d.isFile() && d.name.endsWith(".py")) out.push(child);
    }
  };
  visit("");
  return out;
}
