/** Grading rules (SWE-bench grading.py): passed/failed, ratios, FULL/PARTIAL/NO, report entries, rewards. */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  MARKERS,
  f2pRatio,
  getTestsStatus,
  gradeInstance,
  p2pRatio,
  parseRewardSpec,
  parseTestList,
  resolutionStatus,
  reward,
  testFailed,
  testPassed,
  type Grade,
  type StatusMap,
  type TestsStatus,
} from "../src/eval/index.js";

const SM: StatusMap = {
  "t::passed": "PASSED",
  "t::xfail": "XFAIL",
  "t::failed": "FAILED",
  "t::error": "ERROR",
  "t::skipped": "SKIPPED",
  // A raw token the harness's pytest parser records from "ERROR: file or directory not found: ...".
  file: "ERROR:",
};

test("passed = PASSED|XFAIL; failed = absent|FAILED|ERROR; SKIPPED and raw tokens are neither", () => {
  assert.equal(testPassed("t::passed", SM), true);
  assert.equal(testPassed("t::xfail", SM), true);
  for (const name of ["t::failed", "t::error", "t::skipped", "file", "t::absent"])
    assert.equal(testPassed(name, SM), false);
  for (const name of ["t::failed", "t::error", "t::absent"]) assert.equal(testFailed(name, SM), true);
  for (const name of ["t::passed", "t::xfail", "t::skipped", "file"]) assert.equal(testFailed(name, SM), false);
  // Names that exist on every object's prototype are still absent.
  for (const name of ["constructor", "toString", "__proto__", "hasOwnProperty"]) {
    assert.equal(testPassed(name, SM), false);
    assert.equal(testFailed(name, SM), true);
  }
  const proto = Object.fromEntries([["__proto__", "PASSED"]]) as StatusMap;
  assert.equal(testPassed("__proto__", proto), true);
});

test("tests_status lists keep order; skipped tests are in neither list; *_TO_FAIL empty unless asked", () => {
  const ts = getTestsStatus(SM, {
    FAIL_TO_PASS: ["t::passed", "t::skipped", "t::failed", "t::xfail", "t::absent"],
    PASS_TO_PASS: ["t::error", "t::passed"],
    FAIL_TO_FAIL: ["t::failed"],
    PASS_TO_FAIL: ["t::passed"],
  });
  assert.deepEqual(ts, {
    FAIL_TO_PASS: { success: ["t::passed", "t::xfail"], failure: ["t::failed", "t::absent"] },
    PASS_TO_PASS: { success: ["t::passed"], failure: ["t::error"] },
    FAIL_TO_FAIL: { success: [], failure: [] },
    PASS_TO_FAIL: { success: [], failure: [] },
  });
  assert.deepEqual(Object.keys(ts), ["FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL"]);
  const withToFail = getTestsStatus(
    SM,
    { FAIL_TO_PASS: [], PASS_TO_PASS: [], FAIL_TO_FAIL: ["t::failed"], PASS_TO_FAIL: ["t::passed"] },
    { calculateToFail: true },
  );
  assert.deepEqual(withToFail.FAIL_TO_FAIL, { success: [], failure: ["t::failed"] });
  assert.deepEqual(withToFail.PASS_TO_FAIL, { success: ["t::passed"], failure: [] });
});

test("fail-only evaluation counts a test as failed only when it shows FAILED", () => {
  const ts = getTestsStatus(
    SM,
    { FAIL_TO_PASS: ["t::failed", "t::error", "t::absent", "t::skipped"], PASS_TO_PASS: [] },
    { evalType: "fail_only" },
  );
  assert.deepEqual(ts.FAIL_TO_PASS, { success: ["t::error", "t::absent", "t::skipped"], failure: ["t::failed"] });
});

function statusOf(
  f2p: readonly string[],
  p2p: readonly string[],
): { ts: TestsStatus; f2p: number; p2p: number; res: string } {
  const ts = getTestsStatus(SM, { FAIL_TO_PASS: f2p, PASS_TO_PASS: p2p });
  return { ts, f2p: f2pRatio(ts), p2p: p2pRatio(ts), res: resolutionStatus(ts) };
}

test("ratios and FULL / PARTIAL / NO", () => {
  assert.deepEqual((({ f2p, p2p, res }) => ({ f2p, p2p, res }))(statusOf(["t::passed", "t::xfail"], ["t::passed"])), {
    f2p: 1,
    p2p: 1,
    res: "FULL",
  });
  const partial = statusOf(["t::passed", "t::failed", "t::absent"], ["t::xfail"]);
  assert.equal(partial.f2p, 1 / 3);
  assert.equal(partial.res, "PARTIAL");
  // Every FAIL_TO_PASS fixed but a PASS_TO_PASS broken: NO.
  assert.equal(statusOf(["t::passed"], ["t::passed", "t::error"]).res, "NO");
  assert.equal(statusOf(["t::passed"], ["t::passed", "t::error"]).p2p, 0.5);
  // Partial fix with a broken PASS_TO_PASS: NO, not PARTIAL.
  assert.equal(statusOf(["t::passed", "t::failed"], ["t::failed"]).res, "NO");
  assert.equal(statusOf(["t::failed"], ["t::passed"]).res, "NO");
  assert.equal(statusOf(["t::failed"], ["t::passed"]).f2p, 0);
});

test("empty lists count as ratio 1; a list of only skipped tests does too", () => {
  const empty = statusOf([], []);
  assert.deepEqual([empty.f2p, empty.p2p, empty.res], [1, 1, "FULL"]);
  const skippedOnly = statusOf(["t::skipped"], ["t::skipped"]);
  assert.deepEqual(skippedOnly.ts.FAIL_TO_PASS, { success: [], failure: [] });
  assert.deepEqual([skippedOnly.f2p, skippedOnly.p2p, skippedOnly.res], [1, 1, "FULL"]);
  assert.equal(statusOf([], ["t::failed"]).res, "NO");
});

test("test lists: lists or JSON strings of lists, anything else is a clear error", () => {
  assert.deepEqual(parseTestList('["a::b", "c"]'), ["a::b", "c"]);
  assert.deepEqual(parseTestList(["x"]), ["x"]);
  assert.deepEqual(parseTestList(undefined), []);
  assert.deepEqual(parseTestList("[]"), []);
  assert.throws(() => parseTestList("not json", "FAIL_TO_PASS"), /FAIL_TO_PASS is a string but not JSON/);
  assert.throws(() => parseTestList('{"a": 1}', "PASS_TO_PASS"), /PASS_TO_PASS must be a list of test names/);
  assert.throws(() => parseTestList([1, 2]), /must be a list of test names/);
});

/** A test log in the shape eval.sh produces (pytest -rA summary between the `set -x` marker lines). */
const log = (summary: string): string =>
  `+ git status\nOn branch main\n+ : '${MARKERS.startTestOutput}'\n+ pytest -rA\n${summary}\n` +
  `+ : '${MARKERS.endTestOutput}'\n`;

const INSTANCE = {
  instance_id: "acme__calc-1",
  repo: "acme/calc",
  FAIL_TO_PASS: '["tests/test_calc.py::test_add", "tests/test_calc.py::test_sub"]',
  PASS_TO_PASS: ["tests/test_calc.py::test_mul", "tests/test_calc.py::test_div"],
};

test("gradeInstance: the report entry in every situation", () => {
  // No patch at all.
  const none = gradeInstance({ instance: INSTANCE, modelPatch: null, testOutput: null });
  assert.deepEqual(none.report, {
    "acme__calc-1": { patch_is_None: true, patch_exists: false, patch_successfully_applied: false, resolved: false },
  });
  assert.equal(none.resolution, null);
  // A patch, but the eval script never produced a log.
  const noLog = gradeInstance({ instance: INSTANCE, modelPatch: "diff", testOutput: null });
  assert.deepEqual(noLog.report["acme__calc-1"], {
    patch_is_None: false,
    patch_exists: true,
    patch_successfully_applied: false,
    resolved: false,
  });
  // A log carrying a failure marker.
  const timedOut = gradeInstance({
    instance: INSTANCE,
    modelPatch: "diff",
    testOutput: `${log("PASSED x")}\n${MARKERS.testsTimeout}`,
  });
  assert.equal(timedOut.report["acme__calc-1"]!.patch_successfully_applied, false);
  assert.equal(timedOut.report["acme__calc-1"]!.tests_status, undefined);
  assert.deepEqual(timedOut.log, { found: false, statusMap: null, reason: "tests_timed_out" });

  // Graded: every FAIL_TO_PASS passes (XFAIL counts), but a PASS_TO_PASS test is missing from the log.
  const missing = gradeInstance({
    instance: INSTANCE,
    modelPatch: "diff",
    testOutput: log(
      [
        "PASSED tests/test_calc.py::test_add",
        "PASSED tests/test_calc.py::test_mul",
        "SKIPPED [1] tests/test_calc.py:9: no division today",
        "XFAIL tests/test_calc.py::test_sub - known",
      ].join("\n"),
    ),
  });
  assert.deepEqual(missing.report, {
    "acme__calc-1": {
      patch_is_None: false,
      patch_exists: true,
      patch_successfully_applied: true,
      resolved: false,
      tests_status: {
        FAIL_TO_PASS: { success: ["tests/test_calc.py::test_add", "tests/test_calc.py::test_sub"], failure: [] },
        // test_div is absent from the log: failed.
        PASS_TO_PASS: { success: ["tests/test_calc.py::test_mul"], failure: ["tests/test_calc.py::test_div"] },
        FAIL_TO_FAIL: { success: [], failure: [] },
        PASS_TO_FAIL: { success: [], failure: [] },
      },
    },
  });
  assert.equal(missing.resolution, "NO"); // the absent PASS_TO_PASS test breaks it
  assert.deepEqual(Object.keys(missing.report["acme__calc-1"]!), [
    "patch_is_None",
    "patch_exists",
    "patch_successfully_applied",
    "resolved",
    "tests_status",
  ]);

  const partialLog = log(
    [
      "PASSED tests/test_calc.py::test_add",
      "PASSED tests/test_calc.py::test_mul",
      "PASSED tests/test_calc.py::test_div",
      "FAILED tests/test_calc.py::test_sub - assert 1 == 2",
    ].join("\n"),
  );
  const partial = gradeInstance({
    instance: INSTANCE,
    modelPatch: "",
    testOutput: partialLog,
    includeTestsStatus: false,
  });
  assert.equal(partial.resolution, "PARTIAL");
  assert.deepEqual(partial.report["acme__calc-1"], {
    patch_is_None: false,
    patch_exists: true,
    patch_successfully_applied: true,
    resolved: false,
  });

  const fixed = gradeInstance({
    instance: INSTANCE,
    modelPatch: "d",
    testOutput: partialLog.replace(
      "FAILED tests/test_calc.py::test_sub - assert 1 == 2",
      "PASSED tests/test_calc.py::test_sub",
    ),
  });
  assert.equal(fixed.resolution, "FULL");
  assert.equal(fixed.report["acme__calc-1"]!.resolved, true);
});

test("gradeInstance uses the row's log_parser, else its repository's parser", () => {
  const djangoLog = log("test_add (calc.tests.T.test_add) ... ok");
  const row = {
    instance_id: "django__django-1",
    repo: "django/django",
    FAIL_TO_PASS: ["test_add (calc.tests.T.test_add)"],
    PASS_TO_PASS: [],
  };
  assert.equal(gradeInstance({ instance: row, modelPatch: "d", testOutput: djangoLog }).resolution, "FULL");
  // Read as pytest output, the same log has no such test.
  const asPytest = gradeInstance({
    instance: { ...row, log_parser: "parse_log_pytest" },
    modelPatch: "d",
    testOutput: djangoLog,
  });
  assert.equal(asPytest.resolution, "NO");
  assert.equal(asPytest.log?.found && asPytest.log.wholeLog, true); // nothing parsed between the markers
});

test("rewards: binary (default), fraction, custom", () => {
  const grade = (summary: string): Grade =>
    gradeInstance({
      instance: { ...INSTANCE, PASS_TO_PASS: ["tests/test_calc.py::test_mul"] },
      modelPatch: "d",
      testOutput: log(summary),
    });
  const half = grade("PASSED tests/test_calc.py::test_add\nPASSED tests/test_calc.py::test_mul");
  const all = grade(
    "PASSED tests/test_calc.py::test_add\nPASSED tests/test_calc.py::test_sub\nPASSED tests/test_calc.py::test_mul",
  );
  const broken = grade(
    "PASSED tests/test_calc.py::test_add\nPASSED tests/test_calc.py::test_sub\nFAILED tests/test_calc.py::test_mul",
  );
  const none = gradeInstance({ instance: INSTANCE, modelPatch: null, testOutput: null });
  assert.deepEqual(
    [half, all, broken, none].map((g) => reward(g)),
    [0, 1, 0, 0],
  );
  assert.deepEqual(
    [half, all, broken, none].map((g) => reward(g, "fraction")),
    [0.5, 1, 0, 0],
  );
  assert.equal(
    reward(half, (g) => (g.resolution === "PARTIAL" ? 0.25 : 0)),
    0.25,
  );
  assert.equal(parseRewardSpec("fraction"), "fraction");
  assert.throws(() => parseRewardSpec("bogus"), /unknown reward "bogus"/);
});
