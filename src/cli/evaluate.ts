import type { Command } from "commander";
import { join } from "node:path";
import { runEvaluation, type RunEvaluationResult } from "../eval/run.js";
import { renderValidation, validateInstances } from "../eval/validate.js";
import { renderSummary } from "../eval/report.js";
import { PHASES } from "../eval/runner/timings.js";
import { InvalidInputError } from "../errors.js";
import { table } from "../util/progress.js";
import { fail } from "./common.js";
import { addDatasetOptions, type ValidateHook } from "./prepare.js";

interface EvaluateCliOptions {
  dataset: string;
  instanceIds: string[];
  repos?: string;
  specs?: string;
  predictions: string;
  runId?: string;
  workers: string;
  timeout: string;
  reportDir?: string;
  build: boolean;
  rerun?: boolean;
  json?: boolean;
}

function positive(value: string, flag: string, integer: boolean): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    throw new InvalidInputError(`${flag} expects a positive ${integer ? "integer" : "number"}, got ${value}`);
  }
  return n;
}

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

export function renderRun(r: RunEvaluationResult): string {
  const out: string[] = [renderSummary(r.summary)];
  const errors = r.instances.filter((i) => i.status === "error");
  if (errors.length > 0) {
    out.push("Errors:");
    for (const e of errors) {
      const detail = e.error?.message.split("\n")[0] ?? "";
      out.push(
        `  ${e.instanceId}: ${e.error?.kind ?? "error"}${detail && !detail.includes(e.error!.kind) ? ` — ${detail}` : ""}`,
      );
    }
    out.push("");
  }
  const t = r.timings;
  if (t.instancesRun > 0) {
    out.push(
      `Timings: ${t.instancesRun} instance${t.instancesRun === 1 ? "" : "s"} run with ${t.workers} worker${t.workers === 1 ? "" : "s"} in ` +
        `${(t.evalWallMs / 1000).toFixed(1)} s (${t.instancesPerMinute} instances/min)` +
        (t.buildMs >= 1000 ? `; environments built first in ${(t.buildMs / 1000).toFixed(1)} s` : ""),
    );
    const rows = PHASES.filter((p) => p !== "diffMs").map((p) => [
      PHASE_LABELS[p],
      `${Math.round(t.totals[p])}`,
      `${Math.round(t.means[p])}`,
    ]);
    out.push(table(["phase", "total ms", "mean ms"], rows).trimEnd(), "");
  }
  out.push(`Report written to ${r.summaryPath}`, `Timings written to ${r.timingsPath}`);
  return `${out.join("\n")}\n`;
}

export function registerEvaluateCommand(program: Command, getHome: () => string): void {
  addDatasetOptions(program.command("evaluate"))
    .description("evaluate predictions as the SWE-bench harness does, each instance in a fresh sandbox without network")
    .requiredOption("--predictions <FILE|gold|empty>", "predictions (JSON list, JSONL, preds.json) or gold / empty")
    .option(
      "--run-id <ID>",
      "run id (default minisandbox-<timestamp>); instances with a report in this run are skipped",
    )
    .option("--workers <N>", "instances evaluated at once", "2")
    .option("--timeout <SECONDS>", "whole-instance timeout", "1800")
    .option("--report-dir <DIR>", "where logs/run_evaluation/... and the summary go (default: current directory)")
    .option("--no-build", "do not build missing environments (their instances become errors)")
    .option("--rerun", "re-run instances that already have a report.json in this run")
    .option("--json", "machine-readable output")
    .action(async (o: EvaluateCliOptions) => {
      try {
        const home = getHome();
        const ids = o.instanceIds.flat();
        const r = await runEvaluation({
          home,
          dataset: o.dataset,
          predictions: o.predictions,
          instanceIds: ids,
          ...(o.runId !== undefined ? { runId: o.runId } : {}),
          workers: positive(o.workers, "--workers", true),
          timeoutMs: positive(o.timeout, "--timeout", false) * 1000,
          reposDir: o.repos,
          specsFile: o.specs,
          reportDir: o.reportDir,
          build: o.build,
          rerun: o.rerun ?? false,
        });
        if (o.json) {
          process.stdout.write(
            `${JSON.stringify(
              {
                runId: r.runId,
                model: r.model,
                summaryPath: r.summaryPath,
                timingsPath: r.timingsPath,
                summary: r.summary,
                instances: r.instances,
                unknownPredictionIds: r.unknownPredictionIds,
                warnings: r.warnings,
                timings: { ...r.timings, instances: undefined },
              },
              null,
              2,
            )}\n`,
          );
        } else process.stdout.write(renderRun(r));
        process.exitCode = 0;
      } catch (e) {
        fail(e);
      }
    });
}

/** `prepare --validate`: check every prepared environment with the gold patch and without it; store the verdicts. */
export const validateHook: ValidateHook = async (instances, opts) => {
  const report = await validateInstances(instances, {
    home: opts.home,
    reposDir: opts.reposDir,
    specsFile: opts.specsFile,
    workers: opts.workers,
  });
  if (!opts.json) process.stdout.write(renderValidation(report));
  return {
    valid: report.results.filter((r) => r.valid).map((r) => r.instanceId),
    invalid: report.invalid.map((r) => ({ instanceId: r.instanceId, environment: r.key, problems: r.problems })),
    skipped: report.skipped.map((r) => ({ instanceId: r.instanceId, reason: r.skipped })),
    results: report.results,
  };
};

/** The demo's second half: evaluate gold and empty predictions on the example and print both reports. */
export async function demoEvaluate(o: { home: string; datasetPath: string; reposDir: string }): Promise<void> {
  for (const predictions of ["gold", "empty"]) {
    process.stdout.write(`\n=== evaluate --predictions ${predictions} ===\n`);
    const r = await runEvaluation({
      home: o.home,
      dataset: o.datasetPath,
      predictions,
      reposDir: o.reposDir,
      runId: `demo-${predictions}`,
      reportDir: join(o.home, "demo"),
      rerun: true,
      progress: true,
    });
    process.stdout.write(renderRun(r));
  }
}
