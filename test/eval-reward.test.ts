/**
 * The rewards API on real environments: grading a patch, grading a live agent sandbox from its diff (tracked,
 * untracked and binary files) in a fresh sandbox, and agents that try to fake a pass (deleting the failing tests,
 * replacing the venv's pytest) getting no reward. The agent's repository must be left exactly as it was.
 */
process.env.PIP_RETRIES ??= "0";

import { describe, it, before } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir, tempHome } from "./helpers.js";
import { makeFixtureDataset, makeSweSmithDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import { loadDataset } from "../src/tasks/index.js";
import { envFor } from "../src/env/environments.js";
import { prepareInstances } from "../src/env/prepare.js";
import { openSandbox } from "../src/env/workspace.js";
import { Sandbox } from "../src/index.js";
import { evaluate, evaluateAttempt, evalSandboxSettings, runInstanceEvaluation } from "../src/eval/index.js";
import type { Instance } from "../src/tasks/types.js";

const home = tempHome("msb-reward-home-");
const work = tempDir("msb-reward-");
let fx: FixtureDataset;
let inst: Instance;
let smith: Instance;
let smithRepos: string;

before(async () => {
  fx = await makeFixtureDataset(join(work, "fx"), { instances: 1 });
  inst = fx.instances[0]!;
  const sm = await makeSweSmithDataset(join(work, "smith"), { tasks: 1 });
  smith = (await loadDataset(sm.datasetPath))[0]!;
  smithRepos = sm.reposDir;
  const built = await Promise.all([
    prepareInstances(fx.instances, { home, reposDir: fx.reposDir, workers: 1 }),
    prepareInstances([smith], { home, reposDir: smithRepos, workers: 1 }),
  ]);
  assert.deepEqual(
    built.flat().filter((r) => r.status === "failed"),
    [],
  );
});

/** A live agent sandbox of the instance, after `script` ran in it. */
async function agent(script: string, stdin?: string, instance: Instance = inst): Promise<Sandbox> {
  const sb = await Sandbox.create({ home, instance });
  assert.equal(sb.labels["instance"], instance.instance_id);
  const r = await sb.exec(script, stdin === undefined ? {} : { stdin });
  if (r.exitCode !== 0) {
    await sb.close();
    assert.fail(`agent script failed: ${r.stderr}`);
  }
  return sb;
}

/** Everything about the agent's repository that evaluating must not change. */
async function repoState(sb: Sandbox): Promise<string> {
  const r = await sb.exec(
    "git status --porcelain --untracked-files=all; md5sum .git/index; git count-objects -v; " +
      "git rev-parse HEAD; git stash list",
  );
  return r.stdout;
}

describe("rewards", { concurrency: 3 }, () => {
  it("a patch: gold is FULL, reward 1; the partial fix PARTIAL (binary 0, fraction: share fixed)", async () => {
    const [gold, partial] = await Promise.all([
      evaluate({ instance: inst, patch: inst.patch }, { home }),
      evaluateAttempt(
        { instance: inst.instance_id, patch: fx.partialFix.patch },
        { home, dataset: fx.datasetPath, reward: "fraction" },
      ),
    ]);
    assert.equal(
      gold.status,
      "FULL",
      JSON.stringify({ grade: gold.grade, error: gold.error, tail: gold.testOutput?.slice(-4000) }),
    );
    assert.equal(gold.resolved, true);
    assert.equal(gold.reward, 1);
    assert.equal(gold.report?.[inst.instance_id]?.resolved, true);
    assert.ok(gold.timings.testsMs > 0 && gold.timings.sandboxMs > 0 && gold.timings.overheadMs > 0);
    assert.ok(gold.timings.totalMs >= gold.timings.testsMs + gold.timings.sandboxMs);

    assert.equal(
      partial.status,
      "PARTIAL",
      JSON.stringify({ grade: partial.grade, tail: partial.testOutput?.slice(-4000) }),
    );
    assert.equal(partial.resolved, false);
    const fixed = fx.partialFix.fixedTests.length;
    assert.equal(partial.reward, fixed / (fixed + fx.partialFix.stillFailingTests.length));
    assert.equal(partial.grade.resolution, "PARTIAL");
  });

  it("a live sandbox: its diff (untracked, binary too) graded in a fresh sandbox; its repo untouched", async () => {
    const sb = await agent(
      "git apply - && mkdir -p calc/extra && printf 'VALUE = 1\\n' > calc/extra/__init__.py && " +
        "printf 'a\\0b\\001\\377' > calc/blob.bin && git add calc/extra",
      inst.patch,
    );
    try {
      const before = await repoState(sb);
      // The sandbox knows its instance id (label); the dataset says what the instance is.
      const r = await evaluate(sb, {
        home,
        dataset: fx.datasetPath,
        reward: (g) => (g.resolution === "FULL" ? 10 : -1),
      });
      assert.equal(r.status, "FULL", r.log);
      assert.equal(r.reward, 10);
      assert.match(r.patch, /^diff --git a\/calc\/blob\.bin b\/calc\/blob\.bin\nnew file mode 100644\n/m);
      assert.match(r.patch, /GIT binary patch/);
      assert.match(r.patch, /\+\+\+ b\/calc\/extra\/__init__\.py/);
      assert.match(r.patch, /\+\+\+ b\/calc\/ops\.py/);
      assert.ok(r.timings.diffMs > 0);
      assert.match(r.log, /Patch for .* taken from sandbox/);
      assert.equal(await repoState(sb), before, "evaluate changed the agent's repository");
      assert.equal(sb.isClosed, false, "the agent's sandbox stays open");
    } finally {
      await sb.close();
    }
  });

  it("an agent that deletes the failing tests gets nothing", async () => {
    // It even sees the new tests (test patch applied), then deletes the failing ones and the whole test file.
    const sb = await agent("git apply - && git rm -qf tests/test_ops.py && rm -rf tests", inst.test_patch);
    try {
      const r = await evaluate(sb, { home, instance: inst });
      assert.equal(r.status, "NO", r.log);
      assert.equal(r.reward, 0);
      assert.equal(r.resolved, false);
      const ts = r.report?.[inst.instance_id]?.tests_status;
      assert.deepEqual(
        ts?.FAIL_TO_PASS.failure,
        inst.FAIL_TO_PASS,
        "the test patch is re-applied: the bug is still there",
      );
    } finally {
      await sb.close();
    }
  });

  it("an agent that replaces the venv's pytest gets nothing", async () => {
    const fake = [...inst.FAIL_TO_PASS, ...inst.PASS_TO_PASS].map((t) => `PASSED ${t}`).join("\n");
    const sb = await agent(
      `printf '#!/bin/sh\\ncat <<"EOF"\\n${fake}\\nEOF\\n' > /opt/venv/bin/pytest && chmod +x /opt/venv/bin/pytest`,
    );
    try {
      // In its own sandbox, the fake works...
      const own = await sb.exec("pytest -rA tests/test_ops.py");
      assert.match(own.stdout, new RegExp(`PASSED ${inst.FAIL_TO_PASS[0]!.replace(/[[\]]/g, "\\$&")}`));
      // ...but the verdict comes from a fresh sandbox: no change in /testbed, nothing to grade.
      const noChange = await evaluate(sb, { home, instance: inst });
      assert.equal(noChange.status, "NO");
      assert.equal(noChange.reward, 0);
      assert.equal(noChange.testOutput, null, "an empty patch is not run (harness rule)");
      assert.equal(noChange.patch, "");
      // With a (wrong) code change too, the real tests run and fail.
      await sb.exec("printf '\\n# touched\\n' >> calc/ops.py");
      const r = await evaluate(sb, { home, instance: inst });
      assert.equal(r.status, "NO", r.log);
      assert.equal(r.reward, 0);
      assert.match(r.testOutput ?? "", /FAILED tests\/test_ops\.py::/);
    } finally {
      await sb.close();
    }
  });

  it("a live SWE-smith sandbox (bug committed at start): only the agent's fix is graded", async () => {
    assert.ok(smith.bug_patch, "a SWE-smith task carries its bug patch");
    const sb = await agent("git apply -", smith.patch, smith);
    try {
      const r = await evaluate(sb, { home, instance: smith });
      assert.equal(r.status, "FULL", r.log);
      assert.equal(r.reward, 1);
      const headers = (p: string): string[] =>
        p.split("\n").filter((l) => l.startsWith("diff --git ") || /^[-+](?![-+])/.test(l));
      assert.deepEqual(headers(r.patch), headers(smith.patch), "the diff is the fix, not the bug");
    } finally {
      await sb.close();
    }
  });

  it("a sandbox that dies during the tests is that attempt's error, not a hang or a crash", async () => {
    const settings = await evalSandboxSettings(home, envFor(inst, {}).spec);
    const fresh = await openSandbox({ home, instance: inst, ...settings });
    const started = performance.now();
    const pending = runInstanceEvaluation({ home, instance: inst, patch: inst.patch, sandbox: fresh });
    // eval.sh re-installs the package first (seconds): the sandbox is closed under it.
    const killer = setInterval(() => {
      void fresh
        .exec("pgrep -f 'pip install' >/dev/null")
        .then((r) => {
          if (r.exitCode === 0) void fresh.close();
        })
        .catch(() => {});
    }, 300);
    const r = await pending;
    clearInterval(killer);
    assert.equal(r.status, "error");
    assert.ok(r.error?.kind === "Tests Errored" || r.error?.kind === "Sandbox Failed", JSON.stringify(r.error));
    assert.ok(performance.now() - started < 120_000);
    assert.equal(fresh.isClosed, true);
  });

  it("errors: a patch that does not apply is ERROR with reward 0; misuse throws", async () => {
    const r = await evaluate(
      { instance: inst, patch: "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n" },
      { home },
    );
    assert.equal(r.status, "ERROR");
    assert.equal(r.error?.kind, "Patch Apply Failed");
    assert.equal(r.reward, 0);
    assert.equal(r.report, null);
    assert.match(r.log, />>>>> Patch Apply Failed/);

    await assert.rejects(evaluate({ instance: "fixture__calc-1", patch: "x" }, { home }), /pass opts\.dataset/);
    const plain = await Sandbox.create({ home });
    try {
      await assert.rejects(evaluate(plain, { home }), /which instance\?/);
    } finally {
      await plain.close();
    }
    await assert.rejects(evaluate(plain, { home, instance: inst }), /is closed/);
  });
});
