import { join } from "node:path";
import type { Command } from "commander";
import type { Instance } from "../tasks/index.js";
import { fail, parsePositive } from "./common.js";
import { prepareWithProgress } from "./prepare.js";

/** The main job on a small bundled example: a real git repo + SWE-bench-format dataset generated locally. */
export function registerDemoCommand(program: Command, getHome: () => string): void {
  program
    .command("demo")
    .description("build a tiny real dataset's environments and evaluate gold and empty predictions (no internet)")
    .option("--instances <N>", "instances in the example dataset", "3")
    .action(async (o: { instances: string }) => {
      try {
        await demo(getHome(), parsePositive(o.instances, "--instances", { integer: true }));
      } catch (e) {
        fail(e);
      }
    });
}

async function demo(home: string, n: number): Promise<void> {
  const [{ fixtureDatasetIn }, { loadDataset }, { Sandbox }, { runEvaluation }, { renderRun }] = await Promise.all([
    import("../fixtures/generate.js"),
    import("../tasks/index.js"),
    import("../index.js"),
    import("../eval/run.js"),
    import("../eval/render.js"),
  ]);
  const fixture = await fixtureDatasetIn(join(home, "demo"), { instances: n });
  const instances = await loadDataset(fixture.datasetPath);
  process.stdout.write(`example dataset: ${fixture.datasetPath} (${instances.length} instances of fixture/calc)\n\n`);
  await prepareAll(home, instances, fixture.reposDir);
  const t0 = performance.now();
  await using sb = await Sandbox.create({ home, instance: instances[0]!, reposDir: fixture.reposDir });
  const ready = performance.now() - t0;
  const r = await sb.exec("git log --oneline -1 && python -m pytest -q 2>&1 | tail -1");
  process.stdout.write(`\nsandbox on ${instances[0]!.instance_id} ready in ${ready.toFixed(0)} ms:\n${r.stdout}`);
  for (const predictions of ["gold", "empty"]) {
    process.stdout.write(`\n=== evaluate --predictions ${predictions} ===\n`);
    const run = await runEvaluation({
      home,
      dataset: fixture.datasetPath,
      predictions,
      reposDir: fixture.reposDir,
      runId: `demo-${predictions}`,
      reportDir: join(home, "demo"),
      rerun: true,
      progress: true,
    });
    process.stdout.write(renderRun(run));
  }
}

async function prepareAll(home: string, instances: Instance[], reposDir: string): Promise<void> {
  const results = await prepareWithProgress(instances, { home, reposDir, workers: 2 });
  const { table } = await import("../util/progress.js");
  const rows = results.map((r) => [r.instanceId, r.key.slice(0, 12), r.status, (r.durationMs / 1000).toFixed(1)]);
  process.stdout.write(table(["instance", "environment", "status", "seconds"], rows));
  const failed = results.filter((r) => r.status === "failed");
  if (failed.length) throw new Error(`environment build failed: ${failed[0]!.error}`);
}
