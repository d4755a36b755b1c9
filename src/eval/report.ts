/**
 * The harness's files: per instance `logs/run_evaluation/<run_id>/<model>/<instance_id>/{patch.diff, eval.sh,
 * test_output.txt, report.json, run_instance.log}`, and the run summary `<model>.<run_id>.json` (make_run_report),
 * byte-compatible with what the harness writes (Python json.dumps layout and ASCII escaping).
 */
import { appendFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { InvalidInputError } from "../errors.js";
import { isEmptyPatch } from "./predictions.js";
import { pyJsonDumps, pySorted } from "./pystr.js";
import type { InstanceReport, InstanceReportFile, Prediction } from "./types.js";
import type { OutOf, plan } from "../wire/index.js";

/** Relative to the directory the run writes into (the harness's working directory). */
export const RUN_EVALUATION_LOG_DIR = join("logs", "run_evaluation");

export const LOG_FILES = {
  patch: "patch.diff",
  evalScript: "eval.sh",
  testOutput: "test_output.txt",
  report: "report.json",
  instanceLog: "run_instance.log",
} as const;

/** Path segment for a model: "/" becomes "__". */
export const modelDirName = (model: string): string => model.replaceAll("/", "__");

/** Reject ids that would escape their directory when used as a path segment. */
function segment(value: string, what: string): string {
  if (value === "" || value === "." || value === ".." || value.includes("/") || value.includes("\0")) {
    throw new InvalidInputError(`${what} "${value}" cannot be used as a directory name`);
  }
  return value;
}

/** `<baseDir>/logs/run_evaluation/<run_id>/<model with / -> __>/<instance_id>` */
export function instanceLogDir(baseDir: string, runId: string, model: string, instanceId: string): string {
  return join(
    baseDir,
    RUN_EVALUATION_LOG_DIR,
    segment(runId, "run id"),
    segment(modelDirName(model), "model name"),
    segment(instanceId, "instance id"),
  );
}

/** report.json text: `json.dumps(report, indent=4)`, no trailing newline. */
export const reportJsonText = (report: InstanceReportFile): string => pyJsonDumps(report, 4);

export interface InstanceFiles {
  patch?: string;
  evalScript?: string;
  testOutput?: string;
  report?: InstanceReportFile;
}

/** Write whichever per-instance files are given (creating the directory). */
export async function writeInstanceFiles(dir: string, files: InstanceFiles): Promise<void> {
  await mkdir(dir, { recursive: true });
  const writes: Array<Promise<void>> = [];
  if (files.patch !== undefined) writes.push(writeFile(join(dir, LOG_FILES.patch), files.patch));
  if (files.evalScript !== undefined) writes.push(writeFile(join(dir, LOG_FILES.evalScript), files.evalScript));
  if (files.testOutput !== undefined) writes.push(writeFile(join(dir, LOG_FILES.testOutput), files.testOutput));
  if (files.report !== undefined) writes.push(writeFile(join(dir, LOG_FILES.report), reportJsonText(files.report)));
  await Promise.all(writes);
}

/** What the harness appends to test_output.txt when the run hit its timeout. */
export const timeoutNote = (seconds: number): string => `\n\nTimeout error: ${seconds} seconds exceeded.`;

export type LogLevel = "DEBUG" | "INFO" | "WARNING" | "ERROR";

const pad = (n: number, width = 2): string => String(n).padStart(width, "0");

/** A run_instance.log line in the harness's logging format: `%(asctime)s - %(levelname)s - %(message)s`. */
export function formatLogLine(level: LogLevel, message: string, at: Date = new Date()): string {
  const asctime =
    `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ` +
    `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())},${pad(at.getMilliseconds(), 3)}`;
  return `${asctime} - ${level} - ${message}\n`;
}

/** Append one line to the instance's run_instance.log. */
export async function appendInstanceLog(dir: string, level: LogLevel, message: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  await appendFile(join(dir, LOG_FILES.instanceLog), formatLogLine(level, message));
}

/** The run summary, field for field and in the order the harness writes it. */
/** The harness's run summary (`<model>.<run_id>.json`), declared with the fleet's plans (src/wire/plan.ts). */
export type RunSummary = OutOf<typeof plan.RunSummary>;

/** A report.json as found: its content, or "invalid" (empty, not JSON, or without the instance's entry). */
export type FoundReport = InstanceReportFile | "invalid";

export interface RunSummaryInput {
  /** Instances of the run's dataset (after any instance-id filter), in any order. */
  datasetIds: readonly string[];
  /** All predictions by instance id. */
  predictions: ReadonlyMap<string, Prediction>;
  /** report.json per instance id; an id absent here had no report (the run errored). */
  reports: ReadonlyMap<string, FoundReport>;
}

/**
 * `make_run_report`: an instance without prediction is incomplete; with an empty patch, empty; with a report,
 * completed and resolved/unresolved by it — or completed *and* error when the report is unreadable; without a
 * report, error. `submitted_*` count every prediction, inside the dataset or not.
 */
export function makeRunSummary(input: RunSummaryInput): RunSummary {
  const completed = new Set<string>();
  const resolved = new Set<string>();
  const unresolved = new Set<string>();
  const errors = new Set<string>();
  const incomplete = new Set<string>();
  const empty = new Set<string>();
  for (const id of input.datasetIds) {
    const prediction = input.predictions.get(id);
    if (!prediction) {
      incomplete.add(id);
      continue;
    }
    if (isEmptyPatch(prediction)) {
      empty.add(id);
      continue;
    }
    const report = input.reports.get(id);
    if (report === undefined) {
      errors.add(id);
      continue;
    }
    completed.add(id);
    const entry = report === "invalid" ? undefined : report[id];
    if (!entry) errors.add(id);
    else (entry.resolved ? resolved : unresolved).add(id);
  }
  return {
    total_instances: input.datasetIds.length,
    submitted_instances: input.predictions.size,
    completed_instances: completed.size,
    resolved_instances: resolved.size,
    unresolved_instances: unresolved.size,
    empty_patch_instances: empty.size,
    error_instances: errors.size,
    completed_ids: pySorted(completed),
    incomplete_ids: pySorted(incomplete),
    empty_patch_ids: pySorted(empty),
    submitted_ids: pySorted(input.predictions.keys()),
    resolved_ids: pySorted(resolved),
    unresolved_ids: pySorted(unresolved),
    error_ids: pySorted(errors),
    schema_version: 2,
  };
}

/** Read one instance's report.json the way make_run_report does: absent -> null. */
export async function readInstanceReport(dir: string, instanceId: string): Promise<FoundReport | null> {
  let text: string;
  try {
    text = await readFile(join(dir, LOG_FILES.report), "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
  if (text.trim() === "") return "invalid";
  try {
    const parsed: unknown = JSON.parse(text);
    const entry = isRecord(parsed) ? parsed[instanceId] : undefined;
    if (!isRecord(entry) || !("resolved" in entry)) return "invalid";
    return { [instanceId]: entry as unknown as InstanceReport };
  } catch {
    return "invalid";
  }
}

/** The summary of a run from the report.json files on disk under `baseDir`. */
export async function makeRunSummaryFromDisk(args: {
  baseDir: string;
  runId: string;
  datasetIds: readonly string[];
  predictions: ReadonlyMap<string, Prediction>;
}): Promise<RunSummary> {
  const reports = new Map<string, FoundReport>();
  for (const id of args.datasetIds) {
    const p = args.predictions.get(id);
    if (!p) continue;
    const found = await readInstanceReport(instanceLogDir(args.baseDir, args.runId, p.model_name_or_path, id), id);
    if (found !== null) reports.set(id, found);
  }
  return makeRunSummary({ datasetIds: args.datasetIds, predictions: args.predictions, reports });
}

/** `<model with / -> __>.<run_id>.json` (the harness names it after the first prediction's model). */
export function summaryFileName(model: string, runId: string): string {
  return `${modelDirName(model)}.${segment(runId, "run id")}.json`;
}

/** Summary file text: the harness prints `json.dumps(report, indent=4)`, hence the trailing newline. */
export const summaryJsonText = (summary: RunSummary): string => `${pyJsonDumps(summary, 4)}\n`;

/** Write the summary into `dir`; returns its path. */
export async function writeRunSummary(dir: string, summary: RunSummary, model: string, runId: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  const path = join(dir, summaryFileName(model, runId));
  await writeFile(path, summaryJsonText(summary));
  return path;
}

/** Per-instance outcome as the summary tells it. */
export type InstanceOutcome = "resolved" | "unresolved" | "error" | "empty patch" | "incomplete";

export function instanceOutcomes(summary: RunSummary): Map<string, InstanceOutcome> {
  const out = new Map<string, InstanceOutcome>();
  // Later lists win: an unreadable report is both completed and error; error is the truth.
  const order: Array<[string[], InstanceOutcome]> = [
    [summary.incomplete_ids, "incomplete"],
    [summary.empty_patch_ids, "empty patch"],
    [summary.unresolved_ids, "unresolved"],
    [summary.resolved_ids, "resolved"],
    [summary.error_ids, "error"],
  ];
  for (const [ids, outcome] of order) for (const id of ids) out.set(id, outcome);
  return out;
}

/**
 * Plain-text summary: the harness's closing lines (same wording, plus the resolved percentage; like the harness,
 * "submitted" here counts only predictions inside the dataset), then one row per instance unless `perInstance` is
 * false.
 */
export function renderSummary(summary: RunSummary, opts: { perInstance?: boolean } = {}): string {
  const pct = (n: number): string =>
    summary.total_instances === 0 ? "" : ` (${((100 * n) / summary.total_instances).toFixed(1)}%)`;
  const lines = [
    `Total instances: ${summary.total_instances}`,
    `Instances submitted: ${summary.total_instances - summary.incomplete_ids.length}`,
    `Instances completed: ${summary.completed_instances}`,
    `Instances incomplete: ${summary.incomplete_ids.length}`,
    `Instances resolved: ${summary.resolved_instances}${pct(summary.resolved_instances)}`,
    `Instances unresolved: ${summary.unresolved_instances}`,
    `Instances with empty patches: ${summary.empty_patch_instances}`,
    `Instances with errors: ${summary.error_instances}`,
  ];
  const outcomes = instanceOutcomes(summary);
  if ((opts.perInstance ?? true) && outcomes.size > 0) {
    const ids = pySorted(outcomes.keys());
    const width = Math.max("instance".length, ...ids.map((id) => id.length));
    lines.push("", `${"instance".padEnd(width)}  result`, `${"-".repeat(width)}  ${"-".repeat(11)}`);
    for (const id of ids) lines.push(`${id.padEnd(width)}  ${outcomes.get(id)}`);
  }
  return `${lines.join("\n")}\n`;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
