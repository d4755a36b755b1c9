/**
 * A policy that tries to turn its 0 into an "infrastructure failure" (a reward masked from the loss), played as
 * rollouts on a real environment: each attack's reward must be a scored 0 with the reason that names it, never
 * infra_failure. Also: replacing git, bash and python changes nothing in a fresh reward, and a patch that brings
 * its own conftest.py is flagged beside its grade.
 */
process.env.PIP_RETRIES ??= "0";

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { tempDir, tempHome } from "./helpers.js";
import { makeFixtureDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import { prepareInstances } from "../src/env/prepare.js";
import { RolloutEngine, type Rollout, type RolloutOutcome } from "../src/rollout/index.js";
import { SandboxLostError } from "../src/errors.js";
import type { ExecResult } from "../src/sandbox/exec.js";
import type { Instance } from "../src/tasks/types.js";

const home = tempHome("msb-attacks-home-");
const work = tempDir("msb-attacks-");
let fx: FixtureDataset;
let inst: Instance;
let engine: RolloutEngine;

before(async () => {
  fx = await makeFixtureDataset(join(work, "fx"), { instances: 1 });
  inst = fx.instances[0]!;
  const built = await prepareInstances([inst], { home, reposDir: fx.reposDir, workers: 1 });
  assert.deepEqual(
    built.filter((r) => r.status === "failed"),
    [],
  );
  engine = new RolloutEngine({
    home,
    dataset: fx.datasetPath,
    rewardTimeoutMs: 120_000,
    warmPool: { max: 4 },
    limits: { memoryBytes: 384 * 1024 ** 2 },
  });
});

after(() => engine?.close());

const explain = (o: RolloutOutcome): string => JSON.stringify({ ...o, patch: o.patch.slice(0, 300) });

/** One rollout that runs `attack`, then its reward. */
async function attacked(attack: (r: Rollout) => Promise<unknown>, timeoutMs?: number): Promise<RolloutOutcome> {
  const group = await engine.startGroup({ instance: inst, n: 1 });
  try {
    const r = group.rollouts[0]!;
    await attack(r);
    return await r.reward(timeoutMs ? { timeoutMs } : {});
  } finally {
    await group.close();
  }
}

/** Prepend Python to the package's first module: it runs when the tests import it. */
const atImport = (code: string) => (r: Rollout) =>
  r.exec(
    "f=$(ls calc/*.py | grep -v __init__ | head -1); " +
      `printf '%s\\n' ${JSON.stringify(code)} | cat - "$f" > x && mv x "$f"`,
  );

function assertZero(o: RolloutOutcome, reason: string): void {
  assert.equal(o.status, "scored", explain(o));
  assert.equal(o.reward, 0, explain(o));
  assert.equal(o.reason, reason, explain(o));
}

describe("reward attacks", { concurrency: 4 }, () => {
  it("the fix is nowhere in a rollout: no later commit or fixed blob, no test patch, no dataset row", async () => {
    const src = join(fx.reposDir, "fixture", "calc");
    const later = execFileSync("git", ["-C", src, "rev-list", "--all", "--not", inst.base_commit], { encoding: "utf8" })
      .split("\n")
      .filter(Boolean);
    assert.ok(later.length > 0, "the source repository has commits after the base (the fix among them)");
    const group = await engine.startGroup({ instance: inst, n: 1 });
    try {
      const r = group.rollouts[0]!;
      const sh = async (cmd: string, stdin?: string) => (await r.exec(cmd, stdin ? { stdin } : {})).stdout.trim();
      assert.equal(await sh("git rev-parse HEAD"), inst.base_commit);
      assert.equal(await sh("git rev-list --all | wc -l"), await sh("git rev-list HEAD | wc -l"), "no ref beyond HEAD");
      const found = await sh("while read -r c; do git cat-file -e $c 2>/dev/null && echo $c; done", later.join("\n"));
      assert.equal(found, "", "no commit after the base, in any form");
      // What the fixed files would hash to, worked out in a copy: none of those blobs is in the object store.
      const fixed = await sh(
        "rm -rf /tmp/probe && cp -a /testbed /tmp/probe && cd /tmp/probe && git apply && " +
          "git hash-object $(git diff --name-only) && rm -rf /tmp/probe",
        inst.patch! + inst.test_patch!,
      );
      assert.equal(fixed.split("\n").length, 2, fixed);
      assert.equal(await sh("while read -r b; do git cat-file -e $b 2>/dev/null && echo $b; done", fixed), "");
      const [test] = inst.FAIL_TO_PASS!.map((t) => t.split("::").pop()!);
      const places = '/testbed /tmp "$HOME" /home /opt /etc/environment';
      const seen = () => sh(`{ env; grep -rhoF -- ${test} ${places}; } 2>/dev/null | grep -cF -- ${test}`);
      assert.equal(await seen(), "0", `a FAIL_TO_PASS test's name (${test}) is in the sandbox`);
      await r.files.write("/tmp/planted", `${test}\n`);
      assert.equal(await seen(), "1", "the search finds what is there");
    } finally {
      await group.close();
    }
  });

  it("deleting /testbed/.git is a 0 (testbed_broken)", async () => {
    assertZero(await attacked((r) => r.exec("rm -rf /testbed/.git")), "testbed_broken");
  });

  it("a background loop that kills every git is a 0 (testbed_broken)", async () => {
    const killer =
      'while :; do for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = git ] && ' +
      'kill -9 "$(basename "$p")" 2>/dev/null; done; done';
    const o = await attacked(async (r) => {
      // 24 MiB of noise to add: taking the diff then runs git for far longer than one sweep of the killer, so the
      // killer always wins (a git that finished between two sweeps would leave nothing for it to kill).
      await r.exec("head -c 25165824 /dev/urandom > /testbed/noise.bin");
      await r.sessions.create("killer");
      await r.sessions.run("killer", `(${killer}) >/dev/null 2>&1 &`);
    });
    assertZero(o, "testbed_broken");
  });

  it("a patch that kills its process group is a 0 (eval_crash)", async () => {
    const o = await attacked(atImport("import os, signal; os.killpg(0, signal.SIGKILL)"));
    assertZero(o, "eval_crash");
  });

  it("a patch that spins until the timeout is a 0 (eval_timeout)", async () => {
    assertZero(await attacked(atImport("while True: pass"), 15_000), "eval_timeout");
  });

  it("a patch that fills the reward sandbox's memory is a 0 (eval_oom)", async () => {
    const o = await attacked(atImport("x = bytearray(2 * 1024 ** 3)"));
    assertZero(o, "eval_oom");
  });

  it("raising pid 1's oom_score_adj, then filling memory, is a 0 whoever the OOM killer picks", async () => {
    let raised = "";
    let hog: unknown;
    const o = await attacked(async (r) => {
      await r.exec("git apply -", { stdin: fx.partialFix.patch });
      raised = (await r.exec("echo 1000 > /proc/1/oom_score_adj; cat /proc/1/oom_score_adj")).stdout.trim();
      hog = await r.exec("python -c 'x = bytearray(2 * 1024 ** 3)'").catch((e: Error) => e);
    });
    const said = `pid 1's oom_score_adj: ${raised}; the hog's command: ${JSON.stringify(hog)}`;
    if (hog instanceof SandboxLostError) {
      // The OOM killer took pid 1: the sandbox ended by the agent's doing, its patch with it.
      assertZero(o, "sandbox_oom");
    } else {
      // It took the hog: the sandbox lives on and its patch (half a fix) is graded as it is.
      assert.equal((hog as ExecResult).limit, "memory", said);
      assertZero(o, "graded");
      assert.equal(o.resolution, "PARTIAL", `${said}\n${explain(o)}`);
    }
  });

  it("a client allowed 1 sandbox cannot start a group of 16 or fork 16; another's prewarm leaves mine", async () => {
    const alice = { name: "alice", maxSandboxes: 1 };
    await assert.rejects(engine.startGroup({ instance: inst, n: 16, owner: alice }), /alice holds 0 of at most 1/);
    const g = await engine.startGroup({ instance: inst, n: 1, owner: alice });
    await assert.rejects(g.rollouts[0]!.fork(16), /sandbox limit reached: alice/);
    await g.close();
    const bob = { name: "bob", maxSandboxes: 4 };
    const mine = await engine.prewarm([inst], { sandboxes: 1, owner: alice });
    assert.equal(mine.tasks[0]!.warmSandboxes, 1);
    const theirs = await engine.prewarm([inst], { sandboxes: 2, owner: bob });
    assert.equal(theirs.tasks[0]!.warmSandboxes, 2, "bob's pool is his own");
    await assert.rejects(engine.startGroup({ instance: inst, n: 2, owner: alice }), /alice holds 1 of at most 1/);
    const taken = await engine.startGroup({ instance: inst, n: 2, owner: bob });
    assert.deepEqual(
      taken.rollouts.map((r) => r.fromPool),
      [true, true],
    );
    await taken.close();
    await engine.prewarm([], { owner: bob });
    assert.equal(engine.sandboxesOf("alice"), 1, "alice's warm sandbox is still hers, untouched");
    // Her warm sandbox is part of her budget, not in its way: a group of 1 takes it.
    const hers = await engine.startGroup({ instance: inst, n: 1, owner: alice });
    assert.deepEqual(
      hers.rollouts.map((r) => r.fromPool),
      [true],
    );
    assert.equal(engine.sandboxesOf("alice"), 1);
    await hers.close();
  });

  it("replacing git, bash and python (PATH and venv) changes nothing in a fresh reward", async () => {
    const fake = "printf '#!/bin/sh\\necho PASSED; exit 0\\n' > /tmp/fake && chmod +x /tmp/fake";
    const shadow = `${fake} && for t in git bash python python3 pytest; do cp /tmp/fake /opt/venv/bin/$t; done`;
    const [gold, faked] = await Promise.all([
      attacked(async (r) => {
        await r.exec("git apply -", { stdin: inst.patch! });
        await r.exec(shadow);
      }),
      attacked((r) => r.exec(shadow)),
    ]);
    assert.equal(gold.reward, 1, explain(gold));
    assert.equal(gold.reason, "graded");
    assertZero(faked, "empty_patch");
  });

  it("a patch that brings its own conftest.py is flagged beside its grade", async () => {
    const hook =
      "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n" +
      "    out = yield\n    r = out.get_result()\n    r.outcome = 'passed'\n";
    const o = await attacked((r) => r.files.write("/testbed/tests/conftest.py", hook));
    assert.equal(o.status, "scored", explain(o));
    assert.deepEqual(
      o.flags.map((f) => [f.kind, f.path]),
      [["conftest", "tests/conftest.py"]],
      explain(o),
    );
  });
});
