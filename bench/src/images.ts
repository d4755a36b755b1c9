/**
 * Workload 11, images: N SWE-bench-style instance images (shared base and env layers, one instance layer each, built
 * by podman from a Debian root: src/fixtures/images.ts) pushed to a registry on 127.0.0.1, then pulled one after the
 * other into a fresh store by `minisandbox images pull` and into a fresh podman storage by `podman pull`, the two
 * interleaved image by image. Each pull is timed; after the N-th of each N asked, both sides' disk use (du, every
 * inode once): the store (objects, image records, the flattened root filesystems' manifests) against podman's
 * graph root (overlay layers, their tar-split metadata, image records). Then both sides run what they pulled
 * (images-run.ts): create → first output on the first image, and gold evaluation on every instance image.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { fixtureImages, type FixtureImage } from "../../src/fixtures/images.js";
import { LoopbackRegistry } from "../../src/fixtures/registry.js";
import { findTool } from "../../src/sandbox/host.js";
import { diskUsage } from "./du.js";
import { imagesEvaluation, imagesReady, type ImagesPodman, type RunImagesOptions } from "./images-run.js";
import { CLEAN_ENV, mustRun, timedRun } from "./proc.js";
import type { ImagePull, ImagesResult, Unavailable } from "./types.js";

const CLI = fileURLToPath(new URL("../../src/cli/index.js", import.meta.url));

interface ImagesOptions {
  work: string;
  ns: number[];
  historyMiB: number;
  /** false: no podman side. */
  podman: boolean;
  /** Rounds of the ready comparison, and workers of the evaluation (workloads 1 and 5's sizes). */
  runs: number;
  workers: number;
  log: (m: string) => void;
}

export async function benchImages(o: ImagesOptions): Promise<ImagesResult | Unavailable> {
  for (const tool of ["podman", "debootstrap", "skopeo", "docker-registry"]) {
    if (!findTool(tool)) return { available: false, reason: `${tool} is missing: run scripts/install-system-deps.sh` };
  }
  const max = Math.max(...o.ns);
  o.log(`images: ${max} SWE-bench-style instance images (built once per machine, then cached)`);
  // At least 2 images; the C project's image only where that makes the set the image tests' own (2 instances, no
  // history): a small run shares their cache.
  const instanceCount = Math.max(2, max);
  const set = await fixtureImages({
    instances: instanceCount,
    c: instanceCount === 2 && o.historyMiB === 0,
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
    const pulled = instances.map((image) => ({
      ref: `${registry.host}/${image.name}`,
      instanceId: image.instanceId!,
      baseCommit: set.instances.find((i) => i.instance_id === image.instanceId)!.base_commit,
    }));
    return await pullAll(o, instances, registry.host, dir, { images: pulled, fixtureInstances: instanceCount });
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

async function pullAll(
  o: ImagesOptions,
  images: FixtureImage[],
  host: string,
  dir: string,
  pulled: Pick<RunImagesOptions, "images" | "fixtureInstances">,
): Promise<ImagesResult> {
  // podman refuses a runroot path longer than 50 characters.
  const runroot = mkdtempSync(join(tmpdir(), "msb-bench-podman-"));
  const graph = join(dir, "podman");
  const podman = ["--root", graph, "--runroot", runroot, "--storage-driver", "overlay"];
  try {
    const side = o.podman ? { args: podman, graph } : undefined;
    const home = join(dir, "home");
    const { pulls, points } = await pullEach(o, images, host, home, side);
    const runner: ImagesPodman | undefined = o.podman ? { bin: "podman", global: podman, env: runEnv(dir) } : undefined;
    const run = await runPulled({ ...o, ...pulled, home, podman: runner });
    const head = { available: true as const, images: images.length, historyMiB: o.historyMiB };
    return { ...head, pulls, points, ...summary(pulls), ...run };
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

/**
 * podman's configuration for running the images: runc and no default ulimits (what scripts/bench-setup.sh sets
 * machine-wide; podman's default ulimits need CAP_SYS_RESOURCE), in the workload's own directory.
 */
function runEnv(dir: string): Record<string, string> {
  const conf = join(dir, "containers.conf");
  writeFileSync(conf, '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n');
  return { ...CLEAN_ENV, CONTAINERS_CONF: conf };
}

/** Both sides run what they pulled; a part that fails is reported as not available, with the reason. */
async function runPulled(o: RunImagesOptions): Promise<Pick<ImagesResult, "ready" | "evaluation">> {
  const na = (what: string) => (e: unknown) => ({
    available: false as const,
    reason: `${what} failed: ${(e as Error).message.split("\n")[0]}`,
  });
  const ready = await imagesReady(o).catch(na("ready on the image"));
  const evaluation = await imagesEvaluation(o).catch(na("evaluation on the images"));
  return { ready, evaluation };
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
