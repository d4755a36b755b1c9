/**
 * SWE-agent's `sweagent run-batch` (unmodified, from its git mirror, with SWE-ReX and its other dependencies from
 * their mirrors) on the 3-instance fixture dataset, selecting minisandbox by configuration alone: the shipped
 * `sweagent.yaml` plus an instances file from `python -m minisandbox.sweagent instances`, scripted by SWE-agent's
 * replay model. Then `minisandbox evaluate` on the predictions it wrote.
 *
 * litellm: SWE-agent imports it at module level on every run, and it is not in the local package index (nor
 * obtainable here). The test therefore writes a tiny stand-in package named `litellm` into the venv: only the names
 * SWE-agent touches at import time, and every model call raises. It is never a copy of litellm, and the replay model
 * used here never calls it: nothing under test goes through it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { run, runOk } from "../src/util/run.js";
import { cachedVenv, tempDir } from "./helpers.js";
import { call, runCli, startServe } from "./serve-process.js";
import { checkout, mirror, preparedFixture, skipUnlessMirrors } from "./agent-clients.js";

const ADAPTERS = join(import.meta.dirname, "..", "..", "integrations", "python");
const TOKEN = "swe-agent-test-token";
/** Mirror, its variable, and the ref SWE-agent 1.1's pins need. */
const SOURCES: Record<string, [string, string]> = {
  "SWE-agent/SWE-agent": ["SWE_AGENT_MIRROR", "HEAD"],
  "SWE-agent/SWE-ReX": ["SWEREX_MIRROR", "HEAD"],
  "idank/bashlex": ["BASHLEX_MIRROR", "HEAD"],
  "matiasb/python-unidiff": ["UNIDIFF_MIRROR", "HEAD"],
  "lebrice/SimpleParsing": ["SIMPLE_PARSING_MIRROR", "HEAD"],
  "hamdanal/rich-argparse": ["RICH_ARGPARSE_MIRROR", "v1.8.0"],
  "AnswerDotAI/fastcore": ["FASTCORE_MIRROR", "1.14.5"],
  "AnswerDotAI/ghapi": ["GHAPI_MIRROR", "1.1.1"],
};
const skip = skipUnlessMirrors(Object.fromEntries(Object.entries(SOURCES).map(([k, [v]]) => [k, v])));

const LITELLM_STANDIN: Record<string, string> = {
  "__init__.py":
    '"""Import-time stand-in for litellm (not litellm): see test/swe-agent.test.ts. Model calls raise."""\n' +
    "from . import cost_calculator, exceptions, types, utils  # noqa: F401\n" +
    "suppress_debug_info = False\nmodel_cost: dict = {}\ndrop_params = False\n\n" +
    "def register_model(costs):\n    model_cost.update(costs)\n\n" +
    "def completion(*args, **kwargs):\n    raise exceptions.APIError('no language model in this test venv')\n\n" +
    "def create_pretrained_tokenizer(*args, **kwargs):\n    raise NotImplementedError('no tokenizer')\n",
  "exceptions.py":
    "class APIError(Exception):\n    def __init__(self, message='', *a, **k):\n" +
    "        super().__init__(message)\n        self.message = message\n\n" +
    [
      "BadRequestError(APIError)",
      "ContextWindowExceededError(BadRequestError)",
      "ContentPolicyViolationError(BadRequestError)",
      "UnsupportedParamsError(BadRequestError)",
      "NotFoundError(APIError)",
      "PermissionDeniedError(APIError)",
      "AuthenticationError(APIError)",
      "RateLimitError(APIError)",
      "Timeout(APIError)",
      "APIConnectionError(APIError)",
      "InternalServerError(APIError)",
      "ServiceUnavailableError(APIError)",
    ]
      .map((c) => `class ${c}:\n    pass\n`)
      .join("\n"),
  "utils.py":
    "def supports_function_calling(model=None, **k):\n    return True\n\n" +
    "def token_counter(*a, **k):\n    return 0\n\n" +
    "def create_pretrained_tokenizer(*a, **k):\n    raise NotImplementedError('no tokenizer')\n",
  "cost_calculator.py": "def completion_cost(*a, **k):\n    return 0.0\n",
  "types/__init__.py": "from . import utils  # noqa: F401\n",
  "types/utils.py": "class ModelResponse:\n    pass\n\nclass Choices:\n    pass\n",
};

async function sweagentVenv(): Promise<string> {
  const heads: Record<string, string> = {};
  for (const [name, [variable, ref]] of Object.entries(SOURCES)) {
    heads[name] = (await runOk("git", ["--git-dir", mirror(name, variable)!, "rev-parse", `${ref}^{commit}`])).trim();
  }
  const indexDeps = ["datasets", "numpy", "pandas", "rich", "ruamel.yaml", "tenacity", "flask", "flask-cors"];
  indexDeps.push("pydantic", "python-dotenv", "pydantic_settings", "GitPython", "tabulate", "requests", "aiohttp");
  indexDeps.push("pyyaml", "setuptools>=64", "wheel", "hatchling");
  return cachedVenv("swe-agent", indexDeps, {
    recipe: JSON.stringify({ heads, ADAPTERS, litellm: LITELLM_STANDIN }),
    timeoutMs: 600_000,
    setup: async (venv) => {
      const py = join(venv, "bin", "python");
      const pip = (...args: string[]) =>
        runOk(py, ["-m", "pip", "install", "--quiet", "--retries", "0", ...args], { timeoutMs: 300_000 });
      const src: Record<string, string> = {};
      for (const [name, [variable, ref]] of Object.entries(SOURCES))
        src[name] = await checkout(mirror(name, variable)!, join(venv, "src", name.split("/")[1]!), heads[name] ?? ref);
      // SimpleParsing versions itself with a build plugin the index lacks: a static version instead.
      const sp = join(src["lebrice/SimpleParsing"]!, "pyproject.toml");
      writeFileSync(
        sp,
        readFileSync(sp, "utf8")
          .replace(/requires = \["hatchling", "uv-dynamic-versioning"\]/, 'requires = ["hatchling"]')
          .replace(/^dynamic = \["version"\]/m, 'version = "0.1.8"')
          .replace(/^\[tool\.hatch\.version\]\n.*\n/m, ""),
      );
      const deps = ["idank/bashlex", "matiasb/python-unidiff", "lebrice/SimpleParsing", "hamdanal/rich-argparse"];
      await pip(...[...deps, "AnswerDotAI/fastcore", "AnswerDotAI/ghapi"].map((n) => src[n]!));
      await pip("-e", src["SWE-agent/SWE-ReX"]!);
      await pip("--no-deps", "-e", src["SWE-agent/SWE-agent"]!);
      await pip("--no-deps", "-e", ADAPTERS);
      const site = (await runOk(py, ["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])).trim();
      for (const [file, text] of Object.entries(LITELLM_STANDIN)) {
        mkdirSync(join(site, "litellm", file.includes("/") ? "types" : ""), { recursive: true });
        writeFileSync(join(site, "litellm", file), text);
      }
    },
  });
}

/** SWE-agent's replay model: look around (a pager-prone `git log`), fix calc-2's median, submit (twice: review). */
function replay(): string {
  const call = (id: string, name: string, args: object) => ({
    type: "function",
    id,
    function: { name, arguments: JSON.stringify(args) },
  });
  const fix = {
    command: "str_replace",
    path: "/testbed/calc/stats.py",
    old_str: "    return ordered[len(ordered) // 2]\n",
    new_str:
      "    mid = len(ordered) // 2\n    if len(ordered) % 2:\n        return ordered[mid]\n" +
      "    return (ordered[mid - 1] + ordered[mid]) / 2\n",
  };
  const look = "cd /testbed && git rev-parse HEAD && git log -2 && ls -a /root && echo GIT_PAGER=$GIT_PAGER";
  const actions = [
    { message: "look", tool_calls: [call("c1", "bash", { command: look })] },
    { message: "fix", tool_calls: [call("c2", "str_replace_editor", fix)] },
    { message: "submit", tool_calls: [call("c3", "submit", {})] },
    { message: "submit again", tool_calls: [call("c4", "submit", {})] },
  ];
  return `${JSON.stringify({ fixture: actions })}\n`;
}

test("SWE-agent run-batch on minisandbox by configuration alone, then minisandbox evaluate", { skip }, async (t) => {
  const [venv, fx] = await Promise.all([sweagentVenv(), preparedFixture()]);
  const work = tempDir("msb-sweagent-");
  const server = await startServe(fx.home, ["--dataset", fx.dataset, "--auth-token", TOKEN]);
  const py = join(venv, "bin", "python");
  const env = { PATH: `${join(venv, "bin")}:${process.env.PATH}`, PYTHONDONTWRITEBYTECODE: "1", NO_PROXY: "*" };
  const instances = join(work, "instances.json");
  await runOk(
    py,
    ["-m", "minisandbox.sweagent", "instances", "--dataset", fx.dataset, "--url", server.url].concat([
      "--token",
      TOKEN,
      "-o",
      instances,
    ]),
    { env },
  );
  assert.equal((await runOk("stat", ["-c", "%a", instances])).trim(), "600", "the file holds a token: owner only");
  writeFileSync(join(work, "replay.jsonl"), replay());
  writeFileSync(
    join(work, "model.yaml"),
    JSON.stringify({ agent: { model: { name: "replay", replay_path: join(work, "replay.jsonl") } } }),
  );
  const shipped = (await runOk(py, ["-m", "minisandbox.configs", "sweagent"], { env })).trim();
  const defaultYaml = join(venv, "src", "SWE-agent", "config", "default.yaml");
  const started = performance.now();
  const r = await run(
    join(venv, "bin", "sweagent"),
    ["run-batch", "--config", defaultYaml, "--config", shipped, "--config", join(work, "model.yaml")].concat([
      "--instances.path",
      instances,
      "--output_dir",
      join(work, "out"),
      "--num_workers",
      "2",
    ]),
    { env: { ...env, HOME: work }, cwd: work, timeoutMs: 600_000 },
  );
  const agentSeconds = (performance.now() - started) / 1000;
  assert.equal(r.code, 0, r.stdout.slice(-4000) + r.stderr.slice(-4000));
  const preds = JSON.parse(readFileSync(join(work, "out", "preds.json"), "utf8")) as Record<
    string,
    { model_patch: string | null }
  >;
  assert.deepEqual(Object.keys(preds).sort(), ["fixture__calc-1", "fixture__calc-2", "fixture__calc-3"]);
  assert.match(preds["fixture__calc-2"]!.model_patch ?? "", /^diff --git a\/calc\/stats.py/m);
  const calc2 = fx.instances.find((i) => i.instance_id === "fixture__calc-2")!;
  const trace = readdirSync(join(work, "out", "fixture__calc-2")).find((f) => f.endsWith(".trace.log"))!;
  const log = readFileSync(join(work, "out", "fixture__calc-2", trace), "utf8");
  assert.ok(log.includes(calc2.base_commit), "the sandbox is the instance's /testbed");
  assert.doesNotMatch(log, /\.bashrc: No such file/, "the home has its dotfiles");
  assert.match(log, /GIT_PAGER=cat/);
  const left = await call(server.url, "GET", "/sandboxes", { key: TOKEN });
  assert.deepEqual(left.json.sandboxes, [], "closing the runtime deleted each sandbox");

  const e = await runCli(
    fx.home,
    ["evaluate", "--dataset", fx.dataset, "--predictions", join(work, "out", "preds.json")].concat([
      "--run-id",
      "swea",
      "--report-dir",
      work,
      "--json",
    ]),
  );
  assert.equal(e.code, 0, e.stderr);
  const summaryFile = readdirSync(work).find((f) => f.endsWith(".swea.json"))!;
  const summary = JSON.parse(readFileSync(join(work, summaryFile), "utf8"));
  assert.equal(summary.total_instances, 3);
  assert.deepEqual(summary.resolved_ids, ["fixture__calc-2"]);
  t.diagnostic(
    `SWE-agent: 3 instances, ${summary.resolved_instances} resolved (${summary.resolved_ids}), ` +
      `${summary.empty_patch_instances} empty patch; run-batch ${agentSeconds.toFixed(1)} s`,
  );
});
