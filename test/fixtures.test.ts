/**
 * The fixture generator, checked with real git and real pytest: at each instance's base commit with its test
 * patch, FAIL_TO_PASS fail and PASS_TO_PASS pass (and nothing else runs); with the gold patch everything passes.
 * One venv (host python 3.11 from the toolchain registry + pytest from the machine's pip index) serves all tests;
 * the package itself is put on PYTHONPATH instead of being installed.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { run, runOk } from "../src/util/run.js";
import { findToolchain } from "../src/env/toolchains.js";
import { loadDataset } from "../src/tasks/index.js";
import { specForInstance, specKey } from "../src/env/spec.js";
import {
  makeFixtureDataset,
  makeSweSmithDataset,
  MAX_FIXTURE_INSTANCES,
  type FixtureDataset,
  type SweSmithFixture,
} from "../src/fixtures/generate.js";

let tmp: string;
let venvPython: string;
let fixture: FixtureDataset;
let smith: SweSmithFixture;

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), "msb-fixtures-"));
  const [fx, sm, py] = await Promise.all([
    makeFixtureDataset(join(tmp, "swebench"), { instances: 24, endless: true }),
    makeSweSmithDataset(join(tmp, "swesmith"), { tasks: 5 }),
    findToolchain("3.11"),
  ]);
  fixture = fx;
  smith = sm;
  const venv = join(tmp, "venv");
  await runOk(py.python, ["-m", "venv", venv]);
  venvPython = join(venv, "bin", "python");
  // Offline machine: fail fast on the unreachable default index, resolve from the configured local one.
  await runOk(venvPython, ["-m", "pip", "install", "-q", "pytest"], {
    env: { ...process.env, PIP_RETRIES: "0" },
    timeoutMs: 300_000,
  });
});

after(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

type Statuses = Map<string, string>;

/** Statuses from `pytest -rA` summary lines ("PASSED id", "FAILED id - msg"), as the SWE-bench parser reads them. */
function parseRA(output: string): Statuses {
  const m = new Map<string, string>();
  for (const line of output.split("\n")) {
    const hit = /^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)/.exec(line.replace(" - ", " "));
    if (hit) m.set(hit[2]!, hit[1]!);
  }
  return m;
}

async function pytest(cwd: string, files: string[], timeoutMs = 60_000) {
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", PYTHONPATH: cwd, PYTHONDONTWRITEBYTECODE: "1", HOME: tmp };
  const r = await run(venvPython, ["-m", "pytest", "-rA", "-p", "no:cacheprovider", ...files], { cwd, env, timeoutMs });
  return { ...r, statuses: parseRA(r.stdout) };
}

async function git(cwd: string, args: string[], input?: string) {
  return runOk("git", args, { cwd, input });
}

/** Files a test patch touches (the harness's test directives for pytest repos). */
function directives(patch: string): string[] {
  return [...patch.matchAll(/^diff --git a\/(\S+) b\//gm)].map((m) => m[1]!);
}

async function checkout(work: string, commit: string) {
  await git(work, ["checkout", "-q", "-f", commit]);
  await git(work, ["clean", "-q", "-fdx"]);
}

function assertExactly(statuses: Statuses, expected: Record<string, string[]>, label: string) {
  const want = new Map<string, string>();
  for (const [status, ids] of Object.entries(expected)) for (const id of ids) want.set(id, status);
  assert.deepEqual(
    [...statuses.entries()].sort(),
    [...want.entries()].sort(),
    `${label}: pytest statuses differ from the dataset's lists`,
  );
}

test("SWE-bench fixture: FAIL_TO_PASS fail and PASS_TO_PASS pass at base; gold patch passes all", async () => {
  const work = join(tmp, "work-swebench");
  await runOk("git", ["clone", "-q", fixture.repoPath, work]);
  // The first five cover every kind of instance (partial fix, parametrized, changed test, several F2P).
  for (const inst of fixture.instances.slice(0, 5)) {
    assert.ok(inst.FAIL_TO_PASS.length > 0 && inst.PASS_TO_PASS.length > 0, inst.instance_id);
    await checkout(work, inst.base_commit);
    await git(work, ["apply", "-"], inst.test_patch);
    const files = directives(inst.test_patch);
    const before = await pytest(work, files);
    assertExactly(
      before.statuses,
      { FAILED: inst.FAIL_TO_PASS, PASSED: inst.PASS_TO_PASS },
      `${inst.instance_id} before`,
    );

    await git(work, ["apply", "-"], inst.patch);
    const afterGold = await pytest(work, files);
    assert.equal(afterGold.code, 0, afterGold.stdout);
    assertExactly(
      afterGold.statuses,
      { PASSED: [...inst.FAIL_TO_PASS, ...inst.PASS_TO_PASS] },
      `${inst.instance_id} gold`,
    );
  }
});

test("SWE-bench fixture: the partial fix fixes some but not all FAIL_TO_PASS", async () => {
  const work = join(tmp, "work-partial");
  await runOk("git", ["clone", "-q", fixture.repoPath, work]);
  const { partialFix } = fixture;
  const inst = fixture.instances.find((i) => i.instance_id === partialFix.instanceId)!;
  assert.ok(partialFix.fixedTests.length > 0 && partialFix.stillFailingTests.length > 0);
  assert.deepEqual([...partialFix.fixedTests, ...partialFix.stillFailingTests].sort(), [...inst.FAIL_TO_PASS].sort());
  await checkout(work, inst.base_commit);
  await git(work, ["apply", "-"], inst.test_patch);
  await git(work, ["apply", "-"], partialFix.patch);
  const r = await pytest(work, directives(inst.test_patch));
  assertExactly(
    r.statuses,
    { PASSED: [...partialFix.fixedTests, ...inst.PASS_TO_PASS], FAILED: partialFix.stillFailingTests },
    "partial fix",
  );
});

test("SWE-bench fixture: the endless instance's test never finishes", async () => {
  const inst = fixture.instances.find((i) => i.instance_id === fixture.endlessInstanceId);
  assert.ok(inst, "endless instance present");
  const work = join(tmp, "work-endless");
  await runOk("git", ["clone", "-q", fixture.repoPath, work]);
  await checkout(work, inst.base_commit);
  await git(work, ["apply", "-"], inst.test_patch);
  await git(work, ["apply", "-"], inst.patch); // even the gold patch does not help
  const started = Date.now();
  const r = await pytest(work, directives(inst.test_patch), 2500);
  assert.equal(r.signal, "SIGKILL", `pytest ended on its own: ${r.stdout}`);
  assert.ok(Date.now() - started >= 2400);
});

test("SWE-bench fixture: history, dataset file and row specs", async () => {
  const rows = await loadDataset(fixture.datasetPath);
  assert.deepEqual(rows, fixture.instances);
  const log = (await git(fixture.repoPath, ["log", "--format=%H %s"])).trim().split("\n");
  assert.ok(log.length >= 5 + 5, "setup commits + one fix per instance");
  const shas = new Set(log.map((l) => l.split(" ")[0]));
  for (const inst of rows) {
    assert.equal(inst.repo, "fixture/calc");
    assert.match(inst.instance_id, /^fixture__calc-\d+$/);
    assert.equal(inst.version, "1.0");
    assert.ok(shas.has(inst.base_commit), `${inst.instance_id} base commit is in the history`);
    assert.deepEqual(inst.spec, {
      python: fixture.python,
      pip_packages: ["pytest"],
      install: "python -m pip install -e .",
      test_cmd: "pytest -rA",
      pre_install: [],
      eval_commands: [],
      env: {},
    });
    const spec = specForInstance(inst);
    assert.equal(spec.repo, "fixture/calc");
    assert.equal(spec.commit, inst.base_commit);
    assert.equal(spec.python, fixture.python);
    assert.equal(spec.test_cmd, "pytest -rA");
  }
  // Nearby commits: every base is a distinct ancestor of HEAD.
  assert.equal(
    new Set(rows.filter((r) => r.instance_id !== fixture.endlessInstanceId).map((r) => r.base_commit)).size,
    24,
  );
  const tc = await findToolchain(fixture.python);
  assert.ok(tc.version.startsWith(`${fixture.python}.`));
});

test("SWE-bench fixture: deterministic commits, and option validation", async () => {
  const [a, b] = await Promise.all([
    makeFixtureDataset(join(tmp, "det-a"), { instances: 2 }),
    makeFixtureDataset(join(tmp, "det-b"), { instances: 2 }),
  ]);
  assert.deepEqual(
    a.instances.map((i) => [i.base_commit, i.patch, i.test_patch, i.environment_setup_commit]),
    b.instances.map((i) => [i.base_commit, i.patch, i.test_patch, i.environment_setup_commit]),
  );
  await assert.rejects(
    makeFixtureDataset(join(tmp, "bad"), { instances: 0 }),
    /instances must be an integer from 1 to \d+/,
  );
  await assert.rejects(makeFixtureDataset(join(tmp, "bad"), { instances: MAX_FIXTURE_INSTANCES + 1 }), /from 1 to/);
  assert.ok(MAX_FIXTURE_INSTANCES >= 20);
});

test("SWE-bench fixture with a large history: pack about the size asked, deterministic, instances valid", async () => {
  const MiB = 1024 * 1024;
  const [a, b] = await Promise.all([
    makeFixtureDataset(join(tmp, "hist-a"), { instances: 1, historyBytes: 4 * MiB }),
    makeFixtureDataset(join(tmp, "hist-b"), { instances: 1, historyBytes: 4 * MiB }),
  ]);
  assert.ok(a.history, "history result reported");
  assert.ok(a.history.packBytes > 3 * MiB && a.history.packBytes < 5.5 * MiB, `pack ${a.history.packBytes} bytes`);
  assert.ok(a.history.commits > 50);
  assert.equal(a.instances[0]!.base_commit, b.instances[0]!.base_commit);
  const count = await git(a.repoPath, ["rev-list", "--count", a.instances[0]!.base_commit]);
  assert.ok(Number(count) > a.history.commits, "the calc commits build on the history");
  const inst = a.instances[0]!;
  const work = join(tmp, "work-hist");
  await runOk("git", ["clone", "-q", a.repoPath, work]);
  await checkout(work, inst.base_commit);
  await git(work, ["apply", "-"], inst.test_patch);
  await git(work, ["apply", "-"], inst.patch);
  assertExactly(
    (await pytest(work, directives(inst.test_patch))).statuses,
    { PASSED: [...inst.FAIL_TO_PASS, ...inst.PASS_TO_PASS] },
    "gold on history",
  );
});

test("SWE-bench fixture: 20+ instances, checked at the far end of the history", async () => {
  assert.equal(fixture.instances.length, 25);
  assert.equal(new Set(fixture.instances.map((i) => i.instance_id)).size, 25);
  const inst = fixture.instances[23]!;
  assert.equal(inst.instance_id, "fixture__calc-24");
  const work = join(tmp, "work-big");
  await runOk("git", ["clone", "-q", fixture.repoPath, work]);
  await checkout(work, inst.base_commit);
  await git(work, ["apply", "-"], inst.test_patch);
  const files = directives(inst.test_patch);
  assertExactly(
    (await pytest(work, files)).statuses,
    { FAILED: inst.FAIL_TO_PASS, PASSED: inst.PASS_TO_PASS },
    `${inst.instance_id} before`,
  );
  await git(work, ["apply", "-"], inst.patch);
  assertExactly(
    (await pytest(work, files)).statuses,
    { PASSED: [...inst.FAIL_TO_PASS, ...inst.PASS_TO_PASS] },
    `${inst.instance_id} gold`,
  );
});

test("SWE-smith fixture: snapshot passes, bug patch breaks FAIL_TO_PASS only, reversed patch fixes it", async () => {
  const head = (await git(smith.snapshotPath, ["rev-parse", "main"])).trim();
  assert.equal(head, smith.snapshotCommit);
  assert.equal(smith.snapshotRepo, `swesmith/fixture__calc.${smith.upstreamCommit.slice(0, 8)}`);
  const normalized = await loadDataset(smith.datasetPath);
  assert.equal(normalized.length, 5);
  assert.equal(new Set(normalized.map((i) => specKey(specForInstance(i)))).size, 1, "all tasks share one environment");
  const work = join(tmp, "work-swesmith");
  await runOk("git", ["clone", "-q", smith.snapshotPath, work]);
  // The clean snapshot, once: every test of every task's files passes.
  await checkout(work, smith.snapshotCommit);
  const allFiles = [...new Set(normalized.flatMap((i) => i.FAIL_TO_PASS.map((t) => t.split("::")[0]!)))].sort();
  const clean = (await pytest(work, allFiles)).statuses;
  for (const inst of normalized) {
    assert.equal(inst.task_format, "swesmith");
    assert.equal(inst.repo, smith.snapshotRepo);
    assert.equal(inst.base_commit, smith.snapshotCommit);
    const files = [...new Set(inst.FAIL_TO_PASS.map((t) => t.split("::")[0]!))].sort(); // SWE-smith's directives
    const inFiles = new Map([...clean].filter(([id]) => files.includes(id.split("::")[0]!)));
    assertExactly(inFiles, { PASSED: [...inst.FAIL_TO_PASS, ...inst.PASS_TO_PASS] }, `${inst.instance_id} snapshot`);

    await checkout(work, inst.base_commit);
    await git(work, ["apply", "-"], inst.bug_patch);
    const buggy = await pytest(work, files);
    assertExactly(buggy.statuses, { FAILED: inst.FAIL_TO_PASS, PASSED: inst.PASS_TO_PASS }, `${inst.instance_id} bug`);

    // Gold = reverse of the bug patch: it must restore the snapshot exactly (which passes, as checked above).
    await git(work, ["apply", "-"], inst.patch);
    assert.equal(
      (await git(work, ["status", "--porcelain"])).trim(),
      "",
      `${inst.instance_id}: gold restores the snapshot`,
    );
  }
});
