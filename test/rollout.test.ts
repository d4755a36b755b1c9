/**
 * The rollout engine on a real environment of the fixture dataset (one environment, built once for the file): a GRPO
 * group of 8 with the rewards each attempt earns, killed sandboxes and timeouts as infrastructure failures, in-place
 * rewards, forks, prewarm and the warm pool, the gold pre-check, and nothing left behind.
 */
process.env.PIP_RETRIES ??= "0";

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { envFor, nodeCacheFor } from "../src/env/environments.js";
import { prepareInstances } from "../src/env/prepare.js";
import { makeFixtureDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import { InvalidInputError, LimitError, NotFoundError, SandboxLostError, TaskInvalidError } from "../src/errors.js";
import { type Rollout, RolloutEngine, type RolloutOutcome } from "../src/index.js";
import { cgroupSupport, type SandboxCgroups } from "../src/sandbox/limits.js";
import type { Instance } from "../src/tasks/types.js";
import { processesMatching, scratchDirs, tempDir, tempHome } from "./helpers.js";

const home = tempHome("msb-rollout-home-");
const work = tempDir("msb-rollout-");
let fx: FixtureDataset;
let inst: Instance;
let endless: Instance;
let engine: RolloutEngine;

before(async () => {
  fx = await makeFixtureDataset(join(work, "fx"), { instances: 1, endless: true });
  inst = fx.instances[0]!;
  endless = fx.instances.find((i) => i.instance_id === fx.endlessInstanceId)!;
  assert.equal(envFor(endless, {}).key, envFor(inst, {}).key, "the endless task shares the environment");
  const built = await prepareInstances([inst], { home, reposDir: fx.reposDir, workers: 1 });
  assert.deepEqual(
    built.filter((r) => r.status === "failed"),
    [],
  );
  engine = new RolloutEngine({ home, dataset: fx.datasetPath, rewardTimeoutMs: 300_000 });
});

after(async () => {
  await engine?.close();
  assert.deepEqual(processesMatching(home), [], "no process outlives the engine");
  assert.deepEqual(scratchDirs(home), [], "no sandbox directory outlives the engine");
  const snaps = join(home, "snapshots");
  assert.deepEqual(existsSync(snaps) ? readdirSync(snaps) : [], [], "no fork snapshot outlives the engine");
});

/** What each attempt of the group does (the test plays the policy). */
const apply = (patch: string) => async (r: Rollout) => {
  const res = await r.exec("git apply -", { stdin: patch });
  assert.equal(res.exitCode, 0, `rollout ${r.repetition}: git apply: ${res.stdout}${res.stderr}`);
};
const explain = (o: RolloutOutcome): string => JSON.stringify({ ...o, patch: o.patch.slice(0, 300) });

describe("rollouts", { concurrency: 1 }, () => {
  it("a GRPO group of 8: each rollout gets exactly what it earns; a killed one is an infra failure", async (t) => {
    const group = await engine.startGroup({ instance: inst.instance_id, n: 8 });
    t.after(() => group.close());
    assert.equal(group.rollouts.length, 8);
    assert.deepEqual(
      group.rollouts.map((r) => [r.repetition, r.trajectoryId, r.state]),
      Array.from({ length: 8 }, (_, i) => [i, `${inst.instance_id}@${i}`, "ready"]),
    );
    assert.equal(new Set(group.rollouts.map((r) => r.sandbox!.id)).size, 8, "eight sandboxes");
    assert.ok(group.timings.readyMs >= group.timings.startMs && group.timings.startMs > 0);
    const gold = apply(inst.patch!);
    const plans: ((r: Rollout) => Promise<unknown>)[] = [
      gold, // 0: fixes the bug
      apply(fx.partialFix.patch), // 1: fixes one of the two failing tests
      async () => {}, // 2: does nothing
      gold, // 3
      (r) => r.exec("rm -rf tests && git add -A"), // 4: deletes the tests (the fresh sandbox restores them)
      (r) => r.exec("printf 'x = 1\\n' > notes.txt"), // 5: an unrelated new file
      gold, // 6
      async (r) => process.kill(r.sandbox!.pid1, "SIGKILL"), // 7: its sandbox is killed
    ];
    await Promise.all(group.rollouts.map((r, i) => plans[i]!(r)));
    const outcomes = await Promise.all(group.rollouts.map((r) => r.reward()));
    assert.deepEqual(
      outcomes.map((o) => o.reward),
      [1, 0, 0, 1, 0, 0, 1, null],
      outcomes.map(explain).join("\n"),
    );
    assert.deepEqual(
      outcomes.map((o) => o.status),
      [...Array(7).fill("scored"), "infra_failure"],
    );
    assert.deepEqual(
      outcomes.map((o) => o.resolution),
      ["FULL", "PARTIAL", null, "FULL", "NO", "NO", "FULL", null],
    );
    const f2p = fx.partialFix.fixedTests.length + fx.partialFix.stillFailingTests.length;
    assert.deepEqual(outcomes[0]!.failToPass, { passed: f2p, total: f2p });
    assert.deepEqual(outcomes[1]!.failToPass, { passed: fx.partialFix.fixedTests.length, total: f2p });
    assert.equal(outcomes[0]!.passToPass!.passed, outcomes[0]!.passToPass!.total);
    assert.equal(outcomes[2]!.patch, "", "an empty diff is a real 0, not run");
    assert.ok(outcomes[0]!.timings.testsMs > 0 && outcomes[0]!.timings.totalMs >= outcomes[0]!.timings.testsMs);
    assert.equal(outcomes[7]!.failure?.kind, "sandbox_lost", explain(outcomes[7]!));
    assert.equal(group.rollouts[7]!.state, "lost");
    await assert.rejects(group.rollouts[7]!.exec("true"), SandboxLostError);
    // Rewards leave the rollouts running (fresh mode), addressable by group and repetition.
    assert.equal(engine.rolloutOf(group.id, 3).id, group.rollouts[3]!.id);
    assert.equal((await engine.rollout(group.rollouts[0]!.id).exec("git diff --stat")).exitCode, 0);
    await engine.closeGroup(group.id);
    assert.throws(() => engine.group(group.id), NotFoundError);
    assert.deepEqual(processesMatching(group.rollouts[0]!.sandbox!.id), []);
  });

  it("a sandbox killed mid-command: the command throws SandboxLostError, the reward is no 0", async (t) => {
    const group = await engine.startGroup({ instance: inst, n: 1 });
    t.after(() => group.close());
    const [r] = group.rollouts;
    await r!.exec("git apply -", { stdin: inst.patch! });
    const running = r!.exec("sleep 30");
    await sleep(300);
    process.kill(r!.sandbox!.pid1, "SIGKILL");
    await assert.rejects(running, (e: Error) => e instanceof SandboxLostError && /sandbox_lost/.test(e.message));
    const o = await r!.reward();
    assert.equal(o.status, "infra_failure");
    assert.equal(o.reward, null);
    assert.equal(r!.info().failure?.kind, "sandbox_lost");
    await group.close();
  });

  it("tests that never end are a 0 (eval_timeout); an unused rollout past its time limit is not", async (t) => {
    const tests = await engine.startGroup({ instance: endless, n: 1 });
    t.after(() => tests.close());
    await tests.rollouts[0]!.exec("git apply -", { stdin: endless.patch! });
    const timedOut = await tests.rollouts[0]!.reward({ timeoutMs: 20_000 });
    assert.equal(timedOut.status, "scored", explain(timedOut));
    assert.equal(timedOut.reason, "eval_timeout");
    assert.equal(timedOut.reward, 0);
    await tests.close();

    const short = await engine.startGroup({ instance: inst, n: 1, ttlMs: 200 });
    t.after(() => short.close());
    await sleep(800);
    const r = short.rollouts[0]!;
    assert.equal(r.state, "lost");
    await assert.rejects(r.exec("true"), SandboxLostError);
    const o = await r.reward();
    assert.equal(o.failure?.kind, "timeout");
    assert.match(o.failure!.message, /time limit/);
  });

  it("in place (the paper's way): graded in the rollout's own sandbox, kept open; test edits are reset", async (t) => {
    const group = await engine.startGroup({ instance: inst, n: 2 });
    t.after(() => group.close());
    const [fixer, faker] = group.rollouts;
    await fixer!.exec("git apply -", { stdin: inst.patch! });
    // The faker rewrites every test into a pass: eval.sh resets the test files before running them.
    await faker!.exec("for f in tests/test_*.py; do printf 'def test_ok():\\n    pass\\n' > $f; done");
    const [fixed, faked] = await Promise.all([
      fixer!.reward({ mode: "in_place" }),
      faker!.reward({ mode: "in_place" }),
    ]);
    assert.equal(fixed.mode, "in_place");
    assert.equal(fixed.reward, 1, explain(fixed));
    assert.equal(faked.reward, 0, explain(faked));
    assert.equal(faked.status, "scored");
    assert.equal(fixer!.state, "ready");
    // eval.sh ran where the faker worked: it reset the test file the test patch touches (and only that one).
    const touched = [...inst.test_patch!.matchAll(/^diff --git a\/(\S+)/gm)].map((m) => m[1]!);
    const stillFake = (await faker!.exec("git diff --name-only -- tests")).stdout.trim().split("\n");
    assert.ok(touched.length > 0 && stillFake.length > 0);
    for (const f of touched) assert.ok(!stillFake.includes(f), `${f} was reset in the rollout's sandbox`);
  });

  it("fork: children are new rollouts that see the parent's state and diverge; the parent runs on", async (t) => {
    const group = await engine.startGroup({ instance: inst, n: 2 });
    t.after(() => group.close());
    const parent = group.rollouts[1]!;
    await parent.exec("git apply - && echo parent > /tmp/mark", { stdin: fx.partialFix.patch });
    const { session } = await parent.sessions.create();
    await session.run("export STEP=7");
    const kids = await parent.fork(3);
    assert.deepEqual(
      kids.map((k) => [k.repetition, k.parent, k.groupId]),
      [2, 3, 4].map((rep) => [rep, parent.id, group.id]),
    );
    assert.equal(engine.rolloutOf(group.id, 4), kids[2]);
    for (const k of kids) assert.equal((await k.exec("cat /tmp/mark")).stdout, "parent\n");
    await kids[0]!.exec("git checkout -- . && git apply -", { stdin: inst.patch! }); // finishes the fix
    await kids[1]!.exec("git checkout -- ."); // undoes everything
    await parent.exec("echo later > /tmp/later");
    assert.equal((await kids[2]!.exec("ls /tmp")).stdout, "mark\n", "the parent's later writes stay its own");
    assert.equal((await session.run("echo $STEP")).output, "7\n", "the parent's session survived the fork");
    const [a, b, c, p] = await Promise.all([...kids.map((k) => k.reward()), parent.reward()]);
    assert.deepEqual(
      [a, b, c, p].map((o) => [o.repetition, o.resolution, o.reward]),
      [
        [2, "FULL", 1],
        [3, null, 0],
        [4, "PARTIAL", 0],
        [1, "PARTIAL", 0],
      ],
      [a, b, c, p].map((o) => explain(o!)).join("\n"),
    );
    await group.close();
    assert.throws(() => kids[0]!.files, /closed/);
  });

  it("reset: back to the start in place, same sandbox; then rewards are a fresh rollout's; checkpoints", async (t) => {
    const group = await engine.startGroup({ instance: inst, n: 2 });
    t.after(() => group.close());
    const [r, fresh] = group.rollouts as [Rollout, Rollout];
    const sandboxId = r.sandbox!.id;
    await r.exec("git apply - && echo mark > /tmp/mark && (sleep 1000 &)", { stdin: inst.patch! });
    await r.sessions.create();
    assert.equal((await r.reward()).reward, 1);
    await r.reset();
    assert.equal(r.sandbox!.id, sandboxId, "the same sandbox");
    assert.equal(r.outcome, undefined, "no outcome since the reset");
    const look = "git status --short; ls /tmp; ps -e -o comm= | grep -c sleep";
    assert.equal((await r.exec(look)).stdout, (await fresh.exec(look)).stdout);
    assert.deepEqual(r.sessions.names(), []);
    // The same work after a reset earns what it earns in a fresh rollout.
    await Promise.all([r, fresh].map(apply(fx.partialFix.patch)));
    const [after, first] = await Promise.all([r.reward(), fresh.reward()]);
    const graded = (o: RolloutOutcome) => [o.status, o.reward, o.reason, o.resolution, o.failToPass, o.passToPass];
    assert.deepEqual(graded(after), graded(first), `${explain(after)}\n${explain(first)}`);
    assert.equal(after.resolution, "PARTIAL");
    // A checkpoint keeps the half fix: the rollout goes on, comes back to it in place; a fork starts from it.
    const cp = await r.checkpoint();
    await r.exec("git checkout -- . && git apply -", { stdin: inst.patch! });
    assert.equal((await r.reward()).resolution, "FULL");
    const [child] = await r.fork(1, { checkpoint: cp });
    await r.reset({ checkpoint: cp });
    const [back, forked] = await Promise.all([r.reward(), child!.reward()]);
    assert.deepEqual([back.resolution, forked.resolution], ["PARTIAL", "PARTIAL"]);
    await group.dropCheckpoint(cp);
    await assert.rejects(r.reset({ checkpoint: cp }), { name: "CheckpointNotFoundError", message: /was dropped/ });
    await assert.rejects(r.fork(1, { checkpoint: `${cp}0` }), {
      name: "CheckpointNotFoundError",
      message: /no checkpoint/,
    });
    assert.equal((await r.exec("git diff --stat | tail -1")).exitCode, 0, "a refused reset changes nothing");
  });

  it("the gold pre-check: checked once per environment and stored; a task whose gold fails is refused", async () => {
    const checked = await engine.goldCheck(inst.instance_id);
    assert.equal(checked.passed, true);
    assert.equal(checked.source, "gold-check");
    const file = join(home, "rollout", "gold", checked.envKey, `${inst.instance_id}.json`);
    assert.ok(existsSync(file));
    const again = await engine.goldCheck(inst.instance_id);
    assert.equal(again.checkedAt, checked.checkedAt, "the stored verdict is reused");
    const broken: Instance = { ...inst, instance_id: "fixture__calc-1-broken-gold", patch: fx.partialFix.patch };
    await assert.rejects(engine.startGroup({ instance: broken, n: 2, goldCheck: true }), TaskInvalidError);
    assert.equal(engine.liveRollouts, 0, "a refused task starts nothing");
    const ok = await engine.startGroup({ instance: inst, n: 1, goldCheck: true });
    assert.equal(ok.rollouts[0]!.state, "ready");
    assert.equal((await engine.goldCheck(inst)).checkedAt, checked.checkedAt);
    await ok.close();
  });

  it("prewarm: the layer is materialized ahead and the pool hands out started sandboxes like fresh ones", async () => {
    const warm = new RolloutEngine({ home, dataset: fx.datasetPath, warmPool: { max: 3 } });
    try {
      const key = envFor(inst, {}).key;
      const cache = nodeCacheFor(home);
      await cache.evict({ maxBytes: 0 });
      assert.equal(await cache.has(key), false, "the layer starts evicted");
      const report = await warm.prewarm([inst.instance_id], { sandboxes: 5 });
      assert.deepEqual(
        report.tasks.map((t) => [t.instanceId, t.layer, t.warmSandboxes, t.error]),
        [[inst.instance_id, "materialized", 3, undefined]],
      );
      assert.deepEqual(report.pool, { size: 3, max: 3 }, "the pool holds no more than its max");
      assert.equal(await cache.has(key), true);
      assert.deepEqual((await cache.evict({ maxBytes: 0 })).evicted, [], "a prewarmed layer is held");
      const before = Date.now();
      const group = await warm.startGroup({ instance: inst.instance_id, n: 4 });
      assert.deepEqual(
        group.rollouts.map((r) => r.fromPool),
        [true, true, true, false],
      );
      assert.equal(warm.poolSize, 0);
      for (const r of group.rollouts.slice(0, 3)) assert.ok(r.sandbox!.createdAt.getTime() <= before);
      // Indistinguishable: same labels, same environment, same clean tree, nothing run before.
      const look = "env | grep -v ^HOSTNAME= | sort; git status --porcelain; git log -1 --format=%H; ls -A /tmp ~";
      const seen = await Promise.all(group.rollouts.map((r) => r.exec(look)));
      for (const s of seen) assert.equal(s.stdout, seen[3]!.stdout);
      for (const r of group.rollouts) assert.deepEqual(r.sandbox!.labels, group.rollouts[3]!.sandbox!.labels);
      await group.close();
      const again = await warm.prewarm([inst.instance_id], {});
      assert.equal(again.tasks[0]!.layer, "cached");
    } finally {
      await warm.close();
    }
    assert.deepEqual(processesMatching(home), [], "pool sandboxes are gone with their engine");
  });

  it("a warm pool's sandboxes expire; limits and bad input are clear errors", async () => {
    const short = new RolloutEngine({
      home,
      dataset: fx.datasetPath,
      warmPool: { max: 2, ttlMs: 300 },
      maxRollouts: 2,
    });
    try {
      const r = await short.prewarm([inst.instance_id], { sandboxes: 2 });
      assert.equal(r.tasks[0]!.warmSandboxes, 2);
      await sleep(1000);
      assert.equal(short.poolSize, 0);
      await assert.rejects(short.startGroup({ instance: inst.instance_id, n: 3 }), LimitError);
      await assert.rejects(short.startGroup({ instance: inst.instance_id, n: 0 }), /n must be an integer/);
      await assert.rejects(short.startGroup({ instance: "no-such-task", n: 1 }), NotFoundError);
      const bad = await short.prewarm(["no-such-task"]);
      assert.match(bad.tasks[0]!.error ?? "", /unknown task/);
      // A pool or a prewarm that would hold nothing is refused, never a silent no-op.
      for (const max of [0, -1, 1.5])
        assert.throws(() => new RolloutEngine({ home, warmPool: { max } }), /warmPool\.max must be a whole number/);
      for (const sandboxes of [0, -2, 2.5])
        await assert.rejects(short.prewarm([inst.instance_id], { sandboxes }), /sandboxes must be a whole number/);
      await assert.rejects(engine.prewarm([inst.instance_id], { sandboxes: 2 }), (e: Error) => {
        assert.ok(e instanceof InvalidInputError);
        assert.match(e.message, /no warm pool to hold them: start the server with --warm-pool N/);
        return true;
      });
      assert.equal((await engine.prewarm([inst.instance_id])).tasks[0]!.warmSandboxes, 0, "layers only");
    } finally {
      await short.close();
    }
  });

  it("fresh rewards take turns: at most maxFreshRewards sandboxes at once, the others wait, all graded", async () => {
    assert.throws(() => new RolloutEngine({ home, maxFreshRewards: 0 }), InvalidInputError);
    const lib = new RolloutEngine({ home, dataset: fx.datasetPath, maxFreshRewards: 1, rewardTimeoutMs: 300_000 });
    try {
      const group = await lib.startGroup({ instance: inst.instance_id, n: 3 });
      try {
        await Promise.all(group.rollouts.map(apply(inst.patch!)));
        let [running, waiting] = [0, 0];
        const watch = setInterval(() => {
          running = Math.max(running, lib.freshRewards.running);
          waiting = Math.max(waiting, lib.freshRewards.waiting);
        }, 2);
        const outcomes = await Promise.all(group.rollouts.map((r) => r.reward())).finally(() => clearInterval(watch));
        assert.deepEqual(
          outcomes.map((o) => [o.status, o.reward]),
          [
            ["scored", 1],
            ["scored", 1],
            ["scored", 1],
          ],
          outcomes.map(explain).join("\n"),
        );
        assert.deepEqual([running, waiting], [1, 2], "one reward sandbox at a time; the other two waited");
        assert.deepEqual(lib.freshRewards, { running: 0, waiting: 0 });
      } finally {
        await group.close();
      }
    } finally {
      await lib.close();
    }
  });

  it("a library engine's sandboxes fit the machine together: processes and memory derived from it, not fixed", {
    skip: cgroupSupport().pids && cgroupSupport().memory ? false : "no memory and pids cgroups for this user",
  }, async () => {
    const lib = new RolloutEngine({ home, dataset: fx.datasetPath, warmPool: { max: 2 } });
    try {
      // Every rollout, every pool sandbox and every fresh reward at once, each at its limits, is what the host holds.
      const admitted = lib.maxRollouts + 2 + lib.maxFreshRewards;
      const group = await lib.startGroup({ instance: inst.instance_id, n: 1 });
      try {
        const sb = group.rollouts[0]!.sandbox!;
        // What the kernel enforces (the sandbox's own cgroups), against what the kernel has (/proc).
        const { cgroups } = JSON.parse(readFileSync(sb.paths.state, "utf8")) as { cgroups: SandboxCgroups };
        const pids = Number(readFileSync(join(cgroups.pids!, "pids.max"), "utf8"));
        const memory = Number(readFileSync(join(cgroups.memory!, "memory.limit_in_bytes"), "utf8"));
        const pidMax = Number(readFileSync("/proc/sys/kernel/pid_max", "utf8"));
        const kb = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync("/proc/meminfo", "utf8"))![1];
        const available = Number(kb) * 1024;
        assert.ok(pids * admitted <= pidMax, `${admitted} sandboxes of ${pids} processes, pid_max ${pidMax}`);
        // (MemAvailable now, not at the engine's start: a little slack for what others took meanwhile.)
        const gib = (n: number): string => `${(n / 1024 ** 3).toFixed(1)} GiB`;
        assert.ok(memory * admitted <= available * 1.1, `${admitted} of ${gib(memory)}, ${gib(available)} available`);
        assert.deepEqual([sb.limits.pids, sb.limits.memoryBytes], [pids, memory]);
      } finally {
        await group.close();
      }
      if (lib.maxRollouts < 256)
        await assert.rejects(lib.startGroup({ instance: inst.instance_id, n: lib.maxRollouts + 1 }), LimitError);
    } finally {
      await lib.close();
    }
  });
});
