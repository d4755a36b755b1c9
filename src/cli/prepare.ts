import type { Command } from "commander";
import type { ImagePolicy } from "../env/instance-image.js";
import type { PrepareResult } from "../env/prepare.js";
import type { validationSummary } from "../eval/validate.js";
import type { Instance } from "../tasks/index.js";
import { collect, fail, parsePositive } from "./common.js";
import { addHarnessFlags, applyHarnessFlags, resolveDatasetArg } from "./harness-flags.js";
import {
  addBaseOption,
  addImagePolicyOptions,
  baseFrom,
  imagePolicyFrom,
  type BaseFlag,
  type ImageFlags,
} from "./workspace.js";

export interface PrepareCliOptions extends ImageFlags, BaseFlag {
  dataset: string;
  split?: string;
  instanceIds: string[];
  workers: string;
  repos?: string;
  specs?: string;
  validate?: boolean;
  json?: boolean;
  plan?: boolean;
}

/** How a command's environments are built, as `prepare` and `evaluate` take it. */
type BuildEnv = { home: string; reposDir?: string; specsFile?: string; base?: string; workers: number };

export function addDatasetOptions(cmd: Command): Command {
  cmd
    .option(
      "--dataset <FILE|NAME>",
      "SWE-bench / SWE-smith dataset (JSON, JSONL or parquet), or a Hub name in the local Hugging Face cache",
    )
    .option("--instance-ids <ID...>", "only these instances", collect, [] as string[])
    .option("--repos <DIR>", "local clones or mirrors laid out as DIR/<owner>/<name>")
    .option("--specs <FILE>", "environment spec overrides (JSON)");
  return addBaseOption(cmd);
}

export function registerPrepareCommand(program: Command, getHome: () => string): void {
  const cmd = addDatasetOptions(program.command("prepare"))
    .description(
      "build every instance's environment once, deduplicated in the store (resumable); rows on images: pulled",
    )
    .option("--workers <N>", "parallel builds", "2");
  addImagePolicyOptions(cmd);
  addHarnessFlags(cmd, ["dataset_name", "instance_ids", "max_workers"])
    .option("--validate", "check each environment with the gold patch and without it")
    .option("--json", "machine-readable output")
    .option("--plan", "build nothing: print each distinct environment and its instances as JSON (e.g. for a fleet)")
    .action(async (o: PrepareCliOptions) => {
      try {
        if (o.plan) await printPlan(applyHarnessFlags(o), getHome());
        else await prepare(getHome(), applyHarnessFlags(o));
      } catch (e) {
        fail(e);
      }
    });
}

/** `--plan`: each distinct environment once (with the first of its instances), and the instances without one. */
async function printPlan(o: PrepareCliOptions, home: string): Promise<void> {
  const ids = o.instanceIds.flat();
  const dataset = await resolveDatasetArg(o.dataset, o.split, home);
  const images = await imagePolicyFrom(o);
  const base = await baseFrom(o);
  const [{ loadDataset }, { planPrepare }, { plan }] = await Promise.all([
    import("../tasks/index.js"),
    import("../env/prepare.js"),
    import("../wire/index.js"),
  ]);
  const instances = await loadDataset(dataset, ids.length ? { instanceIds: ids } : {});
  const p = await planPrepare(instances, { specsFile: o.specs, base, home, ...(images ? { images } : {}) });
  process.stdout.write(`${JSON.stringify(plan.PreparePlan.fromCamel(p))}\n`);
}

async function prepare(home: string, o: PrepareCliOptions): Promise<void> {
  const ids = o.instanceIds.flat();
  const dataset = await resolveDatasetArg(o.dataset, o.split, home);
  const workers = parsePositive(o.workers, "--workers", { integer: true });
  const images = await imagePolicyFrom(o);
  const base = await baseFrom(o);
  const [{ loadDataset }, { renderPrepare }] = await Promise.all([
    import("../tasks/index.js"),
    import("../env/prepare.js"),
  ]);
  const instances = await loadDataset(dataset, ids.length ? { instanceIds: ids } : {});
  const env = { home, reposDir: o.repos, specsFile: o.specs, base, workers };
  const results = await prepareWithProgress(instances, { ...env, ...(images ? { images } : {}) });
  const validation = o.validate ? await validate(instances, results, { ...env, images }, o.json) : undefined;
  if (o.json) process.stdout.write(`${JSON.stringify({ results, validation }, null, 2)}\n`);
  else process.stdout.write(renderPrepare(results));
  process.exitCode = results.some((r) => r.status === "failed") ? 1 : 0;
}

/** `prepareInstances` with each build step and result on stderr, and an ETA from the builds' own durations. */
export async function prepareWithProgress(
  instances: Instance[],
  env: BuildEnv & { images?: ImagePolicy },
): Promise<PrepareResult[]> {
  const [{ prepareInstances }, { Progress }] = await Promise.all([
    import("../env/prepare.js"),
    import("../util/progress.js"),
  ]);
  const progress = new Progress(instances.length, "prepare", { workers: env.workers });
  const results = await prepareInstances(instances, {
    ...env,
    onStep: (id, step) => progress.step(`${id}: ${step}`, id),
    onResult: (r) =>
      progress.tick(r.status, r.status === "failed" ? `${r.instanceId}: ${r.error}` : r.instanceId, r.instanceId),
  });
  progress.finish();
  return results;
}

/**
 * `--validate`: every prepared environment (a pulled image too) with the gold patch and without it; the verdicts of
 * built environments are stored.
 */
async function validate(
  instances: Instance[],
  results: PrepareResult[],
  env: BuildEnv & { images?: ImagePolicy },
  json: boolean | undefined,
): Promise<ReturnType<typeof validationSummary>> {
  const { renderValidation, validateInstances, validationSummary } = await import("../eval/validate.js");
  const failed = new Set(results.filter((r) => r.status === "failed").map((r) => r.instanceId));
  const report = await validateInstances(
    instances.filter((i) => !failed.has(i.instance_id)),
    env,
  );
  if (!json) process.stdout.write(renderValidation(report));
  return validationSummary(report);
}
