/**
 * Workload 2, storage for N instances of one repository: our store (objects shared across layers, plus the node
 * cache's directories when all N are materialized: its files are hard links to the objects), one tar.gz pair per task,
 * and podman's overlay layers for N images. All figures are allocated disk bytes (du), inodes counted once.
 */
import { homeLayout } from "../util/home.js";
import { nodeCacheFor } from "../env/environments.js";
import { manifestPath, objectPath, openStore } from "../env/store/layout.js";
import { readManifest, referencedObjects } from "../env/store/manifest.js";
import type { CacheLease } from "../env/cache/index.js";
import { DiskUsage } from "./du.js";
import { ensureTarballs } from "./extract.js";
import { Podman } from "./podman.js";
import { ensureEnvImageFor } from "./ready.js";
import type { BenchEnvironment } from "./setup.js";
import type { StoragePoint, Unavailable } from "./types.js";

export async function benchStorage(opts: {
  env: BenchEnvironment;
  work: string;
  ns: number[];
  podman: Podman | Unavailable;
  log: (m: string) => void;
}): Promise<{ points: StoragePoint[]; podmanNote?: string }> {
  const { env } = opts;
  const store = openStore(homeLayout(env.home).store);
  const cache = nodeCacheFor(env.home);
  // N environments: instances sharing one (SWE-smith tasks on one snapshot) count once.
  const distinct = [...new Set(env.instances.map((i) => env.keys.get(i.instance_id)!))];
  const keys = distinct.slice(0, Math.max(...opts.ns));
  const points: StoragePoint[] = [];
  const leases: CacheLease[] = [];
  let podmanNote: string | undefined;
  const images: string[] = [];
  let podman = opts.podman instanceof Podman ? opts.podman : undefined;
  try {
    const tarBytes: number[] = [];
    for (const [i, key] of keys.entries()) {
      const lease = await cache.acquire(key);
      leases.push(lease);
      tarBytes.push(
        (await ensureTarballs(opts.work, key, { testbed: lease.trees["testbed"]!, venv: lease.trees["venv"]! })).bytes,
      );
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
    const toolchainImage = podman
      ? await podman.ensureToolchainImage(env.toolchain.version, env.toolchain.mounts)
      : undefined;
    for (const n of opts.ns) {
      if (n > keys.length) continue;
      const subset = keys.slice(0, n);
      // Store: objects referenced by these layers (each once) + their manifests.
      const store_ = new DiskUsage();
      let logical = 0;
      for (const key of subset) {
        const m = await readManifest(store, key);
        for (const [id, size] of referencedObjects(m)) {
          logical += size;
          await store_.add(objectPath(store, id));
        }
        await store_.add(manifestPath(store, key));
      }
      const storeBytes = store_.allocated;
      // Node cache: the materialized trees; files are hard links to objects already counted, directories are new.
      for (const key of subset) await store_.add(cache.layerPath(key));
      let podmanPoint: { envBytes: number; totalBytes: number; listedBytes: number } | undefined;
      if (podman && toolchainImage && images.length >= n)
        podmanPoint = await podman.diskUse(images.slice(0, n), [toolchainImage]);
      points.push({
        n,
        minisandboxBytes: store_.allocated,
        minisandboxStoreBytes: storeBytes,
        minisandboxLogicalBytes: logical,
        targzBytes: tarBytes.slice(0, n).reduce((a, b) => a + b, 0),
        podmanBytes: podmanPoint?.envBytes ?? null,
        podmanTotalBytes: podmanPoint?.totalBytes ?? null,
        podmanListedBytes: podmanPoint?.listedBytes ?? null,
      });
    }
  } finally {
    for (const l of leases) await l.release();
  }
  if (keys.length < Math.max(...opts.ns)) {
    const why = `only ${keys.length} distinct environment(s) among ${env.instances.length} instance(s): larger N skipped`;
    podmanNote = [podmanNote, why].filter(Boolean).join("; ");
  }
  return { points, podmanNote };
}
