/** Evaluation throughput, for the benchmarks: a whole `evaluate` run on a dataset, environments built beforehand. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadDataset, selectInstances } from "../../src/tasks/index.js";
import { prepareInstances } from "../../src/env/prepare.js";
import { runEvaluation, type RunTimings } from "../../src/eval/run.js";
import type { ImagePolicy } from "../../src/env/instance-image.js";

export interface BenchEvaluationOptions {
  home: string;
  datasetPath: string;
  reposDir?: string;
  specsFile?: string;
  /** Instances evaluated at once (default 2). */
  workers?: number;
  /** Default "gold". */
  predictions?: string;
  instanceIds?: string[];
  timeoutMs?: number;
  /** Which rows run on an image (default `auto`: a row's own image when the store has it). */
  images?: ImagePolicy;
}

export interface BenchEvaluationResult {
  instances: number;
  workers: number;
  /** Building missing environments (not part of the throughput). */
  buildMs: number;
  /** Wall time of the evaluation itself. */
  evalWallMs: number;
  instancesPerMinute: number;
  /** Per instance, time outside the test run (sandbox, patch, grading, cleanup). */
  meanOverheadMs: number;
  meanSandboxMs: number;
  meanApplyMs: number;
  meanTestsMs: number;
  meanGradingMs: number;
  meanCleanupMs: number;
  meanTotalMs: number;
  resolved: number;
  errors: number;
  timings: RunTimings;
}

export async function benchEvaluation(opts: BenchEvaluationOptions): Promise<BenchEvaluationResult> {
  const all = await loadDataset(opts.datasetPath);
  const instances = opts.instanceIds?.length ? selectInstances(all, opts.instanceIds, opts.datasetPath) : all;
  const workers = opts.workers ?? 2;
  const t = performance.now();
  const images = opts.images ? { images: opts.images } : {};
  await prepareInstances(instances, {
    home: opts.home,
    reposDir: opts.reposDir,
    specsFile: opts.specsFile,
    workers,
    ...images,
  });
  const buildMs = performance.now() - t;
  const reportDir = mkdtempSync(join(tmpdir(), "msb-bench-eval-"));
  try {
    const run = await runEvaluation({
      home: opts.home,
      dataset: all,
      instanceIds: instances.map((i) => i.instance_id),
      predictions: opts.predictions ?? "gold",
      runId: "bench",
      workers,
      timeoutMs: opts.timeoutMs,
      reposDir: opts.reposDir,
      specsFile: opts.specsFile,
      reportDir,
      progress: false,
      onWarning: () => {},
      ...images,
    });
    const m = run.timings.means;
    return {
      instances: run.timings.instancesRun,
      workers,
      buildMs: Math.round(buildMs + run.timings.buildMs),
      evalWallMs: run.timings.evalWallMs,
      instancesPerMinute: run.timings.instancesPerMinute,
      meanOverheadMs: m.overheadMs,
      meanSandboxMs: m.sandboxMs,
      meanApplyMs: m.applyMs,
      meanTestsMs: m.testsMs,
      meanGradingMs: m.gradingMs,
      meanCleanupMs: m.cleanupMs,
      meanTotalMs: m.totalMs,
      resolved: run.summary.resolved_instances,
      errors: run.summary.error_instances,
      timings: run.timings,
    };
  } finally {
    rmSync(reportDir, { recursive: true, force: true });
  }
}
