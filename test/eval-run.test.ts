/**
 * `minisandbox evaluate` end to end: real fixture repos, real environments (venv + pytest, built once for the
 * file), real sandboxes without network, the CLI in a child process. Checks verdicts (gold, partial fix, patch that
 * does not apply, empty patches, an endless test, a missing environment, unknown ids), the harness's files and
 * summary, the timing side files, --json, resume, and that nothing is left behind.
 */
process.env.PIP_RETRIES ??= "0";

import { test, before } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { tempDir, tempHome, processesMatching, scratchDirs } from "./helpers.js";
import { makeFixtureDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import { prepareInstances } from "../src/env/prepare.js";
import { envFor } from "../src/env/environments.js";
import { makeEvalScript, reportJsonText, runEvaluation, type RunSummary } from "../src/eval/index.js";

const home = tempHome("msb-evalrun-home-");
const work = tempDir("msb-evalrun-");
let fx: FixtureDataset;
let cli: string;
let id1: string;
let id2: string;
let endless: string;

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

function runCli(args: string[], opts: { cwd?: string } = {}): Promise<CliResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [cli, "--home", home, ...args],
      { cwd: opts.cwd ?? work, env: { ...process.env }, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        resolve({ code, stdout, stderr, ms: performance.now() - started });
      },
    );
  });
}

const SUMMARY_KEYS = [
  "total_instances",
  "submitted_instances",
  "completed_instances",
  "resolved_instances",
  "unresolved_instances",
  "empty_patch_instances",
  "error_instances",
  "completed_ids",
  "incomplete_ids",
  "empty_patch_ids",
  "submitted_ids",
  "resolved_ids",
  "unresolved_ids",
  "error_ids",
  "schema_version",
];

const readJson = <T>(p: string): T => JSON.parse(readFileSync(p, "utf8")) as T;

let goldRun: Promise<CliResult>;
let mixedRun: Promise<CliResult>;
const goldCwd = join(work, "gold-cwd");
const mixedDir = join(work, "mixed");
const BAD_PATCH = [
  "diff --git a/calc/ops.py b/calc/ops.py",
  "--- a/calc/ops.py",
  "+++ b/calc/ops.py",
  "@@ -1,3 +1,3 @@",
  " this context line is not in the file",
  "-nor is this one",
  "+replacement",
  " nothing matches",
  "",
].join("\n");

before(async () => {
  fx = await makeFixtureDataset(join(work, "fx"), { instances: 2, endless: true });
  [id1, id2] = [fx.instances[0]!.instance_id, fx.instances[1]!.instance_id];
  endless = fx.endlessInstanceId!;
  cli = join(work, "cli.mjs");
  const dist = join(import.meta.dirname, "..", "src");
  const module = (...path: string[]): string => JSON.stringify(pathToFileURL(join(dist, ...path)).href);
  writeFileSync(
    cli,
    [
      `import { Command } from ${JSON.stringify(import.meta.resolve("commander"))};`,
      `import { registerEvaluateCommand } from ${module("cli", "evaluate.js")};`,
      `import { resolveHome } from ${module("util", "home.js")};`,
      `const program = new Command().name("minisandbox").option("--home <DIR>").enablePositionalOptions();`,
      `registerEvaluateCommand(program, () => resolveHome(program.opts().home));`,
      `await program.parseAsync(process.argv);`,
    ].join("\n"),
  );
  const built = await prepareInstances(fx.instances, { home, reposDir: fx.reposDir, workers: 2 });
  assert.deepEqual(
    built.filter((r) => r.status === "failed"),
    [],
    "fixture environments build",
  );

  // Two runs at once (they share nothing but the environments): gold on two instances with the default report
  // dir (the current directory), and a mixed predictions file with --json and --report-dir.
  const { mkdirSync } = await import("node:fs");
  mkdirSync(goldCwd, { recursive: true });
  goldRun = runCli(
    [
      "evaluate",
      "--dataset",
      fx.datasetPath,
      "--repos",
      fx.reposDir,
      "--predictions",
      "gold",
      "--run-id",
      "gold-run",
      "--instance-ids",
      id1,
      "--instance-ids",
      id2,
      "--workers",
      "2",
    ],
    { cwd: goldCwd },
  );
  const preds = join(work, "preds.jsonl");
  writeFileSync(
    preds,
    `${[
      { instance_id: id1, model_name_or_path: "my/model", model_patch: fx.partialFix.patch },
      { instance_id: id2, model_name_or_path: "my/model", model_patch: BAD_PATCH },
    ]
      .map((p) => JSON.stringify(p))
      .join("\n")}\n`,
  );
  mixedRun = runCli([
    "evaluate",
    "--dataset",
    fx.datasetPath,
    "--predictions",
    preds,
    "--run-id",
    "mixed",
    "--report-dir",
    mixedDir,
    "--json",
    "--workers",
    "2",
  ]);
});

test("gold patches resolve; the harness's files, summary and timing side files", async () => {
  const r = await goldRun;
  assert.equal(r.code, 0, r.stderr);
  const summaryPath = join(goldCwd, "gold.gold-run.json");
  const text = readFileSync(summaryPath, "utf8");
  assert.ok(text.endsWith("}\n") && text.includes('\n    "total_instances": 2,'), "json.dumps(indent=4) layout");
  const summary = JSON.parse(text) as RunSummary;
  assert.deepEqual(Object.keys(summary), SUMMARY_KEYS);
  assert.equal(summary.total_instances, 2);
  assert.equal(summary.submitted_instances, 3, "gold predicts every dataset instance; the summary counts them all");
  assert.equal(summary.completed_instances, 2);
  assert.equal(summary.resolved_instances, 2);
  assert.deepEqual(summary.resolved_ids, [id1, id2]);
  assert.deepEqual(summary.error_ids, []);
  assert.deepEqual(summary.submitted_ids, [id1, id2, endless]);

  for (const inst of fx.instances.slice(0, 2)) {
    const dir = join(goldCwd, "logs", "run_evaluation", "gold-run", "gold", inst.instance_id);
    assert.deepEqual(readdirSync(dir).sort(), [
      "eval.sh",
      "integrity.json",
      "patch.diff",
      "report.json",
      "run_instance.log",
      "test_output.txt",
      "timings.json",
    ]);
    assert.equal(readFileSync(join(dir, "patch.diff"), "utf8"), inst.patch);
    const integrity = readJson<{ instance_id: string; flags: unknown[] }>(join(dir, "integrity.json"));
    assert.deepEqual(integrity, { instance_id: inst.instance_id, flags: [] }, "gold touches no test infrastructure");
    assert.equal(
      readFileSync(join(dir, "eval.sh"), "utf8"),
      makeEvalScript({ instance: inst, spec: envFor(inst, {}).spec }),
    );
    const output = readFileSync(join(dir, "test_output.txt"), "utf8");
    assert.match(output, />>>>> Start Test Output/);
    assert.match(output, />>>>> End Test Output/);
    const reportText = readFileSync(join(dir, "report.json"), "utf8");
    const report = JSON.parse(reportText) as Record<
      string,
      {
        resolved: boolean;
        tests_status: {
          FAIL_TO_PASS: { success: string[]; failure: string[] };
          PASS_TO_PASS: { success: string[]; failure: string[] };
        };
      }
    >;
    assert.equal(
      reportText,
      reportJsonText(report as never),
      "report.json is json.dumps(indent=4), no trailing newline",
    );
    const entry = report[inst.instance_id]!;
    assert.deepEqual(Object.keys(entry), [
      "patch_is_None",
      "patch_exists",
      "patch_successfully_applied",
      "resolved",
      "tests_status",
    ]);
    assert.equal(entry.resolved, true);
    assert.deepEqual(entry.tests_status.FAIL_TO_PASS, { success: inst.FAIL_TO_PASS, failure: [] });
    assert.deepEqual(entry.tests_status.PASS_TO_PASS, { success: inst.PASS_TO_PASS, failure: [] });
    const log = readFileSync(join(dir, "run_instance.log"), "utf8");
    assert.match(log, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - INFO - Sandbox for /);
    assert.match(log, />>>>> Applied Patch:\nChecking patch calc\//);
    assert.match(log, /Test runtime: [\d_]+\.\d\d seconds/);
    assert.match(log, /Result for .*: resolved: True/);
    assert.match(log, /Timings for .*: sandbox ready \d+ ms, patch apply \d+ ms, tests \d+ ms, grading \d+ ms/);
    const timings = readJson<Record<string, number | string>>(join(dir, "timings.json"));
    assert.equal(timings["status"], "resolved");
    for (const k of ["sandboxMs", "applyMs", "testsMs", "gradingMs", "totalMs", "overheadMs"])
      assert.equal(typeof timings[k], "number", k);
    assert.ok((timings["testsMs"] as number) > 0 && (timings["overheadMs"] as number) > 0);
  }
  const runTimings = readJson<{
    instancesRun: number;
    totals: Record<string, number>;
    means: Record<string, number>;
    instances: Record<string, unknown>;
    instancesPerMinute: number;
  }>(join(goldCwd, "gold.gold-run.timings.json"));
  assert.equal(runTimings.instancesRun, 2);
  assert.ok(runTimings.instancesPerMinute > 0);
  assert.deepEqual(Object.keys(runTimings.instances).sort(), [id1, id2]);
  assert.ok(runTimings.means["overheadMs"]! > 0 && runTimings.means["overheadMs"]! < runTimings.means["totalMs"]!);
  // What people read: the summary, the timing table, where the files are; progress on stderr.
  assert.match(r.stdout, /Instances resolved: 2 \(100\.0%\)/);
  assert.match(r.stdout, /overhead \(total - tests\)\s+\d+\s+\d+/);
  assert.match(r.stdout, /Report written to .*gold\.gold-run\.json/);
  assert.match(r.stderr, /\[2\/2\] resolved/);
});

test("--json: a partial fix is PARTIAL; a patch that fails to apply is an error", async () => {
  const r = await mixedRun;
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout) as {
    summaryPath: string;
    summary: RunSummary;
    instances: Array<{ instanceId: string; status: string; resolution: string | null; error?: { kind: string } }>;
    unknownPredictionIds: string[];
    timings: { instancesRun: number; instancesTested: number };
  };
  assert.equal(out.summaryPath, join(mixedDir, "my__model.mixed.json"));
  assert.deepEqual(readJson(out.summaryPath), out.summary);
  const byId = new Map(out.instances.map((i) => [i.instanceId, i]));
  assert.equal(byId.get(id1)?.status, "unresolved");
  assert.equal(byId.get(id1)?.resolution, "PARTIAL");
  assert.equal(byId.get(id2)?.status, "error");
  assert.equal(byId.get(id2)?.error?.kind, "Patch Apply Failed");
  assert.equal(byId.get(endless)?.status, "no_prediction");
  assert.deepEqual(out.unknownPredictionIds, []);
  assert.deepEqual([out.timings.instancesRun, out.timings.instancesTested], [2, 1], "the rate counts tested ones");

  const s = out.summary;
  assert.equal(s.total_instances, 3);
  assert.equal(s.submitted_instances, 2);
  assert.deepEqual(s.completed_ids, [id1]);
  assert.deepEqual(s.unresolved_ids, [id1]);
  assert.deepEqual(s.resolved_ids, []);
  assert.deepEqual(s.error_ids, [id2], "no report.json after a failed apply: an error, as in the harness");
  assert.deepEqual(s.incomplete_ids, [endless]);

  const base = join(mixedDir, "logs", "run_evaluation", "mixed", "my__model");
  const partial = readJson<
    Record<string, { resolved: boolean; tests_status: { FAIL_TO_PASS: { success: string[]; failure: string[] } } }>
  >(join(base, id1, "report.json"))[id1]!;
  assert.equal(partial.resolved, false);
  assert.deepEqual(partial.tests_status.FAIL_TO_PASS, {
    success: fx.partialFix.fixedTests,
    failure: fx.partialFix.stillFailingTests,
  });

  const failed = join(base, id2);
  assert.ok(!existsSync(join(failed, "report.json")));
  assert.ok(!existsSync(join(failed, "test_output.txt")));
  assert.equal(readFileSync(join(failed, "patch.diff"), "utf8"), BAD_PATCH);
  const log = readFileSync(join(failed, "run_instance.log"), "utf8");
  for (const cmd of ["git apply --verbose", "git apply --verbose --reject", "patch --batch --fuzz=5 -p1 -i"]) {
    assert.ok(log.includes(`Failed to apply patch to sandbox: ${cmd}\n`), cmd);
  }
  assert.match(log, />>>>> Patch Apply Failed/);
});

test("an unknown prediction id: the CLI refuses the run as the harness does; the API reports an error", async () => {
  const preds = join(work, "unknown.jsonl");
  const pred = {
    instance_id: "nobody__nothing-1",
    model_name_or_path: "my/model",
    model_patch: fx.instances[0]!.patch,
  };
  writeFileSync(preds, `${JSON.stringify(pred)}\n`);
  const dir = tempDir("msb-evalrun-unknown-");
  const r = await runCli(["evaluate", "--dataset", fx.datasetPath, "--predictions", preds, "--report-dir", dir]);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /^minisandbox: 1 prediction id\(s\) are not in .*nobody__nothing-1/);
  assert.deepEqual(readdirSync(dir), [], "nothing was evaluated");
  const api = await runEvaluation({ home, dataset: fx.datasetPath, predictions: preds, runId: "u", reportDir: dir });
  assert.deepEqual(api.unknownPredictionIds, ["nobody__nothing-1"]);
  assert.equal(api.instances.find((i) => i.instanceId === "nobody__nothing-1")?.error?.kind, "Unknown Instance");
  assert.match(
    readFileSync(
      join(dir, "logs", "run_evaluation", "u", "my__model", "nobody__nothing-1", "run_instance.log"),
      "utf8",
    ),
    /ERROR - instance nobody__nothing-1 is not in/,
  );
});

test("empty predictions are not run (empty_patch), and a second run with the same id resumes", async () => {
  const r = await runCli([
    "evaluate",
    "--dataset",
    fx.datasetPath,
    "--predictions",
    "empty",
    "--run-id",
    "nothing",
    "--report-dir",
    join(work, "empty"),
  ]);
  assert.equal(r.code, 0, r.stderr);
  const s = readJson<RunSummary>(join(work, "empty", "empty.nothing.json"));
  assert.equal(s.empty_patch_instances, 3);
  assert.deepEqual(s.empty_patch_ids, [id1, id2, endless]);
  assert.equal(s.completed_instances, 0);
  assert.ok(!existsSync(join(work, "empty", "logs")), "nothing ran");
  assert.match(r.stdout, /Instances with empty patches: 3/);

  await goldRun;
  const again = await runCli(
    [
      "evaluate",
      "--dataset",
      fx.datasetPath,
      "--predictions",
      "gold",
      "--run-id",
      "gold-run",
      "--instance-ids",
      id1,
      "--instance-ids",
      id2,
    ],
    { cwd: goldCwd },
  );
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stderr, /2 instances already run, skipping/);
  assert.equal(readJson<RunSummary>(join(goldCwd, "gold.gold-run.json")).resolved_instances, 2);
});

test("an endless test ends as Tests Timed Out within the timeout, leaving nothing behind", async () => {
  await Promise.all([goldRun, mixedRun]);
  const r = await runCli([
    "evaluate",
    "--dataset",
    fx.datasetPath,
    "--repos",
    fx.reposDir,
    "--predictions",
    "gold",
    "--run-id",
    "slow",
    "--instance-ids",
    endless,
    "--timeout",
    "20",
    "--report-dir",
    join(work, "slow"),
    "--json",
  ]);
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout) as {
    instances: Array<{ status: string; error?: { kind: string }; timings: { testsMs: number } }>;
    summary: RunSummary;
  };
  const rec = out.instances[0]!;
  assert.equal(rec.error?.kind, "Tests Timed Out");
  assert.ok(
    rec.timings.testsMs >= 19_500 && rec.timings.testsMs < 30_000,
    `tests ran ${rec.timings.testsMs} ms for a 20 s timeout`,
  );
  assert.ok(r.ms < 90_000, `the whole command took ${r.ms} ms`);
  assert.deepEqual(out.summary.error_ids, [endless]);
  const dir = join(work, "slow", "logs", "run_evaluation", "slow", "gold", endless);
  assert.ok(readFileSync(join(dir, "test_output.txt"), "utf8").endsWith("\n\nTimeout error: 20 seconds exceeded."));
  assert.ok(!existsSync(join(dir, "report.json")));
  assert.match(readFileSync(join(dir, "run_instance.log"), "utf8"), />>>>> Tests Timed Out/);
  assert.deepEqual(processesMatching(home), [], "no process of the run is left");
  assert.deepEqual(scratchDirs(home), [], "no sandbox scratch directory is left");
});

test("an environment that is not built (--no-build) is that instance's error; bad input is a clear error", async () => {
  const extra = {
    ...fx.instances[0]!,
    instance_id: "fixture__calc-99",
    spec: { ...fx.instances[0]!.spec, env: { CALC_VARIANT: "unbuilt" } },
  };
  const ds = join(work, "with-unbuilt.json");
  writeFileSync(ds, JSON.stringify([...fx.instances, extra]));
  const r = await runCli([
    "evaluate",
    "--dataset",
    ds,
    "--predictions",
    "gold",
    "--run-id",
    "nobuild",
    "--instance-ids",
    "fixture__calc-99",
    "--no-build",
    "--report-dir",
    join(work, "nobuild"),
    "--json",
  ]);
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout) as {
    instances: Array<{ error?: { kind: string; message: string } }>;
    summary: RunSummary;
  };
  assert.equal(out.instances[0]!.error?.kind, "Environment Missing");
  assert.match(out.instances[0]!.error!.message, /not built/);
  assert.deepEqual(out.summary.error_ids, ["fixture__calc-99"]);

  const missing = await runCli([
    "evaluate",
    "--dataset",
    fx.datasetPath,
    "--predictions",
    join(work, "no-such-preds.json"),
  ]);
  assert.notEqual(missing.code, 0);
  assert.match(missing.stderr, /predictions file not found/);
  const badWorkers = await runCli([
    "evaluate",
    "--dataset",
    fx.datasetPath,
    "--predictions",
    "gold",
    "--workers",
    "zero",
  ]);
  assert.equal(badWorkers.code, 2);
  assert.match(badWorkers.stderr, /--workers expects a positive integer/);
});

test("a prediction without a field is refused naming it; a run where no patch applies claims no rate", async () => {
  await Promise.all([goldRun, mixedRun]);
  const write = (name: string, rows: object[]): string => {
    const path = join(work, name);
    writeFileSync(path, rows.map((row) => JSON.stringify(row)).join("\n"));
    return path;
  };
  const noPatch = write("no-patch.jsonl", [{ instance_id: id1, model_name_or_path: "m" }]);
  const noModel = write("no-model.jsonl", [{ instance_id: id1, model_patch: "" }]);
  for (const [file, field] of [
    [noPatch, "model_patch"],
    [noModel, "model_name_or_path"],
  ] as const) {
    const dir = tempDir("msb-evalrun-field-");
    const r = await runCli(["evaluate", "--dataset", fx.datasetPath, "--predictions", file, "--report-dir", dir]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, new RegExp(`^minisandbox: ${file}: line 1: missing "${field}" \\(.*\\)\n$`));
    assert.deepEqual(readdirSync(dir), [], "nothing written (no None.<run>.json)");
  }
  const bad = write("all-bad.jsonl", [
    { instance_id: id1, model_name_or_path: "m", model_patch: BAD_PATCH },
    { instance_id: id2, model_name_or_path: "m", model_patch: BAD_PATCH },
  ]);
  const dir = tempDir("msb-evalrun-bad-");
  const r = await runCli(["evaluate", "--dataset", fx.datasetPath, "--predictions", bad, "--report-dir", dir]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /Instances with errors: 2/);
  assert.match(r.stdout, /^Timings: 2 instances run with 2 workers in [\d.]+ s; none reached its tests/m);
  assert.doesNotMatch(r.stdout, /instances\/min/);
});
