/**
 * `minisandbox evaluate`: the SWE-bench harness's run_evaluation, container-free. Loads the dataset and the
 * predictions, builds missing environments, evaluates every non-empty prediction in a fresh sandbox without
 * network (`workers` at a time), writes the harness's per-instance files and the run summary, plus timing side
 * files (`timings.json` per instance, `<model>.<run_id>.timings.json` per run) that the harness does not have.
 */
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { asTaskInstance, loadDataset, selectInstances } from "../tasks/index.js";
import type { Instance } from "../tasks/types.js";
import type { CamelOf, plan } from "../wire/index.js";
import type { InstanceEnv } from "../env/workspace.js";
import { envFor, isBuilt } from "../env/environments.js";
import { findStoredImage } from "../env/images/index.js";
import type { ImagePolicy } from "../env/instance-image.js";
import { openStore } from "../env/store/index.js";
import { homeLayout } from "../util/home.js";
import { plannedImage, prepareInstances } from "../env/prepare.js";
import { Progress, pool } from "../util/progress.js";
import { InvalidInputError } from "../errors.js";
import type { ResolutionStatus } from "./grading.js";
import { indexPredictions, KEY_MODEL, isEmptyPatch, loadPredictions, unknownPredictionIds } from "./predictions.js";
import {
  instanceLogDir,
  LOG_FILES,
  makeRunSummaryFromDisk,
  summaryFileName,
  writeRunSummary,
  type RunSummary,
} from "./report.js";
import type { Prediction } from "./types.js";
import { DEFAULT_TIMEOUT_SECONDS, type EvalErrorKind, type EvalFailure, type EvalSettings } from "./runner/instance.js";
import { runEvalJob, writeErrorLog } from "./job.js";
import { writeHtmlReport } from "./html-report.js";
import { roundTimings, timingStats, type PhaseTimings } from "./runner/timings.js";
import { evalPipSettings } from "./runner/sandbox.js";

/** A run: its dataset and predictions, how it runs, and what every job shares (`EvalSettings`, passed unchanged). */
export interface RunEvaluationOptions extends EvalSettings {
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
  /** Where `logs/run_evaluation/...` and the summary go (default: the current directory, as the harness). */
  reportDir?: string;
  /** Build missing environments (pull missing images) first (default true); otherwise their instances are errors. */
  build?: boolean;
  /**
   * Which rows run on an image of the store instead of an environment built from their spec (default `auto`: a
   * row's own image_name / docker_image when the store has it). The eval script is the same either way.
   */
  images?: ImagePolicy;
  /** Re-run instances that already have a report.json in this run (default false: skipped, as the harness). */
  rerun?: boolean;
  /** Also write `<model>.<run_id>.html` beside the summary (a self-contained report; the harness's files unchanged). */
  html?: boolean;
  /** Progress bars on stderr (default true). */
  progress?: boolean;
  /** Default: one line on stderr. */
  onWarning?: (message: string) => void;
  onInstance?: (record: InstanceRunRecord) => void;
}

/** How an instance of a run ended (or why it needed no job). */
export type InstanceRunStatus = (typeof plan.RUN_STATUSES)[number];

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
  /** Instances whose tests ran (a patch that does not apply, or a sandbox that never started, never gets there). */
  instancesTested: number;
  /** Instances whose tests ran, per minute of evalWallMs (0 when none did: a rate of failures says nothing). */
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
  /** With `html`. */
  htmlPath?: string;
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

export function timingsFileName(model: string, runId: string): string {
  return summaryFileName(model, runId).replace(/\.json$/, ".timings.json");
}

/** Evaluate predictions on a dataset, the harness's way. Per-instance failures are in the records, never thrown. */
export async function runEvaluation(opts: RunEvaluationOptions): Promise<RunEvaluationResult> {
  const run = await startRun(opts);
  const unknown = await recordUnknownPredictions(run);
  const { jobs, order } = planJobs(run);
  const started = performance.now();
  const { toRun, buildMs } = await buildEnvironments(run, await resolveEnvironments(run, jobs), started);
  const { timed, evalWallMs } = await evaluateJobs(run, toRun);

  // The summary, from the report.json files on disk (as make_run_report).
  const { reportDir, runId, model } = run;
  const summary = await makeRunSummaryFromDisk({ baseDir: reportDir, runId, datasetIds: order, predictions: run.byId });
  const summaryPath = await writeRunSummary(reportDir, summary, model, runId);
  const timings = runTimings(run, timed, buildMs, evalWallMs);
  const timingsPath = join(reportDir, timingsFileName(model, runId));
  await mkdir(reportDir, { recursive: true });
  await writeFile(timingsPath, `${JSON.stringify(timings, null, 2)}\n`);
  const htmlPath = opts.html ? await htmlReport(run, summary, timings) : undefined;
  return {
    runId,
    model,
    summary,
    summaryPath,
    timingsPath,
    ...(htmlPath ? { htmlPath } : {}),
    timings,
    instances: [...order, ...unknown].map((id) => run.records.get(id)!).filter(Boolean),
    unknownPredictionIds: unknown,
    warnings: run.warnings,
  };
}

/** A run laid out, nothing evaluated (the wire's `EvaluationPlan`, camelCase): its jobs run elsewhere (a fleet), then
 * `summarizeEvaluation` sums it up. `plan.EvaluationPlan.fromCamel(p)` is what `evaluate --plan` prints. */
export type EvaluationPlan = CamelOf<typeof plan.EvaluationPlan>;
export type PlannedJob = EvaluationPlan["jobs"][number];

/**
 * Everything `runEvaluation` does before building and evaluating: predictions for unknown ids and specs that cannot
 * be made are recorded as errors (their files written), already-run instances skipped; the rest become jobs.
 */
export async function planEvaluation(opts: RunEvaluationOptions): Promise<EvaluationPlan> {
  const run = await startRun(opts);
  const unknown = await recordUnknownPredictions(run);
  const { jobs, order } = planJobs(run);
  const runnable = await resolveEnvironments(run, jobs);
  const planned = new Set(runnable.map((j) => j.instance.instance_id));
  return {
    runId: run.runId,
    model: run.model,
    reportDir: run.reportDir,
    order,
    jobs: runnable.map((j) => ({
      instanceId: j.instance.instance_id,
      envKey: j.env!.key,
      ...(j.image ? { image: j.image } : {}),
      logDir: j.logDir,
      modelNameOrPath: j.prediction.model_name_or_path,
      modelPatch: j.prediction.model_patch ?? "",
      instance: asTaskInstance(j.instance),
    })),
    records: [...run.records.values()]
      .filter((r) => !planned.has(r.instanceId))
      .map((r) => ({ instanceId: r.instanceId, status: r.status, error: r.error ?? null })),
    unknownPredictionIds: unknown,
  };
}

/**
 * The run summary from the report.json files on disk (as `runEvaluation` ends), written next to them; what
 * `evaluate --summary-only --json` prints is its `plan.EvaluationSummary` part.
 */
export async function summarizeEvaluation(
  opts: RunEvaluationOptions,
): Promise<CamelOf<typeof plan.EvaluationSummary> & { runId: string; model: string }> {
  const run = await startRun(opts);
  const { reportDir, runId, model } = run;
  const datasetIds = run.instances.map((i) => i.instance_id);
  const summary = await makeRunSummaryFromDisk({ baseDir: reportDir, runId, datasetIds, predictions: run.byId });
  const summaryPath = await writeRunSummary(reportDir, summary, model, runId);
  const htmlPath = opts.html ? await htmlReport(run, summary) : undefined;
  return { runId, model, summary, summaryPath, ...(htmlPath ? { htmlPath } : {}) };
}

function htmlReport(run: Run, summary: RunSummary, timings?: RunTimings): Promise<string> {
  return writeHtmlReport({
    reportDir: run.reportDir,
    runId: run.runId,
    model: run.model,
    summary,
    instances: run.instances,
    predictions: run.byId,
    dataset: run.datasetName,
    ...(timings ? { timings } : {}),
  });
}

/** One evaluation run: its settings, its inputs, and the records so far. */
interface Run {
  opts: RunEvaluationOptions;
  /** What every job gets, as given (the timeout's default filled in). */
  settings: EvalSettings;
  started: number;
  startedAt: Date;
  workers: number;
  timeoutMs: number;
  reportDir: string;
  runId: string;
  showProgress: boolean;
  datasetName: string;
  all: Instance[];
  instances: Instance[];
  predictions: Prediction[];
  byId: Map<string, Prediction>;
  model: string;
  records: Map<string, InstanceRunRecord>;
  warnings: string[];
  warn: (message: string) => void;
}

/** An instance to evaluate, and where its files go. */
interface Job {
  instance: Instance;
  prediction: Prediction;
  logDir: string;
  env?: InstanceEnv;
  /** The image it runs on, when it runs on one. */
  image?: string;
}

async function startRun(opts: RunEvaluationOptions): Promise<Run> {
  const started = performance.now();
  const startedAt = new Date();
  const workers = positiveInt(opts.workers ?? 2, "workers");
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_SECONDS * 1000;
  if (!(timeoutMs > 0)) throw new InvalidInputError(`timeout must be positive, got ${timeoutMs} ms`);
  const reportDir = resolve(opts.reportDir ?? process.cwd());
  const runId = opts.runId ?? defaultRunId(startedAt);
  const warnings: string[] = [];
  const warn = (message: string): void => {
    warnings.push(message);
    if (opts.onWarning) opts.onWarning(message);
    else process.stderr.write(`minisandbox: warning: ${message}\n`);
  };
  const datasetName = typeof opts.dataset === "string" ? opts.dataset : "the dataset";
  const all = typeof opts.dataset === "string" ? await loadDataset(opts.dataset) : opts.dataset;
  const ids = opts.instanceIds;
  const instances = ids && ids.length > 0 ? selectInstances(all, ids, datasetName) : all;
  const predictions =
    typeof opts.predictions === "string" ? await loadPredictions(opts.predictions, all) : opts.predictions;
  if (predictions.length === 0) throw new InvalidInputError("no predictions to evaluate");
  const byId = indexPredictions(predictions);
  const model = predictions[0]!.model_name_or_path;
  if (typeof model !== "string" || model === "")
    throw new InvalidInputError(`predictions need "${KEY_MODEL}" (the model's name; it names the run's report)`);
  // Fail early on ids that cannot name a directory.
  summaryFileName(model, runId);
  const showProgress = opts.progress ?? true;
  const settings: EvalSettings = { ...settingsOf(opts), timeoutMs };
  const state = { opts, settings, started, startedAt, workers, timeoutMs, reportDir, runId, showProgress };
  return { ...state, datasetName, all, instances, predictions, byId, model, records: new Map(), warnings, warn };
}

/**
 * Every field of `EvalSettings`: a field added there fails the build until it is here, so none is dropped between a
 * run's options and its jobs. Each job gets its own `onWarning` (prefixed with its id).
 */
const SETTINGS: Record<keyof EvalSettings, boolean> = {
  home: true,
  specsFile: true,
  base: true,
  reposDir: true,
  timeoutMs: true,
  limits: true,
  network: true,
  onWarning: false,
};

/** The run's options' `EvalSettings` part, as given (absent fields stay absent). */
function settingsOf(opts: RunEvaluationOptions): EvalSettings {
  const picked: Partial<Record<keyof EvalSettings, unknown>> = {};
  for (const [k, keep] of Object.entries(SETTINGS) as [keyof EvalSettings, boolean][])
    if (keep && opts[k] !== undefined) picked[k] = opts[k];
  return { ...(picked as Partial<EvalSettings>), home: opts.home };
}

/** Predictions for ids the dataset does not have: an error record each (and a run_instance.log), never run. */
async function recordUnknownPredictions(run: Run): Promise<string[]> {
  const unknown = unknownPredictionIds(
    run.predictions,
    run.all.map((i) => i.instance_id),
  );
  for (const id of unknown) {
    const pred = run.byId.get(id)!;
    const message = `instance ${id} is not in ${run.datasetName}`;
    run.warn(`prediction for ${id}: ${message}; not evaluated`);
    const record: InstanceRunRecord = {
      instanceId: id,
      model: pred.model_name_or_path,
      status: "error",
      resolution: null,
      error: { kind: "Unknown Instance", message },
      warnings: [],
    };
    try {
      record.logDir = instanceLogDir(run.reportDir, run.runId, pred.model_name_or_path, id);
      await logError(record.logDir, message);
    } catch {
      // an id that cannot name a directory: the record says it all
    }
    run.records.set(id, record);
  }
  return unknown;
}

/** The jobs to run; instances without a prediction, with an empty one, or already run get their record now. */
function planJobs(run: Run): { jobs: Job[]; order: string[] } {
  const jobs: Job[] = [];
  const order: string[] = [];
  let skipped = 0;
  for (const instance of run.instances) {
    const id = instance.instance_id;
    order.push(id);
    const prediction = run.byId.get(id);
    const base = { instanceId: id, resolution: null, warnings: [] as string[] };
    if (!prediction) {
      run.records.set(id, { ...base, model: null, status: "no_prediction" });
      continue;
    }
    const model = prediction.model_name_or_path;
    if (isEmptyPatch(prediction)) {
      run.records.set(id, { ...base, model, status: "empty_patch" });
      continue;
    }
    let logDir: string;
    try {
      logDir = instanceLogDir(run.reportDir, run.runId, model, id);
    } catch (e) {
      const error: EvalFailure = { kind: "Unknown Instance", message: (e as Error).message };
      run.records.set(id, { ...base, model, status: "error", error });
      continue;
    }
    if (!run.opts.rerun && existsSync(join(logDir, LOG_FILES.report))) {
      skipped++;
      run.records.set(id, { ...base, model, status: "skipped", logDir });
      continue;
    }
    jobs.push({ instance, prediction, logDir });
  }
  if (skipped > 0) process.stderr.write(`${skipped} instances already run, skipping...\n`);
  return { jobs, order };
}

/** A job that ends before running: its files cleared, the error logged and recorded. */
async function recordError(run: Run, job: Job, kind: EvalErrorKind, message: string): Promise<void> {
  await writeErrorLog(job.logDir, message);
  const record: InstanceRunRecord = {
    instanceId: job.instance.instance_id,
    model: job.prediction.model_name_or_path,
    status: "error",
    resolution: null,
    error: { kind, message },
    warnings: [],
    logDir: job.logDir,
  };
  run.records.set(record.instanceId, record);
  run.opts.onInstance?.(record);
}

/**
 * Each job's environment (its spec computed here, once: the eval script comes from it) and the image it runs on if
 * any; jobs whose spec cannot be made, or that the image policy gives no image, are errors.
 */
async function resolveEnvironments(run: Run, jobs: Job[]): Promise<Job[]> {
  const runnable: Job[] = [];
  const policy = run.opts.images ?? { kind: "auto" };
  for (const job of jobs) {
    try {
      job.env = envFor(job.instance, run.opts);
      const image = await plannedImage(job.instance, { home: run.opts.home, images: policy });
      if (image !== undefined) job.image = image;
    } catch (e) {
      await recordError(run, job, "Environment Missing", (e as Error).message);
      continue;
    }
    runnable.push(job);
  }
  return runnable;
}

/** Missing environments are built first, each distinct one once; their jobs are errors when that fails. */
async function buildEnvironments(
  run: Run,
  runnable: Job[],
  started: number,
): Promise<{ toRun: Job[]; buildMs: number }> {
  const { opts } = run;
  // What each job needs present: its image, or its environment's layer.
  const missing = new Map<string, Job[]>();
  const present = new Map<string, boolean>();
  const store = openStore(homeLayout(opts.home).store);
  for (const job of runnable) {
    if (opts.build ?? true) {
      const need = job.image ?? job.env!.key;
      if (!present.has(need))
        present.set(need, job.image ? !!(await findStoredImage(store, job.image)) : await isBuilt(opts.home, need));
      if (!present.get(need)) missing.set(need, [...(missing.get(need) ?? []), job]);
    }
  }
  const failedEnvs = await buildMissing(
    run,
    [...missing.values()].map((js) => js[0]!.instance),
  );
  const buildMs = performance.now() - started;
  const toRun: Job[] = [];
  for (const job of runnable) {
    const failure = failedEnvs.get(job.image ?? job.env!.key);
    const what = job.image ? `image ${job.image} could not be pulled` : "environment build failed";
    if (failure !== undefined) await recordError(run, job, "Environment Build Failed", `${what}: ${failure}`);
    else toRun.push(job);
  }
  return { toRun, buildMs };
}

/** Build the environments (pull the images) of these instances; the failures by key (image). */
async function buildMissing(run: Run, representatives: Instance[]): Promise<Map<string, string>> {
  const failed = new Map<string, string>();
  if (representatives.length === 0) return failed;
  const { opts } = run;
  const workers = opts.buildWorkers ?? run.workers;
  const progress = run.showProgress
    ? new Progress(representatives.length, "build environments", { workers })
    : undefined;
  const results = await prepareInstances(representatives, {
    home: opts.home,
    reposDir: opts.reposDir,
    specsFile: opts.specsFile,
    base: opts.base,
    workers,
    ...(opts.images ? { images: opts.images } : {}),
    onStep: (id, step) => progress?.step(`${id}: ${step}`, id),
    onResult: (r) => progress?.tick(r.status, r.instanceId, r.instanceId),
  });
  progress?.finish();
  for (const r of results) if (r.status === "failed") failed.set(r.image ?? r.key, r.error ?? "build failed");
  return failed;
}

interface Timed {
  id: string;
  status: string;
  timings: PhaseTimings;
}

/** Every job in a fresh sandbox, `workers` at a time; the wall time from the first sandbox to the last close. */
async function evaluateJobs(run: Run, toRun: Job[]): Promise<{ timed: Timed[]; evalWallMs: number }> {
  const { opts } = run;
  // The pip configuration is read once per interpreter up front, not inside the first instances' timings.
  const pythons = new Set(toRun.map((j) => j.env!.spec.python));
  await Promise.all([...pythons].map((python) => evalPipSettings(opts.home, python)));
  const started = performance.now();
  const progress =
    run.showProgress && toRun.length > 0 ? new Progress(toRun.length, "evaluate", { workers: run.workers }) : undefined;
  const timed: Timed[] = [];
  await pool(toRun, run.workers, async (job) => {
    const id = job.instance.instance_id;
    progress?.begin(id);
    const r = await runEvalJob({
      ...run.settings,
      instance: job.instance,
      env: job.env,
      ...(job.image ? { image: job.image } : {}),
      patch: job.prediction.model_patch ?? "",
      model: job.prediction.model_name_or_path,
      logDir: job.logDir,
      onWarning: (m) => run.warn(`${id}: ${m}`),
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
    run.records.set(id, record);
    timed.push({ id, status: r.error ? `error: ${r.error.kind}` : r.status, timings: r.timings! });
    progress?.tick(r.error ? `error` : r.status, r.error ? `${id} (${r.error.kind})` : id, id);
    opts.onInstance?.(record);
  });
  progress?.finish();
  return { timed, evalWallMs: toRun.length > 0 ? performance.now() - started : 0 };
}

function runTimings(run: Run, timed: Timed[], buildMs: number, evalWallMs: number): RunTimings {
  const stats = timingStats(timed.map((t) => t.timings));
  const tested = timed.filter((t) => t.timings.testsMs > 0).length;
  const perMinute = evalWallMs > 0 ? Math.round((tested / (evalWallMs / 60_000)) * 100) / 100 : 0;
  return {
    runId: run.runId,
    model: run.model,
    workers: run.workers,
    timeoutSeconds: run.timeoutMs / 1000,
    startedAt: run.startedAt.toISOString(),
    buildMs: Math.round(buildMs),
    evalWallMs: Math.round(evalWallMs),
    wallMs: Math.round(performance.now() - run.started),
    instancesRun: timed.length,
    instancesTested: tested,
    instancesPerMinute: perMinute,
    totals: stats.totals,
    means: stats.means,
    instances: Object.fromEntries(timed.map((t) => [t.id, { status: t.status, ...roundTimings(t.timings) }])),
  };
}

async function logError(dir: string, message: string): Promise<void> {
  await writeErrorLog(dir, message);
}

function positiveInt(n: number, what: string): number {
  if (!Number.isInteger(n) || n < 1) throw new InvalidInputError(`${what} must be a positive integer, got ${n}`);
  return n;
}
