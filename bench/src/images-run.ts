/**
 * Workload 11, running the pulled images: both sides run what they pulled, from their own storage.
 *   - ready: create → first output on the first image, a sandbox on its root filesystem (warm: the root already in
 *     the node cache) against `podman run --rm --network none` of it, rounds interleaved (ready.ts's loop);
 *   - evaluation: gold predictions on every pulled instance image, the eval engine on a dataset whose rows name the
 *     images against the same eval script in `podman run -i` of each image (SWE-bench's harness: a container from
 *     the instance image, the patch applied, eval.sh run, its log graded), graded the same way.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "../../src/index.js";
import { envFor } from "../../src/env/environments.js";
import { heredocDelimiter, makeEvalScript } from "../../src/eval/index.js";
import { evalSandboxSettings } from "../../src/eval/runner/sandbox.js";
import { makeFixtureDataset } from "../../src/fixtures/generate.js";
import type { Instance } from "../../src/tasks/types.js";
import { benchEvalEngine, measure } from "./evaluation.js";
import { podmanRun } from "./podman.js";
import { measureRounds, sandboxOnce, sandboxProbe, summarizeVariant, type Variant } from "./ready.js";
import { pycProbe } from "./pyc.js";
import type { EvalMeasurement, ImagesEvaluation, ImagesReady, Unavailable } from "./types.js";

/** One pulled instance image, under the name both sides pulled it by. */
export interface PulledImage {
  ref: string;
  instanceId: string;
  baseCommit: string;
}

/** podman on the workload's own storage (the graph root it pulled into), or none. */
export interface ImagesPodman {
  bin: string;
  global: string[];
  /** The podman process's environment: a CONTAINERS_CONF with runc and no default ulimits. */
  env: Record<string, string>;
}

export interface RunImagesOptions {
  home: string;
  images: PulledImage[];
  podman: ImagesPodman | undefined;
  runs: number;
  workers: number;
  historyMiB: number;
  /** Instances of the fixture image set (its rows: the images may be fewer). */
  fixtureInstances: number;
  /** Where the rows' dataset is kept between runs (it is the image set's, regenerated once). */
  work: string;
  log: (m: string) => void;
}

const IMPORT_MODULE = "calc";
type Name = keyof ImagesReady["variants"];

function sandboxVariant(home: string, ref: string): Variant<Name> {
  const create = (): Promise<Sandbox> => Sandbox.create({ home, image: ref });
  return {
    name: "minisandbox_warm",
    label: "minisandbox on the image, warm",
    method:
      "Sandbox.create({image}) + exec: the image's root filesystem as /, copy-on-write, its config's Env, " +
      "WorkingDir and User (as `exec --image` runs it); the root already in the node cache (placed by the warm-up)",
    once: (command, started) => sandboxOnce(create, command, started),
    probe: () => sandboxProbe(create, IMPORT_MODULE),
  };
}

function podmanVariant(p: ImagesPodman, ref: string): Variant<Name> {
  const run = (command: string) => podmanRun(p.bin, p.global, ref, ["/bin/sh", "-c", command], { processEnv: p.env });
  return {
    name: "podman",
    label: "podman run of the image",
    method:
      "podman run --rm --network none IMAGE /bin/sh -c … (runc, no default ulimits), the image from the storage " +
      "podman pulled it into",
    once: async (command) => {
      const r = await run(command);
      if (r.code !== 0) throw new Error(`podman exit ${r.code}: ${r.stderr.trim().slice(-300)}`);
      return { ms: r.exitMs, output: r.stdout, pycNewer: null };
    },
    probe: async () => (await run(`${pycProbe(IMPORT_MODULE)} 2>&1`)).stdout,
  };
}

/** Create → `echo` and → the import, both sides on the first image, `runs` interleaved rounds. */
export async function imagesReady(o: RunImagesOptions): Promise<ImagesReady> {
  const ref = o.images[0]!.ref;
  const variants = [sandboxVariant(o.home, ref), ...(o.podman ? [podmanVariant(o.podman, ref)] : [])];
  o.log(`images: ready on ${ref}, ${o.runs} rounds`);
  const samples = await measureRounds(variants, { runs: o.runs, importModule: IMPORT_MODULE, log: o.log });
  const out: ImagesReady["variants"] = {
    minisandbox_warm: { available: false, reason: "not measured" },
    podman: { available: false, reason: "podman not measured" },
  };
  for (const v of variants) out[v.name] = await summarizeVariant(v, samples.get(v.name)!, o.log);
  return { available: true, image: ref, runs: o.runs, importModule: IMPORT_MODULE, variants: out };
}

/**
 * The image set's rows (the fixture is deterministic: the same options give the rows the images were built from),
 * each naming its image; generated once per set, then kept. Checked against the images' base commits.
 */
async function imageRows(o: RunImagesOptions): Promise<{ datasetPath: string; rows: Instance[] }> {
  const dir = join(o.work, `images-rows-${o.fixtureInstances}-history-${o.historyMiB}MiB`);
  const kept = join(dir, "rows.json");
  if (!existsSync(kept)) {
    const ds = await makeFixtureDataset(join(dir, "fixture"), {
      instances: o.fixtureInstances,
      historyBytes: o.historyMiB * 2 ** 20,
    });
    writeFileSync(kept, JSON.stringify(ds.instances));
    rmSync(join(dir, "fixture"), { recursive: true, force: true });
  }
  const all = JSON.parse(readFileSync(kept, "utf8")) as Instance[];
  const rows = o.images.map((image) => {
    const inst = all.find((i) => i.instance_id === image.instanceId);
    if (inst?.base_commit !== image.baseCommit)
      throw new Error(`the fixture's rows are not the ones image ${image.ref} was built from (base commit differs)`);
    return { ...inst, image_name: image.ref };
  });
  const datasetPath = join(dir, "dataset.json");
  writeFileSync(datasetPath, `${JSON.stringify(rows, null, 2)}\n`);
  return { datasetPath, rows };
}

/** The harness's steps in a container of the instance image: patch applied, eval.sh written and run, one stream. */
function podmanSteps(inst: Instance): string {
  const spec = envFor(inst, {}).spec;
  const patch = inst.patch.endsWith("\n") ? inst.patch.slice(0, -1) : inst.patch;
  const p = heredocDelimiter(inst.patch, "MSB_BENCH_PATCH");
  const evalScript = makeEvalScript({ instance: inst, spec });
  const e = heredocDelimiter(evalScript, "MSB_BENCH_EVAL");
  return [
    "exec 2>&1",
    "cd /testbed",
    `git apply --verbose - <<'${p}'`,
    patch,
    p,
    `cat > /eval.sh <<'${e}'`,
    evalScript.endsWith("\n") ? evalScript.slice(0, -1) : evalScript,
    e,
    "/bin/bash /eval.sh",
  ].join("\n");
}

async function podmanEval(o: RunImagesOptions, p: ImagesPodman, rows: Instance[]): Promise<EvalMeasurement> {
  const refs = new Map(o.images.map((i) => [i.instanceId, i.ref]));
  // The settings a sandbox evaluation gets (the host's pip configuration, offline): eval.sh reinstalls the package.
  const settings = await evalSandboxSettings(o.home, envFor(rows[0]!, {}).spec);
  // Untimed: one container of each image first, as the sandbox side's roots are placed first.
  for (const inst of rows)
    await podmanRun(p.bin, p.global, refs.get(inst.instance_id)!, ["true"], { processEnv: p.env });
  return measure("podman run -i of each instance image (patch, eval.sh)", rows, o.workers, async (inst) => {
    const r = await podmanRun(p.bin, p.global, refs.get(inst.instance_id)!, ["/bin/bash", "-s"], {
      input: podmanSteps(inst),
      interactive: true,
      timeoutMs: 1_800_000,
      env: settings.env,
      readOnlyMounts: settings.binds.map((b) => b.source),
      processEnv: p.env,
    });
    return r.stdout + r.stderr;
  });
}

/** Gold predictions on every pulled instance image: the eval engine, then podman, `workers` at a time each. */
export async function imagesEvaluation(o: RunImagesOptions): Promise<ImagesEvaluation> {
  const { datasetPath, rows } = await imageRows(o);
  // A prepared node, as podman's images are present: every image's root placed in the node cache first.
  for (const image of o.images) await (await Sandbox.create({ home: o.home, image: image.ref })).close();
  o.log(`images: evaluation of ${rows.length} instance image(s), ${o.workers} worker(s), minisandbox`);
  const env = { home: o.home, datasetPath, reposDir: undefined, specsFile: undefined };
  const ours = await benchEvalEngine(env, rows, o.workers, { images: { kind: "row" } });
  let theirs: EvalMeasurement | Unavailable = { available: false, reason: "podman not measured" };
  if (o.podman) {
    o.log(`images: evaluation of ${rows.length} instance image(s), ${o.workers} worker(s), podman`);
    const p = o.podman;
    theirs = await podmanEval(o, p, rows).catch((e: unknown) => ({
      available: false as const,
      reason: `podman evaluation failed: ${(e as Error).message.split("\n")[0]}`,
    }));
  }
  const label = "minisandbox eval engine on the images (rows name them)";
  const minisandbox = ours.available ? { ...ours, label } : ours;
  return { available: true, instances: rows.length, workers: o.workers, minisandbox, podman: theirs };
}
