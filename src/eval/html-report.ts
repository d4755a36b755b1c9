/**
 * The HTML report of a run, `<model>.<run_id>.html` beside the summary: gathered from the files the run left on disk
 * (the summary's verdicts, each instance's report.json, patch.diff, test_output.txt, timings.json and
 * integrity.json, the run's timings file) and rendered by `src/view/eval-report.ts`. It reads those files only and
 * writes that one file: the harness's files stay as they are.
 */
import { open, readFile } from "node:fs/promises";
import { join } from "node:path";
import { evalReportHtml, reportCss, type ReportFlag, type ReportInstance, type Verdict } from "../view/eval-report.js";
import { writePage } from "../view/page.js";
import { instanceLogDir, instanceOutcomes, LOG_FILES, readInstanceReport, summaryFileName } from "./report.js";
import type { RunSummary } from "./report.js";
import { INTEGRITY_FILE, TIMINGS_FILE } from "./runner/instance.js";
import type { EvalInstance, Prediction } from "./types.js";

export interface HtmlReportInput {
  reportDir: string;
  runId: string;
  /** The summary's model (its file name). */
  model: string;
  summary: RunSummary;
  /** The run's instances (after any instance filter). */
  instances: readonly EvalInstance[];
  predictions: ReadonlyMap<string, Prediction>;
  /** How the dataset was named (a path or a hub name). */
  dataset: string;
  /** The run's own figures, when it ran here (a summary of files made elsewhere has none). */
  timings?: { instancesPerMinute: number; evalWallMs: number };
}

/** `<model>.<run_id>.html`, beside `<model>.<run_id>.json`. */
export const htmlReportFileName = (model: string, runId: string): string =>
  summaryFileName(model, runId).replace(/\.json$/, ".html");

const MAX_PATCH_BYTES = 512 * 1024;
const MAX_OUTPUT_BYTES = 24 * 1024;

/** At most `max` bytes of a file: its start (`from: "head"`) or its end; undefined when it is absent. */
async function readPart(path: string, max: number, from: "head" | "tail"): Promise<string | undefined> {
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    fh = await open(path, "r");
  } catch {
    return undefined;
  }
  try {
    const size = (await fh.stat()).size;
    const n = Math.min(size, max);
    const buf = Buffer.alloc(n);
    await fh.read(buf, 0, n, from === "head" ? 0 : size - n);
    const cut = size > max ? `… ${size - max} bytes left out …\n` : "";
    return from === "head" ? buf.toString("utf8") + (cut ? `\n${cut}` : "") : cut + buf.toString("utf8");
  } finally {
    await fh.close();
  }
}

async function readJson(path: string): Promise<Record<string, unknown> | undefined> {
  try {
    const v: unknown = JSON.parse(await readFile(path, "utf8"));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** integrity.json's flags, each field a string (the file is ours, but read like any other). */
function flagsOf(doc: Record<string, unknown> | undefined): ReportFlag[] | undefined {
  if (!doc || !Array.isArray(doc.flags)) return undefined;
  const str = (v: unknown): string => (typeof v === "string" ? v : "");
  return doc.flags
    .filter((f): f is Record<string, unknown> => typeof f === "object" && f !== null)
    .map((f) => ({ kind: str(f.kind), path: str(f.path), reason: str(f.reason) }));
}

const VERDICT_OF: Record<string, Verdict> = {
  resolved: "resolved",
  unresolved: "unresolved",
  error: "error",
  "empty patch": "empty patch",
  incomplete: "incomplete",
};

async function instanceFacts(input: HtmlReportInput, inst: EvalInstance, verdict: Verdict): Promise<ReportInstance> {
  const id = inst.instance_id;
  const out: ReportInstance = { id, repo: inst.repo || "(no repository)", verdict };
  const pred = input.predictions.get(id);
  if (!pred) return out;
  let dir: string;
  try {
    dir = instanceLogDir(input.reportDir, input.runId, pred.model_name_or_path, id);
  } catch {
    return out;
  }
  const [report, patch, testOutput, timings, integrity] = await Promise.all([
    readInstanceReport(dir, id),
    readPart(join(dir, LOG_FILES.patch), MAX_PATCH_BYTES, "head"),
    readPart(join(dir, LOG_FILES.testOutput), MAX_OUTPUT_BYTES, "tail"),
    readJson(join(dir, TIMINGS_FILE)),
    readJson(join(dir, INTEGRITY_FILE)),
  ]);
  out.patch = patch ?? pred.model_patch ?? undefined;
  out.testOutput = testOutput;
  out.flags = flagsOf(integrity);
  const entry = report && report !== "invalid" ? report[id] : undefined;
  if (entry) {
    out.patchApplied = entry.patch_successfully_applied;
    out.failToPass = entry.tests_status?.FAIL_TO_PASS;
    out.passToPass = entry.tests_status?.PASS_TO_PASS;
  }
  if (timings) {
    const status = typeof timings.status === "string" ? timings.status : "";
    if (status.startsWith("error: ")) out.errorKind = status.slice("error: ".length);
    if (typeof timings.cause === "string") out.cause = timings.cause;
    const phases = Object.entries(timings).filter((e): e is [string, number] => typeof e[1] === "number");
    out.timings = Object.fromEntries(phases);
  }
  return out;
}

/** Write the run's HTML report beside its summary; returns its path. */
export async function writeHtmlReport(input: HtmlReportInput): Promise<string> {
  const outcomes = instanceOutcomes(input.summary);
  const instances = await Promise.all(
    [...input.instances]
      .sort((a, b) => (a.instance_id < b.instance_id ? -1 : a.instance_id > b.instance_id ? 1 : 0))
      .map((i) => instanceFacts(input, i, VERDICT_OF[outcomes.get(i.instance_id) ?? "incomplete"] ?? "incomplete")),
  );
  const body = evalReportHtml({
    runId: input.runId,
    model: input.model,
    dataset: input.dataset,
    generatedAt: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
    instances,
    instancesPerMinute: input.timings?.instancesPerMinute,
    evalWallMs: input.timings?.evalWallMs,
  });
  const repos = new Set(instances.map((i) => i.repo)).size;
  const path = join(input.reportDir, htmlReportFileName(input.model, input.runId));
  return writePage(path, { title: `Evaluation ${input.runId}`, body, css: reportCss(repos) });
}
