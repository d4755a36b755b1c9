/**
 * Environment validation on real environments: with the gold patch every FAIL_TO_PASS and PASS_TO_PASS test
 * passes, without it the FAIL_TO_PASS tests fail. A wrong FAIL_TO_PASS list (a test that passes at the base) is
 * reported with its reason, stored with the environment, and `evaluate` warns when grading on it.
 */
process.env.PIP_RETRIES ??= "0";

import { test, before } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir, tempHome } from "./helpers.js";
import { makeFixtureDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import { prepareInstances } from "../src/env/prepare.js";
import { envFor, readEnvRecord } from "../src/env/environments.js";
import {
  baseProblems,
  goldProblems,
  gradeInstance,
  renderValidation,
  runEvaluation,
  validateInstances,
  validationSummary,
  type InstanceEvalResult,
  type ValidationReport,
} from "../src/eval/index.js";
import type { Instance } from "../src/tasks/types.js";

const home = tempHome("msb-validate-home-");
const work = tempDir("msb-validate-");
let fx: FixtureDataset;
let good: Instance;
let wrong: Instance;
let moved: string;
let datasetPath: string;
let report: ValidationReport;

before(async () => {
  fx = await makeFixtureDataset(join(work, "fx"), { instances: 2 });
  good = fx.instances[0]!;
  // Instance 2 with a wrong FAIL_TO_PASS list: one of its PASS_TO_PASS tests (it passes at the base) moved over.
  const second = fx.instances[1]!;
  moved = second.PASS_TO_PASS[0]!;
  wrong = { ...second, FAIL_TO_PASS: [...second.FAIL_TO_PASS, moved], PASS_TO_PASS: second.PASS_TO_PASS.slice(1) };
  datasetPath = join(work, "dataset.json");
  writeFileSync(datasetPath, JSON.stringify([good, wrong], null, 2));
  const built = await prepareInstances([good, wrong], { home, reposDir: fx.reposDir, workers: 2 });
  assert.deepEqual(
    built.filter((r) => r.status === "failed"),
    [],
  );
  report = await validateInstances([good, wrong], { home, reposDir: fx.reposDir, workers: 2, progress: false });
});

test("a valid instance passes; a wrong FAIL_TO_PASS list is invalid with the test and the direction", () => {
  const [g, w] = report.results;
  assert.equal(g!.instanceId, good.instance_id);
  assert.equal(g!.valid, true, g!.problems.join("\n"));
  assert.deepEqual(g!.problems, []);
  assert.equal(g!.gold?.resolution, "FULL");
  assert.equal(g!.base?.resolution, "NO");
  assert.ok(g!.gold!.timings.testsMs > 0);

  assert.equal(w!.instanceId, wrong.instance_id);
  assert.equal(w!.valid, false);
  assert.deepEqual(w!.problems, [`FAIL_TO_PASS test ${moved} passes without the fix`]);
  assert.deepEqual(
    report.invalid.map((r) => r.instanceId),
    [wrong.instance_id],
  );
  assert.deepEqual(report.skipped, []);

  const text = renderValidation(report);
  assert.match(text, /1 valid, 1 invalid, 0 not checked/);
  assert.ok(text.includes(`${wrong.instance_id} (environment `));
  assert.ok(text.includes(`- FAIL_TO_PASS test ${moved} passes without the fix`));
});

test("verdicts are stored with the environments", () => {
  const goodRecord = readEnvRecord(home, envFor(good, {}).key);
  assert.equal(goodRecord?.validation?.valid, true);
  assert.equal(goodRecord?.validation?.instanceId, good.instance_id);
  const wrongKey = envFor(wrong, {}).key;
  const wrongRecord = readEnvRecord(home, wrongKey);
  assert.equal(wrongRecord?.validation?.valid, false);
  assert.equal(wrongRecord?.validation?.instanceId, wrong.instance_id);
  assert.deepEqual(wrongRecord?.validation?.problems, [`FAIL_TO_PASS test ${moved} passes without the fix`]);
  assert.ok(!Number.isNaN(Date.parse(wrongRecord!.validation!.checkedAt)));
  assert.equal(wrongRecord?.key, wrongKey);
  assert.ok(wrongRecord?.builtAt, "the build's fields are kept");
  assert.deepEqual(report.verdicts[wrongKey], wrongRecord?.validation);
});

test("evaluate warns (stderr and run_instance.log) when grading on an environment that failed validation", async () => {
  const warnings: string[] = [];
  const reportDir = join(work, "eval");
  const r = await runEvaluation({
    home,
    dataset: datasetPath,
    predictions: "gold",
    instanceIds: [wrong.instance_id],
    runId: "warned",
    reportDir,
    reposDir: fx.reposDir,
    progress: false,
    onWarning: (m) => warnings.push(m),
  });
  assert.equal(r.summary.resolved_instances, 1, "the gold patch still resolves it: the warning is the point");
  assert.equal(warnings.length, 1);
  assert.match(
    warnings[0]!,
    new RegExp(`${wrong.instance_id}: environment [0-9a-f]{12} of ${wrong.instance_id} failed validation`),
  );
  assert.ok(warnings[0]!.includes(`FAIL_TO_PASS test ${moved} passes without the fix`));
  const log = readFileSync(
    join(reportDir, "logs", "run_evaluation", "warned", "gold", wrong.instance_id, "run_instance.log"),
    "utf8",
  );
  assert.match(log, / - WARNING - environment [0-9a-f]{12} of .* failed validation/);
});

test("validation skips environments that are not built; its summary is JSON-friendly", async () => {
  const unbuilt = { ...good, instance_id: "fixture__calc-77", spec: { ...good.spec, env: { CALC_VARIANT: "x" } } };
  const out = validationSummary(await validateInstances([unbuilt], { home, workers: 1, progress: false }));
  assert.deepEqual(out.valid, []);
  assert.deepEqual(out.invalid, []);
  assert.equal(out.skipped[0]?.instanceId, "fixture__calc-77");
  assert.match(out.skipped[0]!.reason, /not built/);
  assert.equal(readEnvRecord(home, envFor(unbuilt, {}).key), undefined, "nothing stored for an unchecked environment");
});

test("problem wording for each direction (from real log text, no sandbox)", () => {
  const inst = { ...good, FAIL_TO_PASS: ["t::f2p_a", "t::f2p_b"], PASS_TO_PASS: ["t::p2p"] };
  const run = (log: string): InstanceEvalResult => {
    const grade = gradeInstance({ instance: inst, modelPatch: "x", testOutput: log });
    return {
      instanceId: inst.instance_id,
      status: "unresolved",
      resolution: grade.resolution,
      grade,
      report: grade.report,
      testOutput: log,
      applyCommand: null,
      timings: {} as never,
      warnings: [],
      flags: [],
      log: "",
    };
  };
  const wrap = (lines: string[]): string => [">>>>> Start Test Output", ...lines, ">>>>> End Test Output"].join("\n");
  assert.deepEqual(goldProblems(inst, run(wrap(["PASSED t::f2p_a", "FAILED t::f2p_b", "FAILED t::p2p"]))), [
    "FAIL_TO_PASS test t::f2p_b fails with the gold patch",
    "PASS_TO_PASS test t::p2p fails with the gold patch",
  ]);
  assert.deepEqual(goldProblems(inst, run(wrap(["PASSED t::f2p_a", "SKIPPED t::f2p_b", "PASSED t::p2p"]))), [
    "FAIL_TO_PASS test t::f2p_b does not pass (SKIPPED) with the gold patch",
  ]);
  assert.deepEqual(baseProblems(inst, run(wrap(["PASSED t::f2p_a", "FAILED t::f2p_b", "PASSED t::p2p"]))), [
    "FAIL_TO_PASS test t::f2p_a passes without the fix",
  ]);
  assert.deepEqual(goldProblems(inst, run("no markers at all")), [
    "no test results with the gold patch (missing_markers)",
  ]);
  const errored: InstanceEvalResult = {
    ...run(""),
    status: "error",
    error: { kind: "Patch Apply Failed", message: "x" },
  };
  assert.deepEqual(goldProblems(inst, errored), ["with the gold patch: Patch Apply Failed"]);
});
