/**
 * mini-swe-agent's own SWE-bench batch runner (`mini-extra swebench`, unmodified, from its git mirror) with its
 * bundled swebench.yaml and the shipped minisandbox config, scripted by its deterministic test model, on the 3-instance
 * fixture dataset; then `minisandbox evaluate` on the predictions it wrote. Also: what a run without the instance
 * selection and a run against a dead server say.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runOk, run } from "../src/util/run.js";
import { cachedVenv, tempDir } from "./helpers.js";
import { call, runCli, startServe } from "./serve-process.js";
import { checkout, mirror, preparedFixture, skipUnlessMirrors } from "./agent-clients.js";

const ADAPTERS = join(import.meta.dirname, "..", "..", "integrations", "python");
const MIRROR = { "SWE-agent/mini-swe-agent": "MINI_SWE_AGENT_MIRROR" };
const skip = skipUnlessMirrors(MIRROR);
const TOKEN = "mini-swe-agent-test-token";

/** mini-swe-agent (its deps from the local index; litellm and textual, which the runner does not import, left out). */
async function miniVenv(): Promise<string> {
  const gitDir = mirror("SWE-agent/mini-swe-agent", MIRROR["SWE-agent/mini-swe-agent"])!;
  const head = (await runOk("git", ["--git-dir", gitDir, "rev-parse", "HEAD"])).trim();
  const deps = ["pyyaml", "requests", "jinja2", "pydantic>=2", "tenacity", "rich", "python-dotenv", "typer"];
  deps.push("platformdirs", "prompt_toolkit", "datasets", "openai!=1.100.0,!=1.100.1", "setuptools>=61", "wheel");
  return cachedVenv("mini-swe-agent", deps, {
    recipe: `mini-swe-agent@${head} + ${ADAPTERS}`,
    setup: async (venv) => {
      const src = await checkout(gitDir, join(venv, "src", "mini-swe-agent"), head);
      const pip = [join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", "--retries", "0", "--no-deps"];
      await runOk(pip[0]!, [...pip.slice(1), "-e", src], { timeoutMs: 200_000 });
      // The package as users install it (editable: the tests see this checkout's code).
      await runOk(pip[0]!, [...pip.slice(1), "--no-build-isolation", "-e", ADAPTERS], { timeoutMs: 200_000 });
    },
  });
}

/** The deterministic model's script: look around, a command that times out, the fix of calc-2, submit. */
function script(fix: string): object {
  const step = (content: string, command: string) => ({
    role: "assistant",
    content,
    extra: { actions: [{ command }] },
  });
  return {
    environment: { timeout: 5 },
    agent: { cost_limit: 0, step_limit: 10 },
    model: {
      model_class: "deterministic",
      model_name: "deterministic",
      outputs: [
        step("look", "pwd && git rev-parse HEAD && which python && echo PAGER=$PAGER && git log -1 --oneline"),
        step("slow", "echo partial-before-timeout; sleep 30; echo never"),
        step("fix", `cat > /tmp/fix.diff <<'MSB_EOF'\n${fix}MSB_EOF\ngit apply /tmp/fix.diff && echo applied || true`),
        step("submit", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"),
      ],
    },
  };
}

async function runMini(venv: string, url: string, args: string[], work: string) {
  const env = {
    PATH: `${join(venv, "bin")}:${process.env.PATH}`,
    HF_HOME: join(work, "hf-home"),
    HF_DATASETS_OFFLINE: "1",
    HF_HUB_OFFLINE: "1",
    MSWEA_GLOBAL_CONFIG_DIR: join(work, "mswea"),
    MSWEA_SILENT_STARTUP: "1",
    MINISANDBOX_URL: url,
    MINISANDBOX_API_KEY: TOKEN,
    PYTHONDONTWRITEBYTECODE: "1",
    NO_PROXY: "*",
  };
  return run(join(venv, "bin", "mini-extra"), ["swebench", ...args], { env, cwd: work, timeoutMs: 300_000 });
}

test("mini-swe-agent's SWE-bench runner on minisandbox end to end, then minisandbox evaluate", { skip }, async (t) => {
  const [venv, fx] = await Promise.all([miniVenv(), preparedFixture()]);
  const work = tempDir("msb-mini-");
  const server = await startServe(fx.home, ["--dataset", fx.dataset, "--auth-token", TOKEN]);
  const calc2 = fx.instances.find((i) => i.instance_id === "fixture__calc-2")!;
  writeFileSync(join(work, "script.yaml"), JSON.stringify(script(calc2.patch)));
  const shipped = (await runOk(join(venv, "bin", "python"), ["-m", "minisandbox.configs", "mini-swebench"])).trim();
  // The READMEs' recipe: --subset is a directory holding the dataset file, which `datasets` reads as split "train".
  const subset = join(work, "SUBSET");
  mkdirSync(subset);
  copyFileSync(fx.dataset, join(subset, "dataset.json"));
  const started = performance.now();
  const r = await runMini(
    venv,
    server.url,
    ["--subset", subset, "--split", "train", "-o", "out", "-w", "2"].concat([
      "-c",
      "swebench.yaml",
      "-c",
      shipped,
      "-c",
      "script.yaml",
    ]),
    work,
  );
  const agentSeconds = (performance.now() - started) / 1000;
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const preds = JSON.parse(readFileSync(join(work, "out", "preds.json"), "utf8")) as Record<
    string,
    { model_patch: string }
  >;
  assert.deepEqual(Object.keys(preds).sort(), ["fixture__calc-1", "fixture__calc-2", "fixture__calc-3"]);
  assert.match(preds["fixture__calc-2"]!.model_patch, /^diff --git a\/calc\/stats.py/);
  const statusFile = readdirSync(join(work, "out")).find((f) => f.startsWith("exit_statuses_"))!;
  assert.equal((readFileSync(join(work, "out", statusFile), "utf8").match(/fixture__calc-\d/g) ?? []).length, 3);
  assert.match(readFileSync(join(work, "out", statusFile), "utf8"), /Submitted/);
  assert.doesNotMatch(readFileSync(join(work, "out", statusFile), "utf8"), /Error/);

  // The trajectory: the instance's /testbed at its base commit, its venv's python, pagers off, and the timed-out
  // command's partial output kept.
  const traj = JSON.parse(readFileSync(join(work, "out", "fixture__calc-2", "fixture__calc-2.traj.json"), "utf8"));
  const observations = (traj.messages as { role: string; content: unknown }[])
    .filter((m) => m.role === "user")
    .map((m) => String(m.content));
  assert.ok(observations.some((o) => o.includes(`/testbed\n${calc2.base_commit}\n/opt/venv/bin/python\nPAGER=cat`)));
  const timedOut = observations.find((o) => o.includes("timed out after 5 seconds"));
  const partial = timedOut?.split("<output>")[1] ?? "";
  assert.ok(partial.includes("partial-before-timeout") && !partial.includes("never"), timedOut);
  assert.equal(traj.info.minisandbox.selection.instance_id, "fixture__calc-2");
  assert.doesNotMatch(JSON.stringify(traj), new RegExp(TOKEN), "the token is not in the trajectory");
  const left = await call(server.url, "GET", "/sandboxes", { key: TOKEN });
  assert.deepEqual(left.json.sandboxes, [], "every sandbox was deleted");

  const e = await runCli(
    fx.home,
    ["evaluate", "--dataset", fx.dataset, "--predictions", join(work, "out", "preds.json")].concat([
      "--run-id",
      "mini",
      "--report-dir",
      work,
      "--json",
    ]),
  );
  assert.equal(e.code, 0, e.stderr);
  const summary = JSON.parse(readFileSync(join(work, "deterministic.mini.json"), "utf8"));
  assert.equal(summary.total_instances, 3);
  assert.equal(summary.submitted_instances, 3);
  assert.deepEqual(summary.resolved_ids, ["fixture__calc-2"]);
  t.diagnostic(
    `mini-swe-agent: 3 instances, ${summary.resolved_instances} resolved (${summary.resolved_ids}), ` +
      `${summary.empty_patch_instances} empty patch; agent run ${agentSeconds.toFixed(1)} s`,
  );
});

test("mini-swe-agent's runner: no instance selection and a dead server each fail the instance in one line", {
  skip,
}, async () => {
  const [venv, fx] = await Promise.all([miniVenv(), preparedFixture()]);
  const work = tempDir("msb-mini-fail-");
  const server = await startServe(fx.home, ["--dataset", fx.dataset, "--auth-token", TOKEN]);
  writeFileSync(join(work, "script.yaml"), JSON.stringify(script("")));
  writeFileSync(
    join(work, "class-only.yaml"),
    JSON.stringify({ environment: { environment_class: "minisandbox.minisweagent.MinisandboxEnvironment" } }),
  );
  const base = ["--subset", fx.hfDir, "--split", "dev", "--filter", "fixture__calc-1", "-c", "swebench.yaml"];
  const shipped = (await runOk(join(venv, "bin", "python"), ["-m", "minisandbox.configs", "mini-swebench"])).trim();
  const cases = [
    { out: "nosel", url: server.url, config: "class-only.yaml", why: /no workspace selected.*minisandbox-instance/ },
    {
      out: "dead",
      url: "http://127.0.0.1:9",
      config: shipped,
      why: /no answer from minisandbox at http:\/\/127\.0\.0\.1:9/,
    },
  ];
  for (const c of cases) {
    const r = await runMini(venv, c.url, [...base, "-c", c.config, "-c", "script.yaml", "-o", c.out], work);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const log = readFileSync(join(work, c.out, "minisweagent.log"), "utf8");
    assert.match(log, c.why, log);
    const preds = JSON.parse(readFileSync(join(work, c.out, "preds.json"), "utf8"));
    assert.equal(preds["fixture__calc-1"].model_patch, "");
  }
  const left = await call(server.url, "GET", "/sandboxes", { key: TOKEN });
  assert.deepEqual(left.json.sandboxes, []);
});
