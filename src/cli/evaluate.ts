import type { Command } from "commander";
import type { ImagePolicy } from "../env/instance-image.js";
import type { RunEvaluationOptions, RunEvaluationResult } from "../eval/run.js";
import { InvalidInputError } from "../errors.js";
import { fail, openInBrowser, parsePositive } from "./common.js";
import { addHarnessFlags, applyHarnessFlags, resolveDatasetArg } from "./harness-flags.js";
import { addDatasetOptions } from "./prepare.js";
import { addImagePolicyOptions, baseFrom, imagePolicyFrom, type BaseFlag, type ImageFlags } from "./workspace.js";

interface EvaluateCliOptions extends ImageFlags, BaseFlag {
  dataset: string;
  split?: string;
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
  plan?: boolean;
  summaryOnly?: boolean;
  html?: boolean;
  open?: boolean;
}

export function registerEvaluateCommand(program: Command, getHome: () => string): void {
  const cmd = addDatasetOptions(program.command("evaluate"))
    .description("evaluate predictions as the SWE-bench harness does, each instance in a fresh sandbox without network")
    .option("--predictions <FILE|gold|empty>", "predictions (JSON list, JSONL, preds.json) or gold / empty");
  addImagePolicyOptions(cmd);
  addHarnessFlags(cmd, ["dataset_name", "predictions_path", "max_workers", "run_id", "instance_ids", "report_dir"])
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
    .option("--plan", "evaluate nothing: print the run's jobs as JSON (for running them elsewhere, e.g. a fleet)")
    .option("--summary-only", "evaluate nothing: write the run summary from the report.json files on disk")
    .option("--html", "also write <model>.<run_id>.html beside the summary: a self-contained report for a browser")
    .option("--open", "open the HTML report in a browser (implies --html)")
    .action(async (flags: EvaluateCliOptions) => {
      try {
        const o = applyHarnessFlags(flags);
        const home = getHome();
        const dataset = await resolveDatasetArg(o.dataset, o.split, home);
        if (!o.predictions) throw new InvalidInputError("--predictions is required (a file, or gold / empty)");
        const images = await imagePolicyFrom(o);
        const base = await baseFrom(o);
        await refuseUnknownIds(dataset, o.predictions);
        const opts = runOptions({ ...o, dataset, base }, home, images);
        if (o.plan || o.summaryOnly) {
          await planOrSummary(o, opts);
          return;
        }
        const [{ runEvaluation }, { renderRun, runResultJson }, { plan }] = await Promise.all([
          import("../eval/run.js"),
          import("../eval/render.js"),
          import("../wire/index.js"),
        ]);
        const r = await runEvaluation(opts);
        if (o.json) process.stdout.write(`${JSON.stringify(runResultJson(r), null, 2)}\n`);
        else process.stdout.write(renderRun(r));
        if (o.open && r.htmlPath) openInBrowser(r.htmlPath);
        process.exitCode = notEvaluated(r, plan.NOT_EVALUATED_KINDS) ? 1 : 0;
      } catch (e) {
        fail(e);
      }
    });
}

/**
 * Instances our side failed to evaluate (an environment that could not be built, a sandbox that did not start) make
 * the run fail, said on stderr: the report is written all the same, but it does not grade those predictions.
 */
function notEvaluated(r: RunEvaluationResult, kinds: readonly string[]): boolean {
  const failed = r.instances.filter((i) => i.error && kinds.includes(i.error.kind));
  if (failed.length === 0) return false;
  const first = failed[0]!;
  process.stderr.write(
    `minisandbox: ${failed.length} instance(s) could not be evaluated (${first.instanceId}: ${first.error!.kind}); ` +
      "the report counts them as errors\n",
  );
  return true;
}

/** As the harness does: predictions for ids the dataset does not have stop the run before anything is evaluated. */
async function refuseUnknownIds(dataset: string, predictions: string): Promise<void> {
  if (predictions === "gold" || predictions === "empty") return;
  const [{ loadPredictions, unknownPredictionIds }, { loadDataset }] = await Promise.all([
    import("../eval/predictions.js"),
    import("../tasks/index.js"),
  ]);
  const [preds, instances] = await Promise.all([loadPredictions(predictions), loadDataset(dataset)]);
  const unknown = unknownPredictionIds(
    preds,
    instances.map((i) => i.instance_id),
  );
  if (unknown.length === 0) return;
  const shown = unknown.slice(0, 10).join(", ") + (unknown.length > 10 ? `, … (${unknown.length - 10} more)` : "");
  throw new InvalidInputError(
    `${unknown.length} prediction id(s) are not in ${dataset}: ${shown} ` +
      "(the SWE-bench harness refuses such a run too; fix the ids or give the dataset they come from)",
  );
}

/** The flags as the run's options: the one place they change shape (a plan and a summary take them too). */
function runOptions(o: EvaluateCliOptions, home: string, images: ImagePolicy | undefined): RunEvaluationOptions {
  return {
    home,
    ...(images ? { images } : {}),
    dataset: o.dataset,
    predictions: o.predictions,
    instanceIds: o.instanceIds.flat(),
    ...(o.runId !== undefined ? { runId: o.runId } : {}),
    workers: parsePositive(o.workers, "--workers", { integer: true }),
    timeoutMs: parsePositive(o.timeout, "--timeout") * 1000,
    reposDir: o.repos,
    specsFile: o.specs,
    base: o.base,
    reportDir: o.reportDir,
    build: o.build,
    rerun: o.rerun ?? false,
    html: o.html || o.open,
  };
}

/** `--plan` (the jobs, as JSON on stdout) or `--summary-only` (the summary of what is on disk). */
async function planOrSummary(o: EvaluateCliOptions, opts: RunEvaluationOptions): Promise<void> {
  if (o.plan && o.summaryOnly) throw new InvalidInputError("--plan and --summary-only exclude each other");
  if (o.plan && o.runId === undefined)
    throw new InvalidInputError("--plan needs --run-id (the summary is written later under the same id)");
  const [{ planEvaluation, summarizeEvaluation }, { renderSummary }, { plan }] = await Promise.all([
    import("../eval/run.js"),
    import("../eval/report.js"),
    import("../wire/index.js"),
  ]);
  if (o.summaryOnly) {
    const r = await summarizeEvaluation(opts);
    if (o.json) process.stdout.write(`${JSON.stringify(plan.EvaluationSummary.fromCamel(r), null, 2)}\n`);
    else process.stdout.write(`${renderSummary(r.summary)}\nReport written to ${r.summaryPath}\n`);
    if (r.htmlPath && !o.json) process.stdout.write(`HTML report written to ${r.htmlPath}\n`);
    if (o.open && r.htmlPath) openInBrowser(r.htmlPath);
    return;
  }
  process.stdout.write(`${JSON.stringify(plan.EvaluationPlan.fromCamel(await planEvaluation(opts)))}\n`);
}
