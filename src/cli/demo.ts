import type { Command } from "commander";
import { join } from "node:path";
import { existsSync } from "node:fs";
import { makeFixtureDataset } from "../fixtures/generate.js";
import { loadDataset } from "../tasks/index.js";
import { prepareInstances } from "../env/prepare.js";
import { Progress, table } from "../util/progress.js";
import { Sandbox } from "../index.js";
import { fail } from "./common.js";

export interface DemoHooks {
  /** Runs the evaluation part of the demo (gold and empty predictions) when the evaluator is available. */
  evaluate?: (o: { home: string; datasetPath: string; reposDir: string }) => Promise<void>;
}

/** The main job on a small bundled example: a real git repo + SWE-bench-format dataset generated locally. */
export function registerDemoCommand(program: Command, getHome: () => string, hooks: DemoHooks = {}): void {
  program
    .command("demo")
    .description("build a tiny real dataset's environments and evaluate gold and empty predictions (no internet)")
    .option("--instances <N>", "instances in the example dataset", "3")
    .action(async (o: { instances: string }) => {
      try {
        const home = getHome();
        const dir = join(home, "demo");
        const n = Number(o.instances) || 3;
        const fixture = existsSync(join(dir, "dataset.json"))
          ? { datasetPath: join(dir, "dataset.json"), reposDir: join(dir, "repos") }
          : await makeFixtureDataset(dir, { instances: n });
        const instances = await loadDataset(fixture.datasetPath);
        process.stdout.write(
          `example dataset: ${fixture.datasetPath} (${instances.length} instances of fixture/calc)\n\n`,
        );
        const progress = new Progress(instances.length, "prepare");
        const results = await prepareInstances(instances, {
          home,
          reposDir: fixture.reposDir,
          workers: 2,
          onResult: (r) => progress.tick(r.status, r.instanceId),
        });
        progress.finish();
        process.stdout.write(
          table(
            ["instance", "environment", "status", "seconds"],
            results.map((r) => [r.instanceId, r.key.slice(0, 12), r.status, (r.durationMs / 1000).toFixed(1)]),
          ),
        );
        const failed = results.filter((r) => r.status === "failed");
        if (failed.length) throw new Error(`environment build failed: ${failed[0]!.error}`);
        const t0 = performance.now();
        await using sb = await Sandbox.create({ home, instance: instances[0]!, reposDir: fixture.reposDir });
        const ready = performance.now() - t0;
        const r = await sb.exec("git log --oneline -1 && python -m pytest -q 2>&1 | tail -1");
        process.stdout.write(`\nsandbox on ${instances[0]!.instance_id} ready in ${ready.toFixed(0)} ms:\n${r.stdout}`);
        if (hooks.evaluate)
          await hooks.evaluate({ home, datasetPath: fixture.datasetPath, reposDir: fixture.reposDir });
      } catch (e) {
        fail(e);
      }
    });
}
