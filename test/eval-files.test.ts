/**
 * Files in and out of evaluation: diffs (checked against git's own view), test directives, eval.sh (run for real
 * on a git fixture with pytest from a local venv), report.json and the run summary (checked byte for byte against
 * Python's json.dumps), the summary table, and predictions files.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { run, runOk } from "../src/util/run.js";
import { cachedVenv } from "./helpers.js";
import { InvalidInputError, NotFoundError } from "../src/errors.js";
import type { EnvSpec } from "../src/env/types.js";
import {
  HEREDOC_DELIMITER,
  LOG_FILES,
  MARKERS,
  evalTestLog,
  gradeInstance,
  heredocDelimiter,
  indexPredictions,
  instanceLogDir,
  loadPredictions,
  makeEvalScript,
  makeRunSummary,
  makeRunSummaryFromDisk,
  modifiedFiles,
  newFiles,
  parsePredictions,
  renderSummary,
  reportJsonText,
  summaryFileName,
  summaryJsonText,
  testDirectives,
  touchedFiles,
  writeInstanceFiles,
  writeRunSummary,
  type FoundReport,
  type InstanceReportFile,
  type Prediction,
  unknownPredictionIds,
} from "../src/eval/index.js";

// ---------------------------------------------------------------------------------------------------------------
// Shared venv (same recipe and hash as test/eval-parsers.test.ts, so both reuse one venv).
const VENV_PACKAGES = ["pytest", "django", "sympy"];

const sharedVenv = (): Promise<string> => cachedVenv("eval", VENV_PACKAGES);

const tempDirs: string[] = [];
after(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "msb-eval-files-"));
  tempDirs.push(dir);
  return dir;
}

function writeFiles(root: string, files: Record<string, string | Buffer>): void {
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, rel)), { recursive: true });
    writeFileSync(join(root, rel), content);
  }
}

/** git with a throwaway identity and HOME, so nothing of the host's configuration is read or written. */
const git = (cwd: string, ...args: string[]): Promise<string> =>
  runOk("git", ["-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid", ...args], {
    cwd,
    env: { ...process.env, HOME: cwd, GIT_CONFIG_NOSYSTEM: "1" },
  });

async function gitRepo(files: Record<string, string | Buffer>): Promise<{ root: string; base: string }> {
  const root = tempDir();
  await git(root, "init", "-q", "-b", "main");
  writeFiles(root, files);
  await git(root, "add", "-A");
  await git(root, "commit", "-q", "-m", "base");
  return { root, base: (await git(root, "rev-parse", "HEAD")).trim() };
}

/** Python's own `json.dumps(<the same data>, indent=4)`. */
const pythonJsonDumps = async (value: unknown): Promise<string> =>
  runOk("python3", ["-c", "import json,sys; sys.stdout.write(json.dumps(json.load(sys.stdin), indent=4))"], {
    input: JSON.stringify(value),
  });

// ---------------------------------------------------------------------------------------------------------------
// Diffs

test("diff helpers agree with git (rename, delete, binary, quoted names, fake hunk headers)", async () => {
  const { root } = await gitRepo({
    "src/a.py": "x = 1\n-- a/evil\n++ b/evil\ny = 2\n",
    "old name.py": "print('moved')\n",
    "gone.py": "print('bye')\n",
    "img.png": Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 3]),
    "tests/test_x.py": "def test_x():\n    pass\n",
  });
  // A removed "-- a/evil" followed by an added "++ b/evil" puts "--- a/evil" / "+++ b/evil" inside a hunk.
  writeFiles(root, {
    "src/a.py": "x = 1\ny = 2\n++ b/evil\n",
    "img.png": Buffer.from([0x89, 0x50, 0x4e, 0x47, 9, 9, 9, 9]),
    "tests/test_new.py": "def test_new():\n    pass\n",
    "tests/tést_ü.py": "def test_u():\n    pass\n",
    "tests/test_x.py": "def test_x():\n    assert True\n",
  });
  await git(root, "mv", "old name.py", "new name.py");
  await git(root, "rm", "-q", "gone.py");
  await git(root, "add", "-A");
  const patch = await git(root, "diff", "--cached", "-M", "--binary");
  assert.match(patch, /^--- a\/evil$/m);
  assert.match(patch, /^diff --git "a\/tests\/t\\303\\251st_\\303\\274\.py"/m);

  // git's own account: status, paths (NUL-separated, unquoted).
  const fields = (await git(root, "diff", "--cached", "-M", "--name-status", "-z")).split("\0").filter((f) => f !== "");
  const modified: string[] = [];
  const created: string[] = [];
  const touched: string[] = [];
  for (let i = 0; i < fields.length; ) {
    const status = fields[i++]!;
    if (status.startsWith("R")) {
      const [from, to] = [fields[i++]!, fields[i++]!];
      modified.push(from);
      touched.push(to);
    } else {
      const path = fields[i++]!;
      (status === "A" ? created : modified).push(path);
      touched.push(path);
    }
  }
  assert.deepEqual(new Set(modifiedFiles(patch)), new Set(modified));
  assert.deepEqual(new Set(newFiles(patch)), new Set(created));
  assert.deepEqual(new Set(touchedFiles(patch)), new Set(touched));
  assert.deepEqual(new Set(modified), new Set(["src/a.py", "old name.py", "gone.py", "img.png", "tests/test_x.py"]));
  assert.deepEqual(new Set(created), new Set(["tests/test_new.py", "tests/tést_ü.py"]));

  // Directives: the harness's regex reads every `diff --git a/… b/…` line (greedy, so the rename gives its new
  // name) and misses git's quoted headers.
  // img.png is not a test file; the quoted header of tests/tést_ü.py is not matched.
  assert.deepEqual(
    new Set(testDirectives({ repo: "acme/calc", test_patch: patch })),
    new Set(["gone.py", "new name.py", "src/a.py", "tests/test_new.py", "tests/test_x.py"]),
  );
});

test("test directives follow the harness: non-test files dropped, django modules, humaneval, sympy paths", () => {
  const header = (path: string): string =>
    `diff --git a/${path} b/${path}\n--- a/${path}\n+++ b/${path}\n@@ -1 +1 @@\n-a\n+b\n`;
  const files = [
    "tests/admin_views/tests.py",
    "tests/admin_views/models.py",
    "tests/fixtures/data.json",
    "tests/files/picture.png",
    "tests/data.csv",
    "docs/notes.txt",
    "docs/x.md",
    "conf.toml",
    "ci.yml",
    "ci2.yaml",
    "a.jpg",
    "b.jpeg",
    "m.pkl",
    "django/core/checks.py",
  ];
  const patch = files.map(header).join("");
  assert.deepEqual(testDirectives({ repo: "django/django", test_patch: patch }), [
    "admin_views.tests",
    "admin_views.models",
    "django.core.checks",
  ]);
  assert.deepEqual(testDirectives({ repo: "astropy/astropy", test_patch: patch }), [
    "tests/admin_views/tests.py",
    "tests/admin_views/models.py",
    "django/core/checks.py",
  ]);
  const sympyPatch = header("sympy/core/tests/test_basic.py") + header("sympy/core/basic.py");
  assert.deepEqual(testDirectives({ repo: "sympy/sympy", test_patch: sympyPatch }), [
    "sympy/core/tests/test_basic.py",
    "sympy/core/basic.py",
  ]);
  assert.deepEqual(testDirectives({ repo: "swe-bench/humaneval", test_patch: sympyPatch }), ["test.py"]);
});

// ---------------------------------------------------------------------------------------------------------------
// eval.sh

const SPEC: Pick<EnvSpec, "install" | "eval_commands" | "test_cmd"> = {
  install: "python -m pip install -e .",
  eval_commands: ["export LANG=en_US.UTF-8", "export LC_ALL=en_US.UTF-8"],
  test_cmd: "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
};

test("eval.sh has the harness's shape, with the venv instead of conda", () => {
  const testPatch = [
    "diff --git a/tests/queries/tests.py b/tests/queries/tests.py",
    "--- a/tests/queries/tests.py",
    "+++ b/tests/queries/tests.py",
    "@@ -1 +1 @@",
    "-a",
    "+b",
    "diff --git a/tests/queries/test_new.py b/tests/queries/test_new.py",
    "new file mode 100644",
    "--- /dev/null",
    "+++ b/tests/queries/test_new.py",
    "@@ -0,0 +1 @@",
    "+x",
    "",
  ].join("\n");
  const script = makeEvalScript({
    instance: { instance_id: "django__django-1", repo: "django/django", base_commit: "abc123", test_patch: testPatch },
    spec: SPEC,
  });
  const reset = ["git checkout abc123 tests/queries/tests.py", "rm -f tests/queries/test_new.py"];
  assert.equal(
    script,
    [
      "#!/bin/bash",
      "set -uxo pipefail",
      "source /opt/venv/bin/activate",
      "cd /testbed",
      "export LANG=en_US.UTF-8",
      "export LC_ALL=en_US.UTF-8",
      "git config --global --add safe.directory /testbed",
      "cd /testbed",
      "git status",
      "git show",
      "git -c core.fileMode=false diff abc123",
      "source /opt/venv/bin/activate",
      "python -m pip install -e .",
      ...reset,
      `git apply -v - <<'${HEREDOC_DELIMITER}'`,
      testPatch,
      HEREDOC_DELIMITER,
      `: '${MARKERS.startTestOutput}'`,
      "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 queries.tests queries.test_new",
      `: '${MARKERS.endTestOutput}'`,
      ...reset,
      "",
    ].join("\n"),
  );
});

test("heredoc delimiter never collides with the patch; odd paths are quoted for bash", async () => {
  assert.equal(heredocDelimiter("a\nb\n"), HEREDOC_DELIMITER);
  const body = `x\n${HEREDOC_DELIMITER}\n${HEREDOC_DELIMITER}_1\ny`;
  const delimiter = heredocDelimiter(body);
  assert.equal(delimiter, `${HEREDOC_DELIMITER}_2`);
  // The heredoc really delivers the body verbatim, $ and backticks included.
  const tricky = `${body}\n$HOME \`id\` '"\n`;
  const out = await runOk("bash", [
    "-c",
    `cat <<'${heredocDelimiter(tricky)}'\n${tricky}\n${heredocDelimiter(tricky)}`,
  ]);
  assert.equal(out, `${tricky}\n`);

  const script = makeEvalScript({
    instance: {
      instance_id: "x",
      repo: "acme/calc",
      base_commit: "abc",
      test_patch:
        "diff --git a/tests/it's here.py b/tests/it's here.py\n" +
        "--- a/tests/it's here.py\n+++ b/tests/it's here.py\n@@ -1 +1 @@\n-a\n+b\n",
    },
    spec: { test_cmd: "pytest -rA", eval_commands: [] },
  });
  assert.ok(script.includes(`git checkout abc 'tests/it'\\''s here.py'`));
  assert.ok(script.includes(`pytest -rA 'tests/it'\\''s here.py'`));
  assert.ok(!script.includes("pip install"), "no install command when the spec has none");
  const syntax = await run("bash", ["-n", "-c", script]);
  assert.equal(syntax.code, 0, syntax.stderr);
});

const CALC_FILES: Record<string, string> = {
  "pytest.ini": "[pytest]\npythonpath = .\n",
  "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
  "tests/test_calc.py":
    "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n\n\n" +
    "def test_add_zero():\n    assert add(0, 0) == 0\n",
};

/** A calc repository with its test patch and gold fix made by git, back at the base commit. */
async function calcInstance(): Promise<{ root: string; base: string; testPatch: string; gold: string }> {
  const { root, base } = await gitRepo(CALC_FILES);
  writeFiles(root, {
    "tests/test_calc.py": `${CALC_FILES["tests/test_calc.py"]}\n\ndef test_add():\n    assert add(2, 3) == 5\n`,
    "tests/test_new.py":
      "from calc import add\n\n\ndef test_add_more():\n    assert add(-1, 1) == 0\n    assert add(1, 1) == 2\n",
    "tests/data.json": "{}\n",
  });
  await git(root, "add", "-A");
  const testPatch = await git(root, "diff", "--cached");
  await git(root, "reset", "-q", "--hard", base);
  writeFiles(root, { "calc.py": CALC_FILES["calc.py"]!.replace("a - b", "a + b") });
  const gold = await git(root, "diff");
  await git(root, "checkout", "-q", "--", ".");
  return { root, base, testPatch, gold };
}

test("eval.sh for real: test patch applied, tests between markers, files reset; graded FULL / NO", async () => {
  const venv = await sharedVenv();
  const { root, base, testPatch, gold } = await calcInstance();
  const instance = {
    instance_id: "acme__calc-1",
    repo: "acme/calc",
    base_commit: base,
    test_patch: testPatch,
    patch: gold,
    FAIL_TO_PASS: '["tests/test_calc.py::test_add", "tests/test_new.py::test_add_more"]',
    PASS_TO_PASS: ["tests/test_calc.py::test_mul", "tests/test_calc.py::test_add_zero"],
  };
  const script = makeEvalScript({
    instance,
    spec: { install: "python -m pip --version", eval_commands: ["export LANG=C.UTF-8"], test_cmd: "pytest -rA" },
    testbedPath: root,
    venvPath: venv,
  });
  const home = tempDir();
  const runEval = async (): Promise<string> => {
    writeFileSync(join(home, "eval.sh"), script);
    const r = await run("bash", ["-c", `bash ${join(home, "eval.sh")} 2>&1`], {
      env: { ...process.env, HOME: home, PYTHONDONTWRITEBYTECODE: "1" },
      timeoutMs: 120_000,
    });
    return r.stdout;
  };

  // Without a fix: the new tests fail, the old ones still pass.
  const before = await runEval();
  assert.ok(before.includes(`+ : '${MARKERS.startTestOutput}'`), before);
  assert.ok(before.includes(`+ pytest -rA tests/test_calc.py tests/test_new.py\n`), "directives: data.json dropped");
  assert.match(before, new RegExp(`pip \\S+ from ${venv}/`), "install step ran inside the venv");
  assert.match(before, /Applied patch tests\/test_new\.py cleanly/);
  const unfixed = gradeInstance({ instance, modelPatch: "", testOutput: before });
  assert.equal(unfixed.resolution, "NO");
  assert.deepEqual(unfixed.testsStatus?.FAIL_TO_PASS, {
    success: [],
    failure: ["tests/test_calc.py::test_add", "tests/test_new.py::test_add_more"],
  });
  assert.deepEqual(unfixed.testsStatus?.PASS_TO_PASS.failure, []);
  assert.equal((await git(root, "status", "--porcelain")).trim(), "", "tests reset after the run");

  // With the gold fix applied (the runner's step before eval.sh).
  writeFileSync(join(home, "patch.diff"), gold);
  await git(root, "apply", "--verbose", join(home, "patch.diff"));
  const afterFix = await runEval();
  const fixed = gradeInstance({ instance, modelPatch: gold, testOutput: afterFix });
  assert.equal(fixed.resolution, "FULL");
  assert.equal(fixed.report["acme__calc-1"]!.resolved, true);
  const section = evalTestLog("pytest", afterFix);
  assert.ok(section.found && !section.wholeLog);
  // Only the fix remains in the tree.
  assert.equal((await git(root, "status", "--porcelain")).trim(), "M calc.py");

  // The harness's files for it, and the run summary read back from disk.
  const baseDir = tempDir();
  const dir = instanceLogDir(baseDir, "run-1", "org/model", instance.instance_id);
  assert.equal(dir, join(baseDir, "logs", "run_evaluation", "run-1", "org__model", "acme__calc-1"));
  await writeInstanceFiles(dir, { patch: gold, evalScript: script, testOutput: afterFix, report: fixed.report });
  for (const name of [LOG_FILES.patch, LOG_FILES.evalScript, LOG_FILES.testOutput, LOG_FILES.report]) {
    assert.ok(existsSync(join(dir, name)), name);
  }
  const predictions = indexPredictions([
    { instance_id: instance.instance_id, model_name_or_path: "org/model", model_patch: gold },
  ]);
  const summary = await makeRunSummaryFromDisk({
    baseDir,
    runId: "run-1",
    datasetIds: [instance.instance_id],
    predictions,
  });
  assert.deepEqual(summary.resolved_ids, ["acme__calc-1"]);
  assert.equal(summary.completed_instances, 1);
});

// ---------------------------------------------------------------------------------------------------------------
// report.json and the run summary

test("report.json is byte-identical to Python's json.dumps(indent=4), non-ASCII names included", async () => {
  const testOutput = [
    `+ : '${MARKERS.startTestOutput}'`,
    "PASSED tests/test_ü.py::test_ok[é]",
    "FAILED tests/test_ü.py::test_emoji[🙂] - assert 0",
    `+ : '${MARKERS.endTestOutput}'`,
  ].join("\n");
  const { report } = gradeInstance({
    instance: {
      instance_id: "acme__ü-1",
      repo: "acme/ü",
      FAIL_TO_PASS: ["tests/test_ü.py::test_ok[é]", "tests/test_ü.py::test_emoji[🙂]"],
      PASS_TO_PASS: [],
    },
    modelPatch: "diff",
    testOutput,
  });
  const text = reportJsonText(report);
  assert.equal(text, await pythonJsonDumps(report));
  assert.ok(text.includes("\\u00fc") && text.includes("\\ud83d\\ude42"), "non-ASCII escaped as Python does");
  assert.deepEqual(JSON.parse(text), report);

  const dir = tempDir();
  await writeInstanceFiles(dir, { report });
  assert.equal(readFileSync(join(dir, "report.json"), "utf8"), text);
  assert.throws(() => instanceLogDir(dir, "run", "m", "../escape"), InvalidInputError);
  assert.throws(() => instanceLogDir(dir, "..", "m", "x"), InvalidInputError);
});

const pred = (id: string, patch: string | null, model = "org/model-v1"): Prediction => ({
  instance_id: id,
  model_name_or_path: model,
  model_patch: patch,
});
const entry = (id: string, resolved: boolean): InstanceReportFile => ({
  [id]: { patch_is_None: false, patch_exists: true, patch_successfully_applied: true, resolved },
});

test("run summary: every field as the harness computes it, in its order, byte-identical file", async () => {
  const datasetIds = ["r__r-6", "r__r-1", "r__r-2", "r__r-3", "r__r-4", "r__r-5", "r__r-7", "r__r-10"];
  const predictions = indexPredictions([
    pred("r__r-1", "diff a"), // resolved
    pred("r__r-2", "diff b"), // unresolved
    pred("r__r-3", null), // empty (None)
    pred("r__r-4", ""), // empty ("")
    pred("r__r-5", "diff e"), // no report: error
    pred("r__r-6", "diff f"), // unreadable report: completed and error
    pred("r__r-10", "diff g"), // resolved
    pred("other__x-1", "diff h"), // outside the dataset: submitted only
    // r__r-7 has no prediction: incomplete
  ]);
  const reports = new Map<string, FoundReport>([
    ["r__r-1", entry("r__r-1", true)],
    ["r__r-2", entry("r__r-2", false)],
    ["r__r-6", "invalid"],
    ["r__r-10", entry("r__r-10", true)],
  ]);
  const summary = makeRunSummary({ datasetIds, predictions, reports });
  assert.deepEqual(summary, {
    total_instances: 8,
    submitted_instances: 8,
    completed_instances: 4,
    resolved_instances: 2,
    unresolved_instances: 1,
    empty_patch_instances: 2,
    error_instances: 2,
    completed_ids: ["r__r-1", "r__r-10", "r__r-2", "r__r-6"],
    incomplete_ids: ["r__r-7"],
    empty_patch_ids: ["r__r-3", "r__r-4"],
    submitted_ids: ["other__x-1", "r__r-1", "r__r-10", "r__r-2", "r__r-3", "r__r-4", "r__r-5", "r__r-6"],
    resolved_ids: ["r__r-1", "r__r-10"],
    unresolved_ids: ["r__r-2"],
    error_ids: ["r__r-5", "r__r-6"],
    schema_version: 2,
  });
  assert.deepEqual(Object.keys(summary), [
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
  ]);

  // The same from report.json files on disk (an empty report.json is unreadable).
  const baseDir = tempDir();
  for (const [id, r] of reports) {
    const dir = instanceLogDir(baseDir, "run-7", "org/model-v1", id);
    if (r === "invalid") {
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, "report.json"), "  \n");
    } else {
      await writeInstanceFiles(dir, { report: r });
    }
  }
  assert.deepEqual(await makeRunSummaryFromDisk({ baseDir, runId: "run-7", datasetIds, predictions }), summary);

  assert.equal(summaryFileName("org/model-v1", "run-7"), "org__model-v1.run-7.json");
  const path = await writeRunSummary(baseDir, summary, "org/model-v1", "run-7");
  assert.equal(path, join(baseDir, "org__model-v1.run-7.json"));
  const text = readFileSync(path, "utf8");
  assert.equal(text, summaryJsonText(summary));
  assert.equal(text, `${await pythonJsonDumps(summary)}\n`);

  const table = renderSummary(summary);
  assert.match(table, /^Total instances: 8\nInstances submitted: 7\nInstances completed: 4\nInstances incomplete: 1\n/);
  assert.match(table, /^Instances resolved: 2 \(25\.0%\)$/m);
  assert.match(table, /^Instances with empty patches: 2$/m);
  assert.match(table, /^Instances with errors: 2$/m);
  for (const [id, outcome] of [
    ["r__r-1", "resolved"],
    ["r__r-2", "unresolved"],
    ["r__r-3", "empty patch"],
    ["r__r-5", "error"],
    ["r__r-6", "error"],
    ["r__r-7", "incomplete"],
  ]) {
    assert.match(table, new RegExp(`^${id} +${outcome}$`, "m"));
  }
  assert.doesNotMatch(renderSummary(summary, { perInstance: false }), /r__r-1/);
});

// ---------------------------------------------------------------------------------------------------------------
// Predictions

test("predictions: JSON list, JSONL, keyed object (mini-swe-agent preds.json), gold and empty", async () => {
  const dir = tempDir();
  const list = [pred("a__a-1", "diff 1"), pred("a__a-2", null)];
  writeFileSync(join(dir, "preds.json"), JSON.stringify(list, null, 2));
  writeFileSync(
    join(dir, "preds.jsonl"),
    `${JSON.stringify(list[0])}\n\n${JSON.stringify({ ...list[1], extra: 7 })}\n`,
  );
  writeFileSync(
    join(dir, "mini.json"),
    JSON.stringify({ "a__a-1": list[0], "a__a-2": { model_name_or_path: "org/model-v1", model_patch: "" } }, null, 2),
  );
  writeFileSync(join(dir, "no-ext"), `\uFEFF${JSON.stringify(list[0])}\n`);

  assert.deepEqual(await loadPredictions(join(dir, "preds.json")), list);
  assert.deepEqual(await loadPredictions(join(dir, "preds.jsonl")), [list[0], { ...list[1], extra: 7 }]);
  assert.deepEqual(await loadPredictions(join(dir, "mini.json")), [list[0], pred("a__a-2", "")]);
  assert.deepEqual(await loadPredictions(join(dir, "no-ext")), [list[0]]);
  // Both fields are required (the harness reads them too): the error names the one missing, whatever the layout.
  assert.throws(() => parsePredictions('{"instance_id": "z", "model_patch": null}', "p"), {
    message:
      "p: line 1: missing \"model_name_or_path\" (the model's name; it names the run's report, " +
      "<model>.<run_id>.json)",
  });
  assert.throws(() => parsePredictions('{"instance_id": "z", "model_name_or_path": "m"}', "p"), {
    message: 'p: line 1: missing "model_patch" (the diff to evaluate; "" or null for none)',
  });
  assert.throws(() => parsePredictions('[{"instance_id": "z", "model_name_or_path": "m"}]', "p"), {
    message: 'p: entry 0: missing "model_patch" (the diff to evaluate; "" or null for none)',
  });
  assert.throws(
    () => parsePredictions('{"z": {"instance_id": "z", "model_patch": ""}}', "p"),
    /entry "z": missing "model_name/,
  );

  const dataset = [
    { instance_id: "a__a-1", patch: "gold 1" },
    { instance_id: "a__a-2", patch: "gold 2" },
  ];
  assert.deepEqual(await loadPredictions("gold", dataset), [
    { instance_id: "a__a-1", model_name_or_path: "gold", model_patch: "gold 1" },
    { instance_id: "a__a-2", model_name_or_path: "gold", model_patch: "gold 2" },
  ]);
  assert.deepEqual(await loadPredictions("empty", dataset), [
    { instance_id: "a__a-1", model_name_or_path: "empty", model_patch: "" },
    { instance_id: "a__a-2", model_name_or_path: "empty", model_patch: "" },
  ]);
  await assert.rejects(loadPredictions("gold"), /need the dataset/);

  // A later duplicate wins, as in the harness.
  const byId = indexPredictions([pred("d", "1"), pred("d", "2")]);
  assert.equal(byId.get("d")?.model_patch, "2");
  assert.deepEqual(unknownPredictionIds([pred("a__a-1", "x"), pred("zz", "y"), pred("zz", "z")], ["a__a-1"]), ["zz"]);
});

test("predictions: malformed files give errors naming the file and line", async () => {
  const dir = tempDir();
  const write = (name: string, text: string): string => {
    writeFileSync(join(dir, name), text);
    return join(dir, name);
  };
  const good = JSON.stringify(pred("a", "d"));
  const badLine = write("bad.jsonl", `${good}\n${good}\n{"instance_id": "c", "model_patch": \n`);
  await assert.rejects(
    loadPredictions(badLine),
    (e: Error) => e instanceof InvalidInputError && e.message.startsWith(`${badLine}:3: not valid JSON`),
  );
  const badList = write("bad.json", `[\n  ${good},\n  {"instance_id": "b",, }\n]\n`);
  await assert.rejects(
    loadPredictions(badList),
    new RegExp(`^InvalidInputError: ${badList}:3:\\d+: not valid JSON`.replace(/\//g, "\\/")),
  );
  const noId = write("noid.json", JSON.stringify([pred("a", "d"), { model_patch: "x" }]));
  await assert.rejects(loadPredictions(noId), { message: `${noId}: entry 1: missing "instance_id"` });
  const numPatch = write("num.jsonl", `${good}\n{"instance_id": "b", "model_patch": 5}\n`);
  await assert.rejects(loadPredictions(numPatch), {
    message: `${numPatch}:2: "model_patch" must be a string or null, got number`,
  });
  const mismatch = write("mismatch.json", JSON.stringify({ a: pred("b", "d") }));
  await assert.rejects(loadPredictions(mismatch), /entry "a": key "a" differs from its "instance_id" "b"/);
  const scalar = write("scalar.json", "42");
  await assert.rejects(
    loadPredictions(scalar),
    /predictions must be a list, JSON Lines, or an object keyed by instance id/,
  );
  const empty = write("empty.json", "\n");
  await assert.rejects(loadPredictions(empty), /contains no predictions/);
  await assert.rejects(loadPredictions(join(dir, "missing.json")), NotFoundError);
  await assert.rejects(loadPredictions(dir), /is a directory/);
});
