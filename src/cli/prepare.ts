import type { Command } from "commander";
import { loadDataset } from "../tasks/index.js";
import { prepareInstances } from "../env/prepare.js";
import { Progress, table } from "../util/progress.js";
import { collect, fail } from "./common.js";

export interface PrepareCliOptions {
  dataset: string;
  instanceIds: string[];
  workers: string;
  repos?: string;
  specs?: string;
  json?: boolean;
}

export function addDatasetOptions(cmd: Command): Command {
  return cmd
    .requiredOption("--dataset <FILE>", "SWE-bench / SWE-smith dataset (JSON, JSONL or parquet)")
    .option("--instance-ids <ID...>", "only these instances", collect, [] as string[])
    .option("--repos <DIR>", "local clones or mirrors laid out as DIR/<owner>/<name>")
    .option("--specs <FILE>", "environment spec overrides (JSON)");
}

export function registerPrepareCommand(
  program: Command,
  getHome: () => string,
  hooks: { validate?: ValidateHook } = {},
): void {
  addDatasetOptions(program.command("prepare"))
    .description("build every instance's environment once, deduplicated in the store (resumable)")
    .option("--workers <N>", "parallel builds", "2")
    .option("--validate", "check each environment with the gold patch and without it")
    .option("--json", "machine-readable output")
    .action(async (o: PrepareCliOptions & { validate?: boolean }) => {
      try {
        const home = getHome();
        const ids = o.instanceIds.flat();
        const instances = await loadDataset(o.dataset, ids.length ? { instanceIds: ids } : {});
        const progress = new Progress(instances.length, "prepare");
        const results = await prepareInstances(instances, {
          home,
          reposDir: o.repos,
          specsFile: o.specs,
          workers: Number(o.workers) || 2,
          onResult: (r) => progress.tick(r.status, r.instanceId),
        });
        progress.finish();
        let validation: unknown;
        if (o.validate && hooks.validate) {
          const ok = instances.filter((i) => results.find((r) => r.instanceId === i.instance_id)?.status !== "failed");
          validation = await hooks.validate(ok, {
            home,
            reposDir: o.repos,
            specsFile: o.specs,
            workers: Number(o.workers) || 2,
            json: o.json,
          });
        }
        if (o.json) process.stdout.write(`${JSON.stringify({ results, validation }, null, 2)}\n`);
        else {
          process.stdout.write(
            table(
              ["instance", "environment", "status", "seconds", "reason"],
              results.map((r) => [
                r.instanceId,
                r.key.slice(0, 12),
                r.status,
                (r.durationMs / 1000).toFixed(1),
                r.error ? r.error.split("\n")[0]! : "",
              ]),
            ),
          );
          const n = (s: string): number => results.filter((r) => r.status === s).length;
          process.stdout.write(`\n${n("built")} built, ${n("cached")} cached, ${n("failed")} failed\n`);
          for (const r of results.filter((x) => x.status === "failed"))
            process.stdout.write(`\n${r.instanceId}: ${r.error}\n`);
        }
        process.exitCode = results.some((r) => r.status === "failed") ? 1 : 0;
      } catch (e) {
        fail(e);
      }
    });
}

export type ValidateHook = (
  instances: import("../tasks/types.js").Instance[],
  opts: { home: string; reposDir?: string; specsFile?: string; workers: number; json?: boolean },
) => Promise<unknown>;
