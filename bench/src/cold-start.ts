/**
 * Workload 12, cold start: a layer not in the node cache, until its first sandbox answers `echo ready`, in the two
 * forms the node cache can give it — its metadata image, mounted by the sandbox's launch (the default where the host
 * can), and materialized by hard links (the fallback) — in interleaved rounds, on the environment's primary layer, on
 * a generated tree of `treeFiles` files (the size of an image's root filesystem), and on an OCI image's root
 * filesystem of about as many files (the fixture's instance image with a layer of generated packages: several owners,
 * hard links, symlinks) started as a sandbox on that image is (`imageRoot`).
 */
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import type { LayerForm, NodeCache } from "../../src/env/cache/index.js";
import { nodeCacheFor } from "../../src/env/environments.js";
import { imageRoot } from "../../src/env/image-root.js";
import { importImage } from "../../src/env/images/index.js";
import {
  findStoredLayerImage,
  hasLayer,
  ingestLayer,
  normalizeMtimes,
  openStore,
  readManifest,
  type Store,
  storeLayerImage,
  summarizeManifest,
} from "../../src/env/store/index.js";
import { bulkFixtureImage, fixtureImages } from "../../src/fixtures/images.js";
import type { SandboxOptions } from "../../src/sandbox/sandbox.js";
import { TESTBED_PATH, VENV_PATH } from "../../src/env/types.js";
import { Workspace } from "../../src/env/workspace.js";
import { homeLayout } from "../../src/util/home.js";
import { evictLayer } from "./ready.js";
import type { BenchEnvironment } from "./setup.js";
import { summarize } from "./stats.js";
import type { ColdStartLayer, ColdStartResult, Unavailable } from "./types.js";

export interface ColdStartOptions {
  env: BenchEnvironment;
  work: string;
  runs: number;
  treeFiles: number;
  /** Also an OCI image's root filesystem (its fixture image is built by podman). */
  imageRoot: boolean;
  log: (m: string) => void;
}

interface Subject {
  name: string;
  key: string;
  /** The layer leased in `form` as a sandbox's options, and the lease to give back. */
  open(cache: NodeCache, form: LayerForm): Promise<{ options: SandboxOptions; release: () => Promise<void> }>;
}

/** A layer whose trees the sandbox sees at `targets` (tree name -> path). */
function treesSubject(name: string, key: string, targets: Record<string, string>): Subject {
  return {
    name,
    key,
    open: async (cache, form) => {
      const lease = await cache.acquire(key, { form });
      const overlays = Object.entries(targets).map(([tree, target]) => ({ lower: [lease.trees[tree]!], target }));
      return { options: { overlays }, release: () => lease.release() };
    },
  };
}

/** The root filesystem of an image of about `files` files, imported once into the bench's store. */
async function imageSubject(o: ColdStartOptions): Promise<Subject> {
  const set = await fixtureImages({ instances: 2, c: true, log: o.log });
  // The instance image's own root holds about 14k files.
  const bulk = await bulkFixtureImage(set, { files: Math.max(1000, o.treeFiles - 14_000), log: o.log });
  const store = openStore(homeLayout(o.env.home).store);
  const r = await importImage(store, bulk.layout, { name: bulk.name });
  const ref = r.refs[0]!;
  return {
    name: "image root",
    key: r.image.rootfs,
    open: async (cache, form) => {
      const root = await imageRoot(cache, ref, { form });
      return { options: root.options, release: root.release };
    },
  };
}

const FORMS: LayerForm[] = ["image", "tree"];

export async function benchColdStart(o: ColdStartOptions): Promise<ColdStartResult | Unavailable> {
  const cache = nodeCacheFor(o.env.home);
  const choice = await cache.formChoice();
  if (choice.form !== "image") return { available: false, reason: choice.reason };
  const subjects: Subject[] = [
    treesSubject("environment layer", o.env.primaryKey, { testbed: TESTBED_PATH, venv: VENV_PATH }),
    treesSubject("generated tree", await generatedLayer(o), { root: TESTBED_PATH }),
    ...(o.imageRoot ? [await imageSubject(o)] : []),
  ];
  const samples = new Map<string, { readyMs: number[]; placeMs: number[] }>();
  for (const s of subjects) for (const f of FORMS) samples.set(`${s.key}/${f}`, { readyMs: [], placeMs: [] });
  const writeMs = new Map<string, number[]>(subjects.map((s) => [s.key, []]));
  const store = openStore(homeLayout(o.env.home).store);
  for (let round = 0; round < o.runs; round++) {
    for (const s of subjects) {
      writeMs.get(s.key)!.push(await rewriteImage(store, s.key));
      // Each round starts with the other form, so neither always runs on a page cache the other warmed.
      for (const form of round % 2 ? [...FORMS].reverse() : FORMS) {
        const r = await coldReady(o.env.home, s, form);
        const into = samples.get(`${s.key}/${form}`)!;
        into.readyMs.push(r.readyMs);
        into.placeMs.push(r.placeMs);
      }
    }
    o.log(`cold start: round ${round + 1}/${o.runs}`);
  }
  const layers: ColdStartLayer[] = [];
  for (const s of subjects) {
    const m = summarizeManifest(await readManifest(openStore(homeLayout(o.env.home).store), s.key));
    const of = (f: LayerForm) => samples.get(`${s.key}/${f}`)!;
    layers.push({
      name: s.name,
      files: m.files + m.hardlinks,
      entries: m.files + m.hardlinks + m.dirs + m.symlinks,
      image: {
        ready: summarize(of("image").readyMs),
        place: summarize(of("image").placeMs),
        write: summarize(writeMs.get(s.key)!),
      },
      links: { ready: summarize(of("tree").readyMs), place: summarize(of("tree").placeMs) },
    });
  }
  return { available: true, runs: o.runs, reason: choice.reason, layers };
}

/** The layer's image as the store keeps it, removed and written again: what a build, fetch or pull adds (ms). */
async function rewriteImage(store: Store, key: string): Promise<number> {
  const had = await findStoredLayerImage(store, key);
  if (had) await Promise.all([had.path, had.path.replace(/\.erofs$/, ".json")].map((p) => fsp.rm(p, { force: true })));
  const t = performance.now();
  await storeLayerImage(store, key);
  return performance.now() - t;
}

/** Evicted, then acquired in `form` and started through the door, until `echo ready` is answered. */
async function coldReady(home: string, s: Subject, form: LayerForm): Promise<{ readyMs: number; placeMs: number }> {
  await evictLayer(home, s.key);
  const cache = nodeCacheFor(home);
  let placeMs = 0;
  const onPlaced = (e: { key: string; durationMs: number }): void => {
    if (e.key === s.key) placeMs = e.durationMs;
  };
  cache.on("materialize", onPlaced);
  const t = performance.now();
  try {
    const { options, release } = await s.open(cache, form);
    const ws = new Workspace({ kind: "env_key", options: { home, ...options }, release });
    const sb = await ws.start();
    ws.release();
    try {
      const r = await sb.exec("echo ready");
      if (r.stdout !== "ready\n") throw new Error(`cold start (${form}): ${r.stderr.trim().slice(-200)}`);
      return { readyMs: performance.now() - t, placeMs };
    } finally {
      await sb.close();
    }
  } finally {
    cache.off("materialize", onPlaced);
  }
}

/** A layer of `treeFiles` small distinct files in 100-file directories, ingested once into the bench's store. */
async function generatedLayer(o: ColdStartOptions): Promise<string> {
  const key = `bench-tree-${o.treeFiles}`;
  const store = openStore(homeLayout(o.env.home).store);
  if (await hasLayer(store, key)) return key;
  o.log(`cold start: generating a ${o.treeFiles}-file tree`);
  const src = join(o.work, `cold-tree-${o.treeFiles}`);
  await fsp.rm(src, { recursive: true, force: true });
  for (let d = 0; d * 100 < o.treeFiles; d++) {
    const dir = join(src, "root", `d${Math.floor(d / 20)}`, `pkg${d}`);
    await fsp.mkdir(dir, { recursive: true });
    const n = Math.min(100, o.treeFiles - d * 100);
    await Promise.all(
      Array.from({ length: n }, (_, i) =>
        fsp.writeFile(join(dir, `f${i}.py`), `# ${d}/${i}\nvalue = ${d * 100 + i}\n`),
      ),
    );
  }
  await normalizeMtimes(join(src, "root"));
  await ingestLayer(store, key, { root: join(src, "root") });
  await fsp.rm(src, { recursive: true, force: true });
  return key;
}
