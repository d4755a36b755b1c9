/**
 * Layer -> read-only directory. Files are hard links to the store's objects when both live on one filesystem
 * (instant, no extra space), copies otherwise or when an object has too many links (EMLINK).
 */
import { constants } from "node:fs";
import * as fsp from "node:fs/promises";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { errCode, InvalidInputError, StoreCorruptError } from "../../errors.js";
import type { LayerKey } from "../types.js";
import { mapLimit, NORMALIZED_MTIME_SEC, removeTree } from "./fsutil.js";
import { canChown, storeIds } from "./ids.js";
import { objectMode, objectPath, type ObjectId, type Store } from "./layout.js";
import { objectMtime, objectOwner } from "./objects.js";
import { readManifest, summarizeManifest, type FileEntry, type LayerManifest, type TreeManifest } from "./manifest.js";
import { decodeName, displayName, joinBytes, pathKey } from "./names.js";

export interface MaterializeOptions {
  /** "auto" (default): links when the store and dest share a filesystem, else copies. */
  mode?: "auto" | "link" | "copy";
  /** Copy instead of linking once an object has this many links (ext4 allows 65000; injectable for tests). */
  maxLinks?: number;
  /** Filesystem operations in flight (default 16). */
  concurrency?: number;
  /** Awaited before copying `bytes` (the node cache's I/O budget plugs in here). */
  throttle?: (bytes: number) => Promise<void>;
}

export interface MaterializeResult {
  path: string;
  /** Tree name -> absolute path of the materialized tree. */
  trees: Record<string, string>;
  files: number;
  /** Sum of the layer's file sizes (hard links counted once). */
  logicalBytes: number;
  linked: number;
  copied: number;
  bytesCopied: number;
  durationMs: number;
}

interface Ctx {
  store: Store;
  manifest: LayerManifest;
  link: boolean;
  maxLinks: number;
  throttle?: (bytes: number) => Promise<void>;
  /** Links each object has (including ours so far), loaded once per object; exact under concurrency. */
  linkCounts: Map<ObjectId, Promise<{ n: number }>>;
  result: MaterializeResult;
}

/** Materialize layer `key` at `dest` (which must not exist): one subdirectory per tree, everything read-only. */
export async function materializeLayer(
  store: Store,
  key: LayerKey,
  dest: string,
  opts: MaterializeOptions = {},
): Promise<MaterializeResult> {
  const started = performance.now();
  const manifest = await readManifest(store, key);
  await fsp.mkdir(dirname(dest), { recursive: true });
  try {
    await fsp.mkdir(dest, { mode: 0o700 });
  } catch (e) {
    if (errCode(e) === "EEXIST") throw new InvalidInputError(`cannot materialize layer ${key}: ${dest} already exists`);
    throw e;
  }
  const mode = opts.mode ?? "auto";
  const sameFs = (await fsp.stat(store.objectsDir)).dev === (await fsp.stat(dest)).dev;
  const result: MaterializeResult = {
    path: dest,
    trees: {},
    files: 0,
    logicalBytes: summarizeManifest(manifest).logicalBytes,
    linked: 0,
    copied: 0,
    bytesCopied: 0,
    durationMs: 0,
  };
  const ctx: Ctx = {
    store,
    manifest,
    link: mode === "link" || (mode === "auto" && sameFs),
    maxLinks: opts.maxLinks ?? Infinity,
    throttle: opts.throttle,
    linkCounts: new Map(),
    result,
  };
  try {
    for (const name of Object.keys(manifest.trees).sort()) {
      const treeDir = join(dest, name);
      await materializeTree(ctx, treeDir, manifest.trees[name]!, opts.concurrency ?? 16);
      result.trees[name] = treeDir;
    }
    await fsp.utimes(dest, NORMALIZED_MTIME_SEC, NORMALIZED_MTIME_SEC);
    // An image's tree keeps its own modes (a world-writable /tmp...): only the owner may even reach it.
    const image = Object.values(manifest.trees).some((t) => t.owner !== undefined);
    await fsp.chmod(dest, image ? 0o500 : 0o555);
  } catch (e) {
    await removeTree(dest);
    throw e;
  }
  result.durationMs = performance.now() - started;
  return result;
}

/** Read-only, but the owner keeps read+search so the tree can be walked and removed. */
export const readOnlyDirMode = (mode: number): number => (mode & 0o555) | 0o500;

/** An image's directory: setuid means nothing on one; setgid (entries inherit the group) and sticky (/tmp) are kept. */
export const imageDirMode = (mode: number): number => mode & 0o3777;

/** How a tree's directories and symlinks get their mode and owner: read-only (built), or as the image says. */
interface TreeAttrs {
  image: boolean;
  dirMode(mode: number): number;
  chown(abs: Buffer, uid?: number, gid?: number): Promise<void>;
}

function treeAttrs(store: Store, tree: TreeManifest): TreeAttrs {
  if (!tree.owner) return { image: false, dirMode: readOnlyDirMode, chown: async () => {} };
  const base = canChown() ? storeIds(store).base : undefined;
  return {
    image: true,
    dirMode: imageDirMode,
    chown: async (abs, uid = 0, gid = 0) => {
      if (base !== undefined) await fsp.lchown(abs, base + uid, base + gid);
    },
  };
}

async function materializeTree(ctx: Ctx, treeDir: string, tree: TreeManifest, concurrency: number): Promise<void> {
  const root = Buffer.from(treeDir);
  const attrs = treeAttrs(ctx.store, tree);
  await fsp.mkdir(root, { mode: 0o700 });
  const dirs: { abs: Buffer; mode: number }[] = [];
  /** Placed files by path, and whether they share the object's inode (hard links to them then count too). */
  const files = new Map<string, { entry: FileEntry; linked: boolean }>();
  // Parents precede children in a valid manifest, so dirs can be created in order.
  for (const e of tree.entries) {
    if (e.type !== "dir") continue;
    const abs = joinBytes(root, decodeName(e.path));
    await fsp.mkdir(abs, { mode: 0o700 });
    await attrs.chown(abs, e.uid, e.gid);
    dirs.push({ abs, mode: e.mode });
  }
  const leaves = tree.entries.filter((e) => e.type === "file" || e.type === "symlink");
  await mapLimit(leaves, concurrency, async (e) => {
    const rel = decodeName(e.path);
    const abs = joinBytes(root, rel);
    if (e.type === "symlink") {
      await fsp.symlink(decodeName(e.target), abs);
      await attrs.chown(abs, e.uid, e.gid);
      await fsp.lutimes(abs, NORMALIZED_MTIME_SEC, NORMALIZED_MTIME_SEC);
    } else if (e.type === "file") {
      const indexCopy = !attrs.image && isGitIndex(rel);
      files.set(pathKey(rel), { entry: e, linked: await placeFile(ctx, e, abs, displayName(rel), indexCopy) });
    }
  });
  await linkHardlinks(ctx, root, tree, files, concurrency);
  for (const d of dirs.reverse()) {
    await fsp.utimes(d.abs, NORMALIZED_MTIME_SEC, NORMALIZED_MTIME_SEC);
    await fsp.chmod(d.abs, attrs.dirMode(d.mode));
  }
  await attrs.chown(root, tree.owner?.uid, tree.owner?.gid);
  await fsp.utimes(root, NORMALIZED_MTIME_SEC, NORMALIZED_MTIME_SEC);
  await fsp.chmod(root, attrs.dirMode(tree.mode));
}

async function linkHardlinks(
  ctx: Ctx,
  root: Buffer,
  tree: TreeManifest,
  files: Map<string, { entry: FileEntry; linked: boolean }>,
  concurrency: number,
): Promise<void> {
  await mapLimit(
    tree.entries.filter((e) => e.type === "hardlink"),
    concurrency,
    async (e) => {
      if (e.type !== "hardlink") return;
      const target = decodeName(e.target);
      const first = joinBytes(root, target);
      const abs = joinBytes(root, decodeName(e.path));
      const { entry, linked } = files.get(pathKey(target))!;
      if (!linked || (await takeLink(ctx, entry.object))) {
        try {
          await fsp.link(first, abs);
          ctx.result.files++;
          if (linked) ctx.result.linked++;
          return;
        } catch (err) {
          if (errCode(err) !== "EMLINK") throw err;
        }
      }
      await copyFile(ctx, first, abs, entry.object, entry.size);
    },
  );
}

/**
 * A git index written in the same second as its work tree makes git treat every entry as "racily clean" and re-hash
 * the whole tree on the first `git status`/`git diff` in each sandbox. Index files are therefore private copies
 * one second newer than everything else (small: one per checkout).
 */
const isGitIndex = (rel: Buffer): boolean => {
  const path = rel.toString("latin1");
  return path === ".git/index" || path.endsWith("/.git/index");
};
export const GIT_INDEX_MTIME_SEC = NORMALIZED_MTIME_SEC + 1;

/** Link or copy one file; true when it was linked to the object. */
async function placeFile(ctx: Ctx, e: FileEntry, abs: Buffer, shown: string, indexCopy: boolean): Promise<boolean> {
  const src = objectPath(ctx.store, e.object);
  try {
    if (indexCopy) {
      await copyFile(ctx, src, abs, e.object, e.size);
      await fsp.utimes(abs, GIT_INDEX_MTIME_SEC, GIT_INDEX_MTIME_SEC);
      return false;
    }
    if (ctx.link && (await takeLink(ctx, e.object))) {
      try {
        await fsp.link(src, abs);
        ctx.result.files++;
        ctx.result.linked++;
        return true;
      } catch (err) {
        const code = errCode(err);
        if (code === "EXDEV") ctx.link = false;
        else if (code === "EMLINK") (await ctx.linkCounts.get(e.object)!).n = Infinity;
        else throw err;
      }
    }
    await copyFile(ctx, src, abs, e.object, e.size);
    return false;
  } catch (err) {
    if (errCode(err) === "ENOENT") {
      throw new StoreCorruptError(
        `layer ${ctx.manifest.key}: object ${e.object} (for ${shown}) is missing from store ${ctx.store.root}; ` +
          "run 'minisandbox store verify'",
      );
    }
    throw err;
  }
}

/** Reserve one link to the object if it stays under maxLinks; false means copy instead. */
async function takeLink(ctx: Ctx, id: ObjectId): Promise<boolean> {
  if (ctx.maxLinks === Infinity) return true;
  let count = ctx.linkCounts.get(id);
  if (!count) {
    count = fsp.lstat(objectPath(ctx.store, id)).then((st) => ({ n: st.nlink }));
    ctx.linkCounts.set(id, count);
  }
  const c = await count;
  if (c.n >= ctx.maxLinks) return false;
  c.n++;
  return true;
}

async function copyFile(ctx: Ctx, src: string | Buffer, abs: Buffer, id: ObjectId, size: number): Promise<void> {
  if (ctx.throttle) await ctx.throttle(size);
  await fsp.copyFile(src, abs, constants.COPYFILE_EXCL);
  const owner = objectOwner(ctx.store, id);
  if (owner) await fsp.chown(abs, owner.uid, owner.gid);
  await fsp.chmod(abs, objectMode(id));
  await fsp.utimes(abs, objectMtime(id), objectMtime(id));
  ctx.result.files++;
  ctx.result.copied++;
  ctx.result.bytesCopied += size;
}
