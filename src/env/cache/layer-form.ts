/**
 * How this node shows layers to sandboxes: `image` (a metadata image per layer, mounted by each sandbox's launch over
 * the store's objects: no file per entry on disk, cold start in milliseconds) where the kernel and the privileges
 * allow it, else `tree` (materialized by hard links). Decided once per store and process by trying the real thing.
 */
import { execFile } from "node:child_process";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { errMessage } from "../../errors.js";
import { helperPath, idPool, launchMode } from "../../sandbox/host.js";
import { imageLower } from "../../sandbox/plan.js";
import { erofsImage } from "../store/erofs.js";
import { NORMALIZED_MTIME_SEC, removeTree, scratchName } from "../store/fsutil.js";
import { configuredStoreIds } from "../store/ids.js";
import type { Store } from "../store/layout.js";
import { lockFile } from "../store/lock.js";

export type LayerForm = "tree" | "image";

export interface FormChoice {
  form: LayerForm;
  /** Why, in one line (doctor shows it). */
  reason: string;
}

const choices = new Map<string, Promise<FormChoice>>();

/** The form for layers of `store` on this host: a probe image mounted the way a launch does, read back. */
export function chooseLayerForm(store: Store): Promise<FormChoice> {
  let c = choices.get(store.root);
  if (!c) {
    c = probe(store);
    choices.set(store.root, c);
  }
  return c;
}

const PROBE_TEXT = "minisandbox layer image probe\n";

async function probe(store: Store): Promise<FormChoice> {
  if (launchMode() !== "root")
    return { form: "tree", reason: "layers materialized by hard links: mounting layer images needs root" };
  // The probe's object lives beside the store's objects (same filesystem: it must support id-mapped mounts too).
  const dir = join(store.tmpDir, scratchName("image-probe-"));
  // Held shared like an ingest's: gc (exclusive) never clears tmp/ under the probe.
  const lock = await lockFile(store.lockPath, { shared: true });
  try {
    await fsp.mkdir(join(dir, "objects", "ab"), { recursive: true });
    // As an image's object is: owned by the store's range (no sandbox maps it), readable by its owner alone.
    const object = join(dir, "objects", "ab", "cd");
    await fsp.writeFile(object, PROBE_TEXT, { mode: 0o600 });
    await fsp.chown(object, configuredStoreIds().base, configuredStoreIds().base);
    const attrs = { mode: 0o555, uid: 0, gid: 0, mtimeSec: NORMALIZED_MTIME_SEC };
    const file = { kind: "file" as const, ...attrs, mode: 0o444, size: PROBE_TEXT.length, redirect: "/ab/cd" };
    const tree = { kind: "dir" as const, ...attrs, entries: [{ name: "f", node: file }] };
    await fsp.writeFile(
      join(dir, "probe.erofs"),
      erofsImage({ kind: "dir", ...attrs, entries: [{ name: "t", node: tree }] }),
    );
    const lower = imageLower({ image: join(dir, "probe.erofs"), objects: join(dir, "objects"), tree: "t" });
    const out = await helperOutput(["check-image", lower, "f", String(idPool().base)]);
    if (out === PROBE_TEXT)
      return { form: "image", reason: "layers mounted from metadata images over the store (EROFS + overlayfs)" };
    return { form: "tree", reason: "layers materialized by hard links: a probe image read back wrong" };
  } catch (e) {
    return {
      form: "tree",
      reason: `layers materialized by hard links: layer images cannot be mounted here (${errMessage(e)})`,
    };
  } finally {
    await removeTree(dir).catch(() => undefined);
    await lock.release();
  }
}

function helperOutput(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(helperPath(), args, { encoding: "utf8", timeout: 10_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(stderr.trim().split("\n")[0] || errMessage(err)));
      else resolve(stdout);
    });
  });
}
