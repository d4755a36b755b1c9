/**
 * Workload 5, evaluation throughput: instances graded with their gold patch, `workers` at a time.
 *   - minisandbox engine: a whole `runEvaluation` (eval-engine.ts), which also times each phase;
 *   - minisandbox steps: Sandbox.create({instance}) + the harness's steps (git apply, eval.sh), graded here;
 *   - podman: the very same script in `podman run -i` of the environment's image, graded the same way.
 */
import { Sandbox } from "../../src/index.js";
import { pipSettings } from "../../src/env/pip-config.js";
import { nodeCacheFor } from "../../src/env/environments.js";
import { gradeInstance, heredocDelimiter, makeEvalScript } from "../../src/eval/index.js";
import type { ImagePolicy } from "../../src/env/instance-image.js";
import type { Instance } from "../../src/tasks/types.js";
import { pool } from "../../src/util/progress.js";
import type { Podman } from "./podman.js";
import { ensureEnvImageFor } from "./ready.js";
import { benchEvaluation } from "./eval-engine.js";
import type { BenchEnvironment } from "./setup.js";
import { summarize } from "./stats.js";
import type { EvalMeasurement, Unavailable } from "./types.js";

/** Apply the gold patch the way the harness applies a model patch, then run eval.sh: one bash script on stdin. */
export function evalSteps(env: BenchEnvironment, instance: Instance, opts: { applyBugPatch?: boolean } = {}): string {
  const spec = env.specs.get(instance.instance_id)!;
  const delimiter = heredocDelimiter(instance.patch, "MSB_BENCH_PATCH");
  // SWE-smith tasks: a sandbox applies and commits the bug at creation; a container must do the same first.
  const bug = opts.applyBugPatch && instance.bug_patch ? instance.bug_patch : undefined;
  const bugDelimiter = bug ? heredocDelimiter(bug, "MSB_BENCH_BUG") : "";
  return [
    "cd /testbed",
    ...(bug
      ? [
          `git apply --whitespace=nowarn - <<'${bugDelimiter}'`,
          bug.endsWith("\n") ? bug.slice(0, -1) : bug,
          bugDelimiter,
          "git add -A && git -c user.email=bench@localhost -c user.name=bench -c core.hooksPath=/dev/null " +
            "commit -q --no-verify -m 'task bug'",
        ]
      : []),
    `git apply --verbose - <<'${delimiter}'`,
    instance.patch.endsWith("\n") ? instance.patch.slice(0, -1) : instance.patch,
    delimiter,
    makeEvalScript({ instance, spec }),
  ].join("\n");
}

function resolved(instance: Instance, output: string): boolean {
  const g = gradeInstance({ instance, modelPatch: instance.patch, testOutput: output });
  return g.report[instance.instance_id]?.resolved === true;
}

/** `one` over the instances, `workers` at a time: wall time, instances/min, and how many were graded resolved. */
export async function measure(
  label: string,
  instances: Instance[],
  workers: number,
  one: (i: Instance) => Promise<string>,
): Promise<EvalMeasurement> {
  const times: number[] = [];
  let ok = 0;
  const errors: string[] = [];
  const t0 = performance.now();
  await pool(instances, workers, async (inst) => {
    const t = performance.now();
    try {
      if (resolved(inst, await one(inst))) ok++;
      else if (errors.length < 3) errors.push(`${inst.instance_id}: not resolved with the gold patch`);
    } catch (e) {
      if (errors.length < 3) errors.push(`${inst.instance_id}: ${(e as Error).message.split("\n")[0]}`);
    }
    times.push(performance.now() - t);
  });
  const wallMs = performance.now() - t0;
  return {
    available: true,
    label,
    instances: instances.length,
    workers,
    wallMs: Math.round(wallMs),
    instancesPerMinute: Math.round((instances.length / (wallMs / 60_000)) * 100) / 100,
    resolved: ok,
    perInstance: summarize(times),
    ...(errors.length ? { detail: { errors } } : {}),
  };
}

/**
 * eval.sh reruns the spec's install step (`pip install -e .`), offline: both runners get the host's pip
 * configuration (local indexes bound read-only) and fail fast on an unreachable default index, as the eval runner
 * does.
 */
async function offlinePip(env: BenchEnvironment): Promise<{ env: Record<string, string>; mounts: string[] }> {
  const pip = await pipSettings(env.toolchain.python);
  return { env: { ...pip.env, PIP_NO_INPUT: "1", PIP_PROGRESS_BAR: "off", PIP_RETRIES: "0" }, mounts: pip.mounts };
}

export async function benchEvalSteps(
  env: BenchEnvironment,
  instances: Instance[],
  workers: number,
): Promise<EvalMeasurement> {
  const pip = await offlinePip(env);
  return measure("minisandbox (Sandbox API + harness steps)", instances, workers, async (inst) => {
    const sb = await Sandbox.create({
      instance: inst,
      home: env.home,
      specsFile: env.specsFile,
      binds: pip.mounts.map((m) => ({ source: m, target: m, readOnly: true })),
      env: { ...pip.env, ...env.specs.get(inst.instance_id)!.env },
    });
    try {
      const r = await sb.exec(["/bin/bash", "-s"], {
        stdin: evalSteps(env, inst),
        mergeOutput: true,
        timeoutMs: 1_800_000,
      });
      return r.stdout;
    } finally {
      await sb.close();
    }
  });
}

export async function benchEvalPodman(
  env: BenchEnvironment,
  podman: Podman,
  instances: Instance[],
  workers: number,
): Promise<EvalMeasurement | Unavailable> {
  if (!podman.hasGit)
    return {
      available: false,
      reason: "the podman base image has no git (made by an older scripts/bench-setup.sh): re-run it",
    };
  // Images are built before timing (the build is the container world's "prepare").
  const images = new Map<string, string>();
  for (const inst of instances)
    images.set(inst.instance_id, await ensureEnvImageFor(env, podman, env.keys.get(inst.instance_id)!));
  const pip = await offlinePip(env);
  return measure(`podman run -i (${podman.runtime})`, instances, workers, async (inst) => {
    const r = await podman.run(images.get(inst.instance_id)!, ["/bin/bash", "-s"], {
      input: evalSteps(env, inst, { applyBugPatch: true }),
      interactive: true,
      timeoutMs: 1_800_000,
      env: pip.env,
      readOnlyMounts: pip.mounts,
    });
    return r.stdout + r.stderr;
  });
}

/**
 * Materialize the instances' layers in the node cache before anything is timed: evaluation is measured on a prepared
 * node, as podman's is measured with its images present (cold starts are workload 1's business).
 */
export async function prepareNode(env: BenchEnvironment, instances: Instance[]): Promise<void> {
  const cache = nodeCacheFor(env.home);
  for (const key of new Set(instances.map((i) => env.keys.get(i.instance_id)!)))
    await (await cache.acquire(key)).release();
}

/** The eval runner's benchmark (src/eval): throughput, and the mean per-instance overhead outside the test run. */
export async function benchEvalEngine(
  env: Pick<BenchEnvironment, "home" | "datasetPath" | "reposDir" | "specsFile">,
  instances: Instance[],
  workers: number,
  opts: { images?: ImagePolicy } = {},
): Promise<EvalMeasurement | Unavailable> {
  try {
    const { timings: _t, ...r } = await benchEvaluation({
      home: env.home,
      datasetPath: env.datasetPath,
      reposDir: env.reposDir,
      specsFile: env.specsFile,
      workers,
      instanceIds: instances.map((i) => i.instance_id),
      ...opts,
    });
    return {
      available: true,
      label: `minisandbox eval engine (benchEvaluation), ${workers} worker${workers === 1 ? "" : "s"}`,
      instances: r.instances,
      workers,
      // Environment builds are excluded: evalWallMs is the evaluation itself.
      wallMs: Math.round(r.evalWallMs),
      instancesPerMinute: r.instancesPerMinute,
      resolved: r.resolved,
      perInstance: null,
      overheadMs: r.meanOverheadMs,
      detail: r,
    };
  } catch (e) {
    return { available: false, reason: `benchEvaluation failed: ${(e as Error).message.split("\n")[0]}` };
  }
}
