/** Evaluation results for people (text) and scripts (JSON), as `minisandbox evaluate` prints them. */
import { table } from "../util/progress.js";
import { renderSummary } from "./report.js";
import type { RunEvaluationResult } from "./run.js";
import { PHASES } from "./runner/timings.js";

const PHASE_LABELS: Record<(typeof PHASES)[number], string> = {
  diffMs: "agent diff",
  sandboxMs: "sandbox ready",
  applyMs: "patch apply",
  testsMs: "tests (eval.sh)",
  gradingMs: "grading",
  cleanupMs: "cleanup",
  totalMs: "total",
  overheadMs: "overhead (total - tests)",
};

/** The summary, one line per errored instance, the phase timings, and where the files went. */
export function renderRun(r: RunEvaluationResult): string {
  const out: string[] = [renderSummary(r.summary), ...renderErrors(r), ...renderTimings(r)];
  out.push(`Report written to ${r.summaryPath}`, `Timings written to ${r.timingsPath}`);
  if (r.htmlPath) out.push(`HTML report written to ${r.htmlPath}`);
  return `${out.join("\n")}\n`;
}

function renderErrors(r: RunEvaluationResult): string[] {
  const errors = r.instances.filter((i) => i.status === "error");
  if (errors.length === 0) return [];
  const lines = errors.map((e) => {
    const kind = e.error?.kind ?? "error";
    const detail = e.error?.message.split("\n")[0] ?? "";
    return `  ${e.instanceId}: ${kind}${detail && !detail.includes(e.error!.kind) ? ` — ${detail}` : ""}`;
  });
  return ["Errors:", ...lines, ""];
}

function renderTimings(r: RunEvaluationResult): string[] {
  const t = r.timings;
  if (t.instancesRun === 0) return [];
  const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? "" : "s"}`;
  const built = t.buildMs >= 1000 ? `; environments built first in ${(t.buildMs / 1000).toFixed(1)} s` : "";
  const rows = PHASES.filter((p) => p !== "diffMs").map((p) => [
    PHASE_LABELS[p],
    `${Math.round(t.totals[p])}`,
    `${Math.round(t.means[p])}`,
  ]);
  // A rate only of instances whose tests ran: patches that do not apply fail fast and would inflate it.
  const rate =
    t.instancesTested === 0
      ? "; none reached its tests (see Errors)"
      : t.instancesTested < t.instancesRun
        ? ` (${t.instancesPerMinute} instances/min, of the ${t.instancesTested} that reached their tests)`
        : ` (${t.instancesPerMinute} instances/min)`;
  return [
    `Timings: ${plural(t.instancesRun, "instance")} run with ${plural(t.workers, "worker")} in ` +
      `${(t.evalWallMs / 1000).toFixed(1)} s${rate}${built}`,
    table(["phase", "total ms", "mean ms"], rows).trimEnd(),
    "",
  ];
}

/** What `evaluate --json` prints: the result without the per-instance timing table (already in `instances`). */
export function runResultJson(r: RunEvaluationResult): Record<string, unknown> {
  return {
    runId: r.runId,
    model: r.model,
    summaryPath: r.summaryPath,
    timingsPath: r.timingsPath,
    ...(r.htmlPath ? { htmlPath: r.htmlPath } : {}),
    summary: r.summary,
    instances: r.instances,
    unknownPredictionIds: r.unknownPredictionIds,
    warnings: r.warnings,
    timings: { ...r.timings, instances: undefined },
  };
}
