/**
 * The rollout API over HTTP on a real `minisandbox serve` process (one fixture environment, built once): the
 * TypeScript SDK (groups, commands, files, rewards, forks, lost sandboxes, owners, bad input), and the Python package
 * (`minisandbox.rl`) driving a GRPO group of 8 with its agent loop against a scripted OpenAI-compatible policy served
 * here on loopback (the policy is the only stand-in), its JSONL records and token masks, the SkyRL and verl adapters,
 * and mini-swe-agent's own agent from its mirror (or MINI_SWE_AGENT_REPO: a checkout or git repository).
 */
process.env.PIP_RETRIES ??= "0";

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { RolloutClient } from "../src/client/index.js";
import { prepareInstances } from "../src/env/prepare.js";
import {
  CheckpointNotFoundError,
  InvalidInputError,
  NotFoundError,
  SandboxLostError,
  TaskInvalidError,
} from "../src/errors.js";
import { makeFixtureDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import type { Instance } from "../src/tasks/types.js";
import { run } from "../src/util/run.js";
import { cachedVenv, processesMatching, scratchDirs, tempDir, tempHome } from "./helpers.js";
import { call, type Json, type ServeProcess, startServe } from "./serve-process.js";
import { mirror } from "./agent-clients.js";

const ADMIN = "rollout-admin-token-0123456789";
const BROKEN = "fixture__calc-1-broken-gold";
const OTHER = "other-principal-token-0123456789";
/** A principal allowed one sandbox: plain sandboxes, rollouts, forks and warm pool sandboxes together. */
const CAPPED = "capped-principal-token-0123456789";
const home = tempHome("msb-rollout-http-");
const work = tempDir("msb-rollout-http-work-");
const PACKAGE = join(import.meta.dirname, "..", "..", "integrations", "python");
const DRIVER = join(import.meta.dirname, "..", "..", "test", "fixtures", "rl_driver.py");
// mini-swe-agent's own agent needs these (its litellm models are not used).
const VENV_PACKAGES = ["pyyaml", "jinja2", "pydantic", "rich", "python-dotenv", "platformdirs", "tenacity", "requests"];
// The dataset and the server first (a server started in a hook would be stopped when the hook ends); the
// environment is built before the first test.
const fx: FixtureDataset = await makeFixtureDataset(join(work, "fx"), { instances: 1 });
const inst: Instance = fx.instances[0]!;
const serve: ServeProcess = await startServeOn(fx);
const client = RolloutClient.connect({ url: serve.url, apiKey: ADMIN });

async function startServeOn(f: FixtureDataset): Promise<ServeProcess> {
  const tokens = join(work, "tokens.json");
  const other = { name: "other", token: OTHER };
  const capped = { name: "capped", token: CAPPED, max_sandboxes: 1 };
  writeFileSync(tokens, JSON.stringify({ tokens: [other, capped] }), { mode: 0o600 });
  // The same task once more under another id, with a "gold" patch that fixes only half of it.
  const first = f.instances[0]!;
  const dataset = join(work, "dataset.json");
  writeFileSync(dataset, JSON.stringify([first, { ...first, instance_id: BROKEN, patch: f.partialFix.patch }]));
  const args = ["--dataset", dataset, "--auth-token", ADMIN, "--tokens-file", tokens, "--warm-pool", "2"];
  return startServe(home, args);
}

before(async () => {
  const built = await prepareInstances([inst], { home, reposDir: fx.reposDir, workers: 1 });
  assert.deepEqual(
    built.filter((r) => r.status === "failed"),
    [],
  );
});

after(async () => {
  await serve?.stop("SIGTERM");
  assert.deepEqual(processesMatching(home), [], "no sandbox process outlives the server");
  assert.deepEqual(scratchDirs(home), [], "no sandbox directory outlives the server");
});

/** Kill every host process of a sandbox (SIGKILL), as the OOM killer or an operator would. */
function killSandbox(sandboxId: string): void {
  for (const line of processesMatching(sandboxId)) {
    try {
      process.kill(Number(line.split(":")[0]), "SIGKILL");
    } catch {
      /* already gone */
    }
  }
}

describe("rollouts over HTTP: the TypeScript SDK", { concurrency: 1 }, () => {
  it("a group: commands and files per rollout, rewards with their counts, forks as new repetitions", async () => {
    await using group = await client.startGroup({ instanceId: inst.instance_id, n: 2 });
    assert.deepEqual(
      group.rollouts.map((r) => [r.repetition, r.trajectoryId]),
      [
        [0, `${inst.instance_id}@0`],
        [1, `${inst.instance_id}@1`],
      ],
    );
    assert.equal(group.problemStatement, inst.problem_statement);
    const [a, b] = group.rollouts;
    await a!.files.write("/tmp/fix.diff", inst.patch!);
    assert.equal((await a!.files.read("/tmp/fix.diff")).toString(), inst.patch);
    assert.equal((await a!.exec("git apply /tmp/fix.diff && git status --short")).exitCode, 0);
    const [child] = await b!.fork(1);
    assert.equal(child!.repetition, 2);
    assert.equal(child!.parent, b!.id);
    assert.equal((await child!.exec("git apply -", { stdin: inst.patch! })).exitCode, 0);
    const [fixed, untouched, forked] = await Promise.all([a!.reward(), b!.reward(), child!.reward()]);
    assert.deepEqual(
      [fixed, untouched, forked].map((o) => [o.status, o.reward, o.resolution]),
      [
        ["scored", 1, "FULL"],
        ["scored", 0, null],
        ["scored", 1, "FULL"],
      ],
    );
    assert.equal(fixed.failToPass!.passed, fixed.failToPass!.total);
    assert.ok(fixed.timings.testsMs > 0);
    assert.equal((await client.group(group.id)).rollouts.length, 3, "the fork is a rollout of the group");
  });

  it("reset and checkpoints: back to the start or a checkpoint in place, forks from it; unknown ids 404", async () => {
    await using group = await client.startGroup({ instanceId: inst.instance_id, n: 1 });
    const [r] = group.rollouts;
    assert.equal((await r!.exec("git apply -", { stdin: inst.patch! })).exitCode, 0);
    const cp = await r!.checkpoint();
    await r!.exec("echo more > /tmp/more");
    const { info, resetMs } = await r!.reset();
    assert.equal(info.sandboxId, r!.info.sandboxId);
    assert.ok(resetMs > 0);
    assert.equal((await r!.exec("git status --short; ls /tmp")).stdout, "", "the start state: nothing of the agent's");
    assert.equal((await r!.reward()).reason, "empty_patch");
    await r!.reset({ checkpoint: cp });
    const [child] = await r!.fork(1, { checkpoint: cp });
    const [back, forked] = await Promise.all([r!.reward(), child!.reward()]);
    assert.deepEqual([back.reward, forked.reward], [1, 1], "the checkpoint holds the fix");
    await r!.dropCheckpoint(cp);
    await assert.rejects(r!.reset({ checkpoint: cp }), CheckpointNotFoundError);
    assert.equal((await r!.exec("git diff --stat | wc -l")).stdout, "2\n", "a refused reset changes nothing");
  });

  it("a killed sandbox: commands throw SandboxLostError (410), the reward is an infra failure", async () => {
    await using group = await client.startGroup({ instanceId: inst.instance_id, n: 1 });
    const [r] = group.rollouts;
    killSandbox(r!.info.sandboxId!);
    await sleep(300);
    await assert.rejects(r!.exec("true"), SandboxLostError);
    const raw = await call(serve.url, "POST", `/rollouts/${r!.id}/exec`, { key: ADMIN, body: { command: "true" } });
    assert.equal(raw.status, 410);
    assert.equal(raw.json.code, "sandbox_lost");
    const o = await r!.reward();
    assert.equal(o.status, "infra_failure");
    assert.equal(o.reward, null);
    assert.equal(o.failure?.kind, "sandbox_lost");
    assert.equal((await r!.refresh()).state, "lost");
  });

  it("prewarm fills the server's pool; the gold pre-check; owners, bad input and closed groups", async () => {
    const report = await client.prewarm([inst.instance_id], { sandboxes: 5 });
    assert.deepEqual(
      report.tasks.map((t) => [t.instanceId, t.warmSandboxes, t.error]),
      [[inst.instance_id, 2, undefined]],
    );
    assert.deepEqual(report.pool, { size: 2, max: 2 });
    await assert.rejects(client.prewarm([inst.instance_id], { sandboxes: 0 }), InvalidInputError);
    const none = await call(serve.url, "POST", "/rollouts/prewarm", {
      key: ADMIN,
      body: { instance_ids: [inst.instance_id], sandboxes: -1 },
    });
    assert.deepEqual([none.status, none.json.detail.map((d: Json) => d.loc.join("."))], [422, ["body.sandboxes"]]);
    const group = await client.startGroup({ instanceId: inst.instance_id, n: 3, goldCheck: true });
    assert.deepEqual(
      group.rollouts.map((r) => r.fromPool),
      [true, true, false],
    );
    const verdict = await client.goldCheck(inst.instance_id);
    assert.equal(verdict.passed, true);
    const other = RolloutClient.connect({ url: serve.url, apiKey: OTHER });
    await assert.rejects(other.group(group.id), NotFoundError);
    await assert.rejects(other.rollout(group.rollouts[0]!.id), NotFoundError);
    assert.deepEqual(await other.groups(), []);
    await group.close();
    await assert.rejects(client.group(group.id), NotFoundError);
    await assert.rejects(client.startGroup({ instanceId: inst.instance_id, n: 0 }), InvalidInputError);
    await assert.rejects(client.startGroup({ instanceId: "no-such-task", n: 1 }), NotFoundError);
    const bad = await call(serve.url, "POST", "/rollouts/groups", { key: ADMIN, body: { instance_id: 3, n: "x" } });
    assert.equal(bad.status, 422);
    assert.deepEqual(
      bad.json.detail.map((d: Json) => d.loc.join(".")),
      ["body.instance_id", "body.n"],
    );
    await assert.rejects(client.goldCheck(BROKEN), TaskInvalidError);
    await assert.rejects(client.startGroup({ instanceId: BROKEN, n: 2, goldCheck: true }), TaskInvalidError);
  });
});

describe("rollouts over HTTP: principals", { concurrency: 1 }, () => {
  it("a client allowed 1 sandbox cannot start 16 or fork 16; another's prewarm leaves its warm pool", async () => {
    const capped = RolloutClient.connect({ url: serve.url, apiKey: CAPPED });
    const other = RolloutClient.connect({ url: serve.url, apiKey: OTHER });
    const over = await call(serve.url, "POST", "/rollouts/groups", {
      key: CAPPED,
      body: { instance_id: inst.instance_id, n: 16 },
    });
    assert.equal(over.status, 429, over.text);
    assert.match(over.json.detail, /capped holds 0 of at most 1 sandboxes, 16 more asked/);
    const group = await capped.startGroup({ instanceId: inst.instance_id, n: 1 });
    await assert.rejects(group.rollouts[0]!.fork(16), /sandbox limit reached: capped holds 1 of at most 1/);
    // Its rollout and its plain sandboxes are one budget.
    const plain = await call(serve.url, "POST", "/sandboxes", { key: CAPPED, body: {} });
    assert.equal(plain.status, 429, plain.text);
    assert.match(plain.json.detail, /capped holds 1 of at most 1 sandboxes/);
    await group.close();
    // Prewarm is capped too, and per principal: the other's batch neither replaces nor takes the capped one's.
    const mine = await capped.prewarm([inst.instance_id], { sandboxes: 2 });
    assert.equal(mine.tasks[0]!.warmSandboxes, 1, "bounded by the principal's cap");
    const theirs = await other.prewarm([inst.instance_id], { sandboxes: 2 });
    assert.equal(theirs.tasks[0]!.warmSandboxes, 1, "the pool's last place; the capped one's sandbox stays");
    const again = await call(serve.url, "POST", "/rollouts/groups", {
      key: CAPPED,
      body: { instance_id: inst.instance_id, n: 2 },
    });
    assert.equal(again.status, 429, "its warm sandbox counts against its cap");
    await using warm = await capped.startGroup({ instanceId: inst.instance_id, n: 1 });
    await using theirGroup = await other.startGroup({ instanceId: inst.instance_id, n: 1 });
    assert.deepEqual(
      [warm.rollouts[0]!.fromPool, theirGroup.rollouts[0]!.fromPool],
      [true, true],
      "each took its own warm sandbox",
    );
  });
});

// --- the Python package -------------------------------------------------------------------------------------

/** What the scripted policy does for each repetition: the commands it sends, in order (then it submits). */
const SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";
const heredoc = (patch: string): string => `git apply <<'MSB_PATCH'\n${patch}MSB_PATCH`;

interface Policy {
  server: Server;
  url: string;
  /** Chat requests served, per trajectory id. */
  requests: Map<string, number>;
}

/** One assistant answer: a thought and exactly one command block (in the agent's own format); null: no block. */
function answer(system: string, command: string | null): string {
  if (command === null) return "THOUGHT: I will just think for now.";
  const fence = system.includes("mswea_bash_command") ? "```mswea_bash_command" : "```bash";
  return `THOUGHT: next step.\n\n${fence}\n${command}\n\`\`\``;
}

async function scriptedPolicy(
  plans: Map<number, (string | null)[]>,
  onStep: (traj: string, step: number, messages: Json[]) => void,
): Promise<Policy> {
  const requests = new Map<string, number>();
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const j = JSON.parse(body) as Json;
      const traj = String(j.user ?? "");
      const rep = Number(traj.split("@").pop());
      const step = (j.messages as Json[]).filter((m) => m.role === "assistant").length;
      requests.set(traj, (requests.get(traj) ?? 0) + 1);
      onStep(traj, step, j.messages);
      const plan = plans.get(rep) ?? [];
      const command = step < plan.length ? plan[step]! : SUBMIT;
      const content = answer(String(j.messages[0]?.content ?? ""), command);
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          id: `chatcmpl-${traj}-${step}`,
          object: "chat.completion",
          model: j.model,
          choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  after(() => new Promise<void>((r) => server.close(() => r())));
  return { server, url: `http://127.0.0.1:${port}/v1`, requests };
}

let python = "";
const miniRepo = mirror("SWE-agent/mini-swe-agent", "MINI_SWE_AGENT_REPO");

async function driver(which: string, policyUrl: string, extraPath: string[] = []): Promise<Json> {
  const out = tempDir("msb-rl-out-");
  const r = await run(python, [DRIVER, serve.url, ADMIN, policyUrl, inst.instance_id, out, which], {
    env: {
      PATH: process.env.PATH,
      PYTHONPATH: [PACKAGE, ...extraPath].join(":"),
      PYTHONDONTWRITEBYTECODE: "1",
      NO_PROXY: "*",
      MSWEA_SILENT_STARTUP: "1",
      MSWEA_GLOBAL_CONFIG_DIR: join(out, "mswea"),
    },
    timeoutMs: 600_000,
  });
  assert.equal(r.code, 0, `python driver ${which} failed:\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(r.stdout.trim().split("\n").pop()!);
}

describe("rollouts over HTTP: the Python package (minisandbox.rl)", { concurrency: 1 }, () => {
  before(async () => {
    python = join(await cachedVenv("rl", VENV_PACKAGES), "bin", "python");
  });

  it("a GRPO group of 8 against a scripted policy: exactly the expected rewards; the killed one is no 0", async () => {
    const partial = fx.partialFix.patch;
    const gold = heredoc(inst.patch!);
    const plans = new Map<number, (string | null)[]>([
      [0, ["git status --short && ls", gold]], // fixes it
      [1, [heredoc(partial)]], // half a fix
      [2, ["printf 'a\0b'"]], // a command the server refuses (a NUL byte): an observation, then an empty diff
      [3, [null, gold]], // a format error first, then the fix
      [4, ["rm -rf tests"]], // deletes the tests (the fresh sandbox restores them)
      [5, [gold, "python -m pytest -q 2>&1 | tail -3"]], // fixes it and runs the tests
      [6, [gold, "echo 'import os' > tests/conftest.py", "ls", "ls"]], // fixes it, adds a conftest, never submits
      [7, ["hostname", "ls"]], // its sandbox is killed after the first command
    ]);
    const killed: string[] = [];
    const policy = await scriptedPolicy(plans, (traj, step, messages) => {
      if (!traj.endsWith("@7") || step !== 1) return;
      // The observation of `hostname` is the sandbox's id: kill it before the agent's next command.
      const id = /<output>\n(sb-[0-9a-f]+)\n/.exec(String(messages[messages.length - 1].content))?.[1];
      if (id) {
        killed.push(id);
        killSandbox(id);
      }
    });
    const r = await driver("grpo", policy.url);
    const ts = r.trajectories as Json[];
    assert.equal(killed.length, 1, "the scripted policy found the sandbox to kill");
    assert.deepEqual(
      ts.map((t) => t.repetition),
      [0, 1, 2, 3, 4, 5, 6, 7],
    );
    assert.deepEqual(
      ts.map((t) => t.reward),
      [1, 0, 0, 1, 0, 1, 1, null],
      JSON.stringify(ts.map((t) => [t.repetition, t.status, t.exit_status, t.failure])),
    );
    assert.deepEqual(
      ts.map((t) => t.status),
      [...Array(7).fill("scored"), "infra_failure"],
    );
    assert.equal(ts[7].failure.kind, "sandbox_lost");
    assert.deepEqual(
      ts.map((t) => t.reason),
      ["graded", "graded", "empty_patch", "graded", "graded", "graded", "graded", "sandbox_lost"],
    );
    assert.deepEqual(
      ts.map((t) => t.flags),
      [[], [], [], [], [], [], [["conftest", "tests/conftest.py"]], []],
      "deleting test modules is no flag; a conftest.py the test patch does not own is",
    );
    assert.deepEqual(
      ts.map((t) => t.exit_status),
      ["Submitted", "Submitted", "Submitted", "Submitted", "Submitted", "Submitted", "LimitsExceeded", "SandboxLost"],
    );
    // Per-turn timings; the policy saw every request under its trajectory id.
    for (const t of ts.slice(0, 7)) {
      assert.ok(t.turns.length >= 1 && t.turns.every((x: Json) => x.model_ms >= 0));
      assert.ok(
        t.turns.filter((x: Json) => !x.format_error).every((x: Json) => x.exec_ms > 0),
        t.trajectory_id,
      );
    }
    assert.equal(ts[3].turns[0].format_error, true);
    assert.equal(policy.requests.get(`${inst.instance_id}@0`), 3);
    // Concurrency-limited to 3, and concurrent.
    assert.ok(r.max_concurrent <= 3 && r.max_concurrent >= 2, `max concurrent ${r.max_concurrent}`);
    // Token ids and masks: the prompt is system + task; the mask covers exactly the policy's own turns.
    for (const t of ts) {
      assert.match(t.prompt_text, /^<\|system\|>.*<\|end\|><\|user\|>[\s\S]*<\|end\|><\|assistant\|>$/s);
      assert.equal(t.mask_ones, t.assistant_chars, t.trajectory_id);
      assert.equal(t.mask_len, t.response_len);
    }
    // The JSONL: one record per trajectory, with what a SkyRL generator or a verl agent loop needs.
    const records = r.records as Json[];
    assert.equal(records.length, 8);
    const refused = records.find((x) => x.repetition === 2)!.messages[3].content;
    assert.match(refused, /The command was refused: .*NUL/, "the refusal is the policy's observation");
    assert.equal(ts[2].turns[0].returncode, -1);
    for (const rec of records) {
      for (const k of ["trajectory_id", "instance_id", "repetition", "status", "reward", "messages", "loss_mask"])
        assert.ok(k in rec, k);
      assert.equal(rec.loss_mask.length, rec.messages.length);
      assert.deepEqual(
        rec.loss_mask,
        rec.messages.map((m: Json, i: number) => (i >= 2 && m.role === "assistant" ? 1 : 0)),
      );
    }
    // mask_group: one infrastructure failure masks its whole GRPO group.
    assert.deepEqual(r.group_masked.rewards, Array(8).fill(0));
    assert.deepEqual(r.group_masked.mask_sums, Array(8).fill(0));
    assert.equal(r.group_masked.stop_reasons[7], "infra_failure");
    assert.deepEqual(r.groups_left, [], "the group was closed");
  });

  it("files, forks, prewarm, gold check from Python; SkyRL generator, verl agent loop: ids, masks", async () => {
    const policy = await scriptedPolicy(
      new Map([
        [0, [heredoc(inst.patch!)]],
        [1, ["ls"]],
      ]),
      () => {},
    );
    const r = await driver("adapters", policy.url);
    assert.deepEqual(r.files, {
      read: "from python\n",
      child: "from python\n",
      child_repetition: 1,
      child_parent: true,
      timeout: true,
      closed: "InvalidInputError",
    });
    assert.deepEqual(
      r.prewarm.tasks.map((t: Json) => [t.instance_id, t.warm_sandboxes]),
      [[inst.instance_id, 2]],
    );
    assert.equal(r.gold.passed, true);
    assert.deepEqual(r.skyrl.rewards, [1, 0]);
    assert.deepEqual(r.skyrl.stop_reasons, ["Submitted", "Submitted"]);
    assert.deepEqual(
      r.skyrl.trajectory_ids.map((t: Json) => t.repetition_id),
      [0, 1],
    );
    assert.ok(r.skyrl.mask_sums.every((n: number) => n > 0));
    assert.deepEqual(r.skyrl.lengths_match, [true, true]);
    assert.equal(r.skyrl.metrics["minisandbox/infra_failures"], 0);
    assert.equal(r.verl.reward_score, 1);
    assert.equal(r.verl.status, "scored");
    assert.ok(r.verl.mask_sum > 0 && r.verl.lengths_match);
  });

  const skipMini = miniRepo
    ? false
    : "SKIPPED LOUDLY: no mini-swe-agent source: set MINI_SWE_AGENT_REPO (a checkout or git repository) or provide " +
      "its mirror (MINISANDBOX_MIRRORS)";
  it("mini-swe-agent's own DefaultAgent on rollouts, with the policy behind the same endpoint", {
    skip: skipMini,
  }, async () => {
    const src = tempDir("msb-mini-src-");
    // A checkout (src/minisweagent) or a bare repository: its package sources, never its code in this repository.
    if (existsSync(join(miniRepo!, "src", "minisweagent"))) execFileSync("cp", ["-r", join(miniRepo!, "src"), src]);
    else
      execFileSync("sh", [
        "-c",
        'git --git-dir "$1" archive HEAD src/minisweagent | tar -x -C "$2"',
        "sh",
        miniRepo!,
        src,
      ]);
    const policy = await scriptedPolicy(
      new Map([
        [0, ["git status --short", null, heredoc(inst.patch!)]], // a malformed reply in the middle
        [1, [heredoc(fx.partialFix.patch)]],
      ]),
      () => {},
    );
    const r = await driver("mini", policy.url, [join(src, "src")]);
    const ts = r.trajectories as Json[];
    assert.deepEqual(
      ts.map((t) => [t.agent, t.status, t.reward, t.exit_status]),
      [
        ["mini-swe-agent", "scored", 1, "Submitted"],
        ["mini-swe-agent", "scored", 0, "Submitted"],
      ],
      JSON.stringify(ts),
    );
    assert.match(ts[0].prompt_text, /mswea_bash_command/, "mini's own swebench templates");
    // The malformed reply stays as the assistant turn it is (mask 1), followed by mini's format error.
    const turn = ["assistant", "user"];
    assert.deepEqual(ts[0].roles, ["system", "user", ...turn, ...turn, ...turn, "assistant"]);
    assert.equal(ts[0].mask_ones, ts[0].assistant_chars);
    assert.ok(ts[0].turns.length === 4 && ts[0].turns[0].exec_ms > 0);
    assert.equal(ts[0].turns[1].format_error, true);
  });
});
