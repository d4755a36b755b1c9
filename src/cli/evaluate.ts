import type { Command } from "commander";
import { renderRun, runResultJson } from "../eval/render.js";
import { runEvaluation } from "../eval/run.js";
import { fail, parsePositive } from "./common.js";
import { addDatasetOptions } from "./prepare.js";

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
        const r = await runEvaluation({
          home: getHome(),
          dataset: o.dataset,
          predictions: o.predictions,
          instanceIds: o.instanceIds.flat(),
          ...(o.runId !== undefined ? { runId: o.runId } : {}),
          workers: parsePositive(o.workers, "--workers", { integer: true }),
          timeoutMs: parsePositive(o.timeout, "--timeout") * 1000,
          reposDir: o.repos,
          specsFile: o.specs,
          reportDir: o.reportDir,
          build: o.build,
          rerun: o.rerun ?? false,
        });
        if (o.json) process.stdout.write(`${JSON.stringify(runResultJson(r), null, 2)}\n`);
        else process.stdout.write(renderRun(r));
        process.exitCode = 0;
      } catch (e) {
        fail(e);
      }
    });
}
