/**
 * Workload 11, images: N SWE-bench-style instance images (shared base and env layers, one instance layer each, built
 * by podman from a Debian root: src/fixtures/images.ts) pushed to a registry on 127.0.0.1, then pulled one after the
 * other into a fresh store by `minisandbox images pull` and into a fresh podman storage by `podman pull`, the two
 * interleaved image by image. Each pull is timed; after the N-th of each N asked, both sides' disk use (du, every
 * inode once): the store (objects, image records, the flattened root filesystems' manifests) against podman's
 * graph root (overlay layers, their tar-split metadata, image records).
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { fixtureImages, type FixtureImage } from "../../src/fixtures/images.js";
import { LoopbackRegistry } from "../../src/fixtures/registry.js";
import { findTool } from "../../src/sandbox/host.js";
import { diskUsage } from "./du.js";
import { CLEAN_ENV, mustRun, timedRun } from "./proc.js";
import type { ImagePull, ImagesResult, Unavailable } from "./types.js";

const CLI = fileURLToPath(new URL("../../src/cli/index.js", import.meta.url));

interface ImagesOptions {
  work: string;
  ns: number[];
  historyMiB: number;
  /** false: no podman side. */
  podman: boolean;
  log: (m: string) => void;
}

export async function benchImages(o: ImagesOptions): Promise<ImagesResult | Unavailable> {
  for (const tool of ["podman", "debootstrap", "skopeo", "docker-registry"]) {
    if (!findTool(tool)) return { available: false, reason: `${tool} is missing: run scripts/install-system-deps.sh` };
  }
  const max = Math.max(...o.ns);
  o.log(`images: ${max} SWE-bench-style instance images (built once per machine, then cached)`);
  // At least the set the image tests build (2 instances and the C project's image): a small run shares their cache.
  const set = await fixtureImages({
    instances: Math.max(2, max),
    c: true,
    historyBytes: o.historyMiB * 2 ** 20,
    log: o.log,
  });
  const instances = set.images.filter((i) => i.kind === "instance").slice(0, max);
  const dir = join(o.work, "images");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const registry = await LoopbackRegistry.start(join(dir, "registry"));
  try {
    o.log(`images: pushing ${instances.length} images to the loopback registry`);
    for (const image of instances) await push(set.layout, image, registry.host);
    return await pullAll(o, instances, registry.host, dir);
  } finally {
    registry.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function push(layout: string, image: FixtureImage, host: string): Promise<void> {
  await mustRun(
    "skopeo",
    ["copy", "--quiet", "--dest-tls-verify=false", `oci:${layout}:${image.name}`, `docker://${host}/${image.name}`],
    { env: CLEAN_ENV, timeoutMs: 1_800_000 },
  );
}

async function pullAll(o: ImagesOptions, images: FixtureImage[], host: string, dir: string): Promise<ImagesResult> {
  // podman refuses a runroot path longer than 50 characters.
  const runroot = mkdtempSync(join(tmpdir(), "msb-bench-podman-"));
  const graph = join(dir, "podman");
  const podman = ["--root", graph, "--runroot", runroot, "--storage-driver", "overlay"];
  try {
    const side = o.podman ? { args: podman, graph } : undefined;
    const { pulls, points } = await pullEach(o, images, host, join(dir, "home"), side);
    return { available: true, images: images.length, historyMiB: o.historyMiB, pulls, points, ...summary(pulls) };
  } finally {
    if (o.podman) await timedRun("podman", [...podman, "system", "reset", "--force"], { timeoutMs: 600_000 });
    rmSync(runroot, { recursive: true, force: true });
  }
}

/** Each image by each side in turn; after the N-th, both sides' disk use. */
async function pullEach(
  o: ImagesOptions,
  images: FixtureImage[],
  host: string,
  home: string,
  podman: { args: string[]; graph: string } | undefined,
): Promise<Pick<ImagesResult, "pulls" | "points">> {
  const pulls: ImagePull[] = [];
  const points: ImagesResult["points"] = [];
  for (const [i, image] of images.entries()) {
    const ref = `${host}/${image.name}`;
    const ours = await timed(process.execPath, [CLI, "--home", home, "images", "pull", "--json", ref]);
    const theirs = podman ? await timed("podman", [...podman.args, "pull", "-q", "--tls-verify=false", ref]) : null;
    pulls.push({ image: i + 1, minisandboxMs: ours, podmanMs: theirs });
    o.log(`images: pulled ${i + 1}/${images.length} (ours ${ours} ms, podman ${theirs ?? "-"} ms)`);
    if (!o.ns.includes(i + 1)) continue;
    const store = await diskUsage([join(home, "store")]);
    const graph = podman ? await diskUsage([podman.graph]) : null;
    points.push({ n: i + 1, minisandboxStoreBytes: store.allocated, podmanBytes: graph?.allocated ?? null });
  }
  return { pulls, points };
}

async function timed(cmd: string, args: string[]): Promise<number> {
  const t0 = performance.now();
  await mustRun(cmd, args, { env: CLEAN_ENV, timeoutMs: 1_800_000 });
  return Math.round(performance.now() - t0);
}

/** The 2nd…Nth pulls: what a repository's later images cost once its base and env layers are present. */
function summary(pulls: ImagePull[]): Pick<ImagesResult, "laterPullMeanMs"> {
  const later = pulls.slice(1);
  const mean = (xs: number[]): number | null =>
    xs.length ? Math.round(xs.reduce((a, b) => a + b, 0) / xs.length) : null;
  const podman = later.map((p) => p.podmanMs).filter((x): x is number => x !== null);
  return {
    laterPullMeanMs: {
      minisandbox: mean(later.map((p) => p.minisandboxMs)),
      podman: podman.length === later.length ? mean(podman) : null,
    },
  };
}
