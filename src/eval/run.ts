/**
 * `minisandbox evaluate`: the SWE-bench harness's run_evaluation, container-free. Loads the dataset and the
 * predictions, builds missing environments, evaluates every non-empty prediction in a fresh sandbox without
 * network (`workers` at a time), writes the harness's per-instance files and the run summary, plus timing side
 * files (`timings.json` per instance, `<model>.<run_id>.timings.json` per run) that the harness does not have.
 */
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { loadDataset, selectInstances } from "../tasks/index.js";
import type { Instance } from "../tasks/types.js";
import type { Limits } from "../sandbox/limits.js";
import type { EnvSpec, LayerKey } from "../env/types.js";
import { envFor, isBuilt } from "../env/environments.js";
import { prepareInstances } from "../env/prepare.js";
import { Progress, pool } from "../util/progress.js";
import { InvalidInputError } from "../errors.js";
import type { ResolutionStatus } from "./grading.js";
import { DEFAULT_MODEL, indexPredictions, isEmptyPatch, loadPredictions, unknownPredictionIds } from "./predictions.js";
import {
  appendInstanceLog,
  instanceLogDir,
  LOG_FILES,
  makeRunSummaryFromDisk,
  summaryFileName,
  writeRunSummary,
  type RunSummary,
} from "./report.js";
import type { Prediction } from "./types.js";
import {
  clearInstanceOutputs,
  DEFAULT_TIMEOUT_SECONDS,
  runInstanceEvaluation,
  type EvalFailure,
  type EvalErrorKind,
} from "./runner/instance.js";
import { roundTimings, timingStats, type PhaseTimings } from "./runner/timings.js";
import { evalPipSettings } from "./runner/sandbox.js";

export interface RunEvaluationOptions {
  home: string;
  /** Dataset file (JSON, JSONL, parquet) or already loaded instances. */
  dataset: string | Instance[];
  /** Predictions file, "gold", "empty", or already loaded predictions. */
  predictions: string | Prediction[];
  /** Only these instances of the dataset (the summary counts only them, as the harness's --instance_ids). */
  instanceIds?: readonly string[];
  /** Default: `minisandbox-<UTC timestamp>`. */
  runId?: string;
  /** Instances evaluated at once (default 2). */
  workers?: number;
  /** Environments built at once when some are missing (default: workers). */
  buildWorkers?: number;
  /** Whole-instance timeout (default 1800 s, as the harness). */
  timeoutMs?: number;
  reposDir?: string;
  specsFile?: string;
  /** Where `logs/run_evaluation/...` and the summary go (default: the current directory, as the harness). */
  reportDir?: string;
  /** Build missing environments first (default true); otherwise their instances are errors. */
  build?: boolean;
  /** Re-run instances that already have a report.json in this run (default false: skipped, as the harness). */
  rerun?: boolean;
  limits?: Limits;
  /** Progress bars on stderr (default true). */
  progress?: boolean;
  /** Default: one line on stderr. */
  onWarning?: (message: string) => void;
  onInstance?: (record: InstanceRunRecord) => void;
}

export type InstanceRunStatus = "resolved" | "unresolved" | "error" | "empty_patch" | "no_prediction" | "skipped";

export interface InstanceRunRecord {
  instanceId: string;
  model: string | null;
  status: InstanceRunStatus;
  resolution: ResolutionStatus | null;
  error?: EvalFailure;
  timings?: PhaseTimings;
  warnings: string[];
  logDir?: string;
}

/** `<model>.<run_id>.timings.json` */
export interface RunTimings {
  runId: string;
  model: string;
  workers: number;
  timeoutSeconds: number;
  startedAt: string;
  /** Building missing environments. */
  buildMs: number;
  /** Evaluating (from the first sandbox to the last close). */
  evalWallMs: number;
  wallMs: number;
  instancesRun: number;
  /** Evaluated instances per minute of evalWallMs. */
  instancesPerMinute: number;
  totals: PhaseTimings;
  means: PhaseTimings;
  instances: Record<string, PhaseTimings & { status: string }>;
}

export interface RunEvaluationResult {
  runId: string;
  model: string;
  summary: RunSummary;
  summaryPath: string;
  timingsPath: string;
  timings: RunTimings;
  /** One record per dataset instance (after the instance-id filter), then one per unknown prediction id. */
  instances: InstanceRunRecord[];
  /** Prediction ids not in the dataset: reported as errors, never run (the harness refuses the whole run). */
  unknownPredictionIds: string[];
  warnings: string[];
}

export function defaultRunId(at: Date = new Date()): string {
  return `minisandbox-${at.toISOString().replace(/[-:]/g, "").replace(/\..*$/, "")}`;
}

export function timingsFileName(model: string | undefined, runId: string): string {
  return summaryFileName(model, runId).replace(/\.json$/, ".timings.json");
}

/** Evaluate predictions on a dataset, the harness's way. Per-instance failures are in the records, never thrown. */
export async function runEvaluation(opts: RunEvaluationOptions): Promise<RunEvaluationResult> {
  const started = performance.now();
  const startedAt = new Date();
  const workers = positiveInt(opts.workers ?? 2, "workers");
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_SECONDS * 1000;
  if (!(timeoutMs > 0)) throw new InvalidInputError(`timeout must be positive, got ${timeoutMs} ms`);
  const reportDir = resolve(opts.reportDir ?? process.cwd());
  const runId = opts.runId ?? defaultRunId(startedAt);
  const showProgress = opts.progress ?? true;
  const warnings: string[] = [];
  const warn = (message: string): void => {
    warnings.push(message);
    if (opts.onWarning) opts.onWarning(message);
    else process.stderr.write(`minisandbox: warning: ${message}\n`);
  };

  const datasetName = typeof opts.dataset === "string" ? opts.dataset : "the dataset";
  const all = typeof opts.dataset === "string" ? await loadDataset(opts.dataset) : opts.dataset;
  const instances =
    opts.instanceIds && opts.instanceIds.length > 0 ? selectInstances(all, opts.instanceIds, datasetName) : all;
  const predictions =
    typeof opts.predictions === "string" ? await loadPredictions(opts.predictions, all) : opts.predictions;
  if (predictions.length === 0) throw new InvalidInputError("no predictions to evaluate");
  const byId = indexPredictions(predictions);
  const model = predictions[0]?.model_name_or_path ?? DEFAULT_MODEL;
  // Fail early on ids that cannot name a directory.
  summaryFileName(model, runId);

  const records = new Map<string, InstanceRunRecord>();
  const unknown = unknownPredictionIds(
    predictions,
    all.map((i) => i.instance_id),
  );
  for (const id of unknown) {
    const pred = byId.get(id)!;
    const message = `instance ${id} is not in ${datasetName}`;
    warn(`prediction for ${id}: ${message}; not evaluated`);
    const record: InstanceRunRecord = {
      instanceId: id,
      model: pred.model_name_or_path,
      status: "error",
      resolution: null,
      error: { kind: "Unknown Instance", message },
      warnings: [],
    };
    try {
      record.logDir = instanceLogDir(reportDir, runId, pred.model_name_or_path, id);
      await logError(record.logDir, message);
    } catch {
      // an id that cannot name a directory: the record says it all
    }
    records.set(id, record);
  }

  interface Job {
    instance: Instance;
    prediction: Prediction;
    logDir: string;
    env?: { spec: EnvSpec; key: LayerKey };
  }
  const jobs: Job[] = [];
  const order: string[] = [];
  let skipped = 0;
  for (const instance of instances) {
    const id = instance.instance_id;
    order.push(id);
    const prediction = byId.get(id);
    const base = { instanceId: id, resolution: null, warnings: [] as string[] };
    if (!prediction) {
      records.set(id, { ...base, model: null, status: "no_prediction" });
      continue;
    }
    if (isEmptyPatch(prediction)) {
      records.set(id, { ...base, model: prediction.model_name_or_path, status: "empty_patch" });
      continue;
    }
    let logDir: string;
    try {
      logDir = instanceLogDir(reportDir, runId, prediction.model_name_or_path, id);
    } catch (e) {
      records.set(id, {
        ...base,
        model: prediction.model_name_or_path,
        status: "error",
        error: { kind: "Unknown Instance", message: (e as Error).message },
      });
      continue;
    }
    if (!opts.rerun && existsSync(join(logDir, LOG_FILES.report))) {
      skipped++;
      records.set(id, { ...base, model: prediction.model_name_or_path, status: "skipped", logDir });
      continue;
    }
    jobs.push({ instance, prediction, logDir });
  }
  if (skipped > 0) process.stderr.write(`${skipped} instances already run, skipping...\n`);

  const errorRecord = async (job: Job, kind: EvalErrorKind, message: string): Promise<void> => {
    await clearInstanceOutputs(job.logDir);
    await logError(job.logDir, message);
    const record: InstanceRunRecord = {
      instanceId: job.instance.instance_id,
      model: job.prediction.model_name_or_path,
      status: "error",
      resolution: null,
      error: { kind, message },
      warnings: [],
      logDir: job.logDir,
    };
    records.set(record.instanceId, record);
    opts.onInstance?.(record);
  };

  // Environments: each distinct one once; missing ones are built first.
  const buildStarted = performance.now();
  const runnable: Job[] = [];
  const missing = new Map<LayerKey, Job[]>();
  const built = new Map<LayerKey, boolean>();
  for (const job of jobs) {
    try {
      job.env = envFor(job.instance, { specsFile: opts.specsFile });
    } catch (e) {
      await errorRecord(job, "Environment Missing", (e as Error).message);
      continue;
    }
    runnable.push(job);
    if (opts.build ?? true) {
      const key = job.env.key;
      if (!built.has(key)) built.set(key, await isBuilt(opts.home, key));
      if (!built.get(key)) missing.set(key, [...(missing.get(key) ?? []), job]);
    }
  }
  const failedEnvs = new Map<LayerKey, string>();
  if (missing.size > 0) {
    const representatives = [...missing.values()].map((js) => js[0]!.instance);
    const progress = showProgress ? new Progress(representatives.length, "build environments") : undefined;
    const results = await prepareInstances(representatives, {
      home: opts.home,
      reposDir: opts.reposDir,
      specsFile: opts.specsFile,
      workers: opts.buildWorkers ?? workers,
      onResult: (r) => progress?.tick(r.status, r.instanceId),
    });
    progress?.finish();
    for (const r of results) if (r.status === "failed") failedEnvs.set(r.key, r.error ?? "build failed");
  }
  const buildMs = performance.now() - buildStarted;

  const toRun: Job[] = [];
  for (const job of runnable) {
    const failure = failedEnvs.get(job.env!.key);
    if (failure !== undefined)
      await errorRecord(job, "Environment Build Failed", `environment build failed: ${failure}`);
    else toRun.push(job);
  }

  // Evaluate. (The pip configuration is read once per interpreter up front, not inside the first instances' timings.)
  await Promise.all(
    [...new Set(toRun.map((j) => j.env!.spec.python))].map((python) => evalPipSettings(opts.home, python)),
  );
  const evalStarted = performance.now();
  const progress = showProgress && toRun.length > 0 ? new Progress(toRun.length, "evaluate") : undefined;
  const timed: Array<{ id: string; status: string; timings: PhaseTimings }> = [];
  await pool(toRun, workers, async (job) => {
    const id = job.instance.instance_id;
    await clearInstanceOutputs(job.logDir);
    const r = await runInstanceEvaluation({
      home: opts.home,
      instance: job.instance,
      env: job.env,
      patch: job.prediction.model_patch ?? "",
      model: job.prediction.model_name_or_path,
      timeoutMs,
      specsFile: opts.specsFile,
      reposDir: opts.reposDir,
      limits: opts.limits,
      logDir: job.logDir,
      onWarning: (m) => warn(`${id}: ${m}`),
    });
    const record: InstanceRunRecord = {
      instanceId: id,
      model: job.prediction.model_name_or_path,
      status: r.status,
      resolution: r.resolution,
      ...(r.error ? { error: r.error } : {}),
      timings: r.timings,
      warnings: r.warnings,
      logDir: job.logDir,
    };
    records.set(id, record);
    timed.push({ id, status: r.error ? `error: ${r.error.kind}` : r.status, timings: r.timings });
    progress?.tick(r.error ? `error` : r.status, r.error ? `${id} (${r.error.kind})` : id);
    opts.onInstance?.(record);
  });
  progress?.finish();
  const evalWallMs = toRun.length > 0 ? performance.now() - evalStarted : 0;

  // The summary, from the report.json files on disk (as make_run_report).
  const summary = await makeRunSummaryFromDisk({ baseDir: reportDir, runId, datasetIds: order, predictions: byId });
  const summaryPath = await writeRunSummary(reportDir, summary, model, runId);

  const stats = timingStats(timed.map((t) => t.timings));
  const timings: RunTimings = {
    runId,
    model,
    workers,
    timeoutSeconds: timeoutMs / 1000,
    startedAt: startedAt.toISOString(),
    buildMs: Math.round(buildMs),
    evalWallMs: Math.round(evalWallMs),
    wallMs: Math.round(performance.now() - started),
    instancesRun: timed.length,
    instancesPerMinute: evalWallMs > 0 ? Math.round((timed.length / (evalWallMs / 60_000)) * 100) / 100 : 0,
    totals: stats.totals,
    means: stats.means,
    instances: Object.fromEntries(timed.map((t) => [t.id, { status: t.status, ...roundTimings(t.timings) }])),
  };
  const timingsPath = join(reportDir, timingsFileName(model, runId));
  await mkdir(reportDir, { recursive: true });
  await writeFile(timingsPath, `${JSON.stringify(timings, null, 2)}\n`);

  return {
    runId,
    model,
    summary,
    summaryPath,
    timingsPath,
    timings,
    instances: [...order, ...unknown].map((id) => records.get(id)!).filter(Boolean),
    unknownPredictionIds: unknown,
    warnings,
  };
}

async function logError(dir: string, message: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, LOG_FILES.instanceLog), "");
  await appendInstanceLog(dir, "ERROR", message);
}

function positiveInt(n: number, what: string): number {
  if (!Number.isInteger(n) || n < 1) throw new InvalidInputError(`${what} must be a positive integer, got ${n}`);
  return n;
}
