/**
 * Workload 2, storage for N instances of one repository: our store (objects shared across layers, plus the node
 * cache's directories when all N are materialized: its files are hard links to the objects), one tar.gz pair per task,
 * and podman's overlay layers for N images. All figures are allocated disk bytes (du), inodes counted once.
 */
import { homeLayout } from "../../src/util/home.js";
import { nodeCacheFor } from "../../src/env/environments.js";
import { manifestPath, objectPath, openStore, type Store } from "../../src/env/store/layout.js";
import { readManifest, referencedObjects } from "../../src/env/store/manifest.js";
import type { CacheLease, NodeCache } from "../../src/env/cache/index.js";
import { DiskUsage } from "./du.js";
import { ensureTarballs } from "./extract.js";
import { Podman } from "./podman.js";
import { ensureEnvImageFor } from "./ready.js";
import type { BenchEnvironment } from "./setup.js";
import type { StoragePoint, Unavailable } from "./types.js";

interface StorageOptions {
  env: BenchEnvironment;
  work: string;
  ns: number[];
  podman: Podman | Unavailable;
  log: (m: string) => void;
}

export async function benchStorage(opts: StorageOptions): Promise<{ points: StoragePoint[]; podmanNote?: string }> {
  const { env } = opts;
  const store = openStore(homeLayout(env.home).store);
  const cache = nodeCacheFor(env.home);
  // N environments: instances sharing one (SWE-smith tasks on one snapshot) count once.
  const distinct = [...new Set(env.instances.map((i) => env.keys.get(i.instance_id)!))];
  const keys = distinct.slice(0, Math.max(...opts.ns));
  const points: StoragePoint[] = [];
  const leases: CacheLease[] = [];
  let podmanNote: string | undefined;
  try {
    const made = await archiveAndImage(opts, keys, leases);
    podmanNote = made.podmanNote;
    const { podman, images } = made;
    const toolchainImage = podman
      ? await podman.ensureToolchainImage(env.toolchain.version, env.toolchain.mounts)
      : undefined;
    for (const n of opts.ns) {
      if (n > keys.length) continue;
      const subset = keys.slice(0, n);
      const ours = await minisandboxBytes(store, cache, subset);
      let podmanPoint: { envBytes: number; totalBytes: number; listedBytes: number } | undefined;
      if (podman && toolchainImage && images.length >= n)
        podmanPoint = await podman.diskUse(images.slice(0, n), [toolchainImage]);
      points.push({
        n,
        ...ours,
        targzBytes: made.tarBytes.slice(0, n).reduce((a, b) => a + b, 0),
        podmanBytes: podmanPoint?.envBytes ?? null,
        podmanTotalBytes: podmanPoint?.totalBytes ?? null,
        podmanListedBytes: podmanPoint?.listedBytes ?? null,
      });
    }
  } finally {
    for (const l of leases) await l.release();
  }
  if (keys.length < Math.max(...opts.ns)) {
    const among = `among ${env.instances.length} instance(s)`;
    const why = `only ${keys.length} distinct environment(s) ${among}: larger N skipped`;
    podmanNote = [podmanNote, why].filter(Boolean).join("; ");
  }
  return { points, podmanNote };
}

/**
 * Every environment materialized (its lease kept in `leases`), archived as a tar.gz pair and, while podman works, made
 * an image; podman is dropped (with a note) at its first failure.
 */
async function archiveAndImage(
  opts: StorageOptions,
  keys: string[],
  leases: CacheLease[],
): Promise<{ tarBytes: number[]; images: string[]; podman?: Podman; podmanNote?: string }> {
  const { env } = opts;
  const cache = nodeCacheFor(env.home);
  const tarBytes: number[] = [];
  const images: string[] = [];
  let podman = opts.podman instanceof Podman ? opts.podman : undefined;
  let podmanNote: string | undefined;
  for (const [i, key] of keys.entries()) {
    const lease = await cache.acquire(key, { form: "tree" });
    leases.push(lease);
    const trees = { testbed: lease.trees["testbed"]!, venv: lease.trees["venv"]! };
    tarBytes.push((await ensureTarballs(opts.work, key, trees)).bytes);
    if (podman) {
      try {
        images.push(await ensureEnvImageFor(env, podman, key));
      } catch (e) {
        podmanNote = `podman image build failed: ${(e as Error).message.split("\n")[0]}`;
        podman = undefined;
      }
    }
    if ((i + 1) % 5 === 0)
      opts.log(`storage: ${i + 1}/${keys.length} environments archived${podman ? " and imaged" : ""}`);
  }
  return { tarBytes, images, ...(podman ? { podman } : {}), ...(podmanNote ? { podmanNote } : {}) };
}

/** Our bytes for these layers: the store's objects (each once) and manifests, then with the node cache's trees. */
async function minisandboxBytes(
  store: Store,
  cache: NodeCache,
  subset: string[],
): Promise<Pick<StoragePoint, "minisandboxBytes" | "minisandboxStoreBytes" | "minisandboxLogicalBytes">> {
  const du = new DiskUsage();
  let logical = 0;
  for (const key of subset) {
    const m = await readManifest(store, key);
    for (const [id, size] of referencedObjects(m)) {
      logical += size;
      await du.add(objectPath(store, id));
    }
    await du.add(manifestPath(store, key));
  }
  const storeBytes = du.allocated;
  // Node cache: the materialized trees; files are hard links to objects already counted, directories are new.
  for (const key of subset) await du.add(cache.layerPath(key));
  return { minisandboxBytes: du.allocated, minisandboxStoreBytes: storeBytes, minisandboxLogicalBytes: logical };
}
