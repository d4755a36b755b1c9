/**
 * Operator secrets stay with the operator: a real pip configuration with credentials (index URLs with user:token@
 * or a token in the path, a proxy, a client certificate, a keyring provider, PIP_* variables) reaches build steps as
 * it is, and agent, rollout and evaluation sandboxes without any of them (no remote URL at all: a token can be
 * anywhere in one); local file:// indexes stay (eval.sh reinstalls offline). End to end too: a trainer whose
 * environment and user pip.conf hold tokens prepares, evaluates and serves rollouts with the CLI, and a probe in
 * each sandbox (a command in a rollout's, a conftest.py in an evaluation's and a fresh reward's) finds no token.
 */
process.env.PIP_RETRIES ??= "0";

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir, tempHome } from "./helpers.js";
import { runCli, startServe } from "./serve-process.js";
import { RolloutClient } from "../src/client/index.js";
import { buildLogPath } from "../src/env/build.js";
import { envFor } from "../src/env/environments.js";
import { pipSettings, withoutCredentials } from "../src/env/pip-config.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { Sandbox } from "../src/index.js";
import { run } from "../src/util/run.js";

const TOKEN = "s3cr3t-t0ken-0123456789";

test("credentials in pip.conf and PIP_* variables never reach a sandbox; local indexes do", async () => {
  const dir = tempDir("msb-pip-secrets-");
  const local = join(dir, "wheels");
  mkdirSync(join(local, "simple"), { recursive: true });
  const key = join(dir, "client.pem");
  writeFileSync(key, "-----BEGIN PRIVATE KEY-----\n");
  const conf = join(dir, "pip.conf");
  writeFileSync(
    conf,
    `[global]\nindex-url = https://trainer:${TOKEN}@pypi.example.invalid/simple\n` +
      `extra-index-url = file://${local}/simple https://__token__:${TOKEN}@extra.example.invalid/simple\n` +
      `client-cert = ${key}\nkeyring-provider = subprocess\n`,
  );
  const env = {
    ...process.env,
    PIP_CONFIG_FILE: conf,
    PIP_PROXY: `http://ops:${TOKEN}@proxy.invalid:3128`,
    PIP_FIND_LINKS: `https://pypi.fury.example.invalid/${TOKEN}/trainer/ file://${local}`,
  };
  const build = await pipSettings("python3", env);
  assert.match(JSON.stringify(build.env), new RegExp(TOKEN), "build steps get the configuration as it is");
  assert.ok(build.mounts.includes(key));
  const agent = withoutCredentials(build);
  assert.doesNotMatch(JSON.stringify(agent), new RegExp(TOKEN));
  assert.equal(agent.env.PIP_INDEX_URL, undefined, "no remote index: a token can be anywhere in its URL");
  assert.equal(agent.env.PIP_EXTRA_INDEX_URL, `file://${local}/simple`, "the local index alone");
  assert.equal(agent.env.PIP_FIND_LINKS, `file://${local}`, "not the page with a token in its path");
  assert.equal(agent.env.PIP_PROXY, undefined);
  assert.equal(agent.env.PIP_CLIENT_CERT, undefined);
  assert.equal(agent.env.PIP_KEYRING_PROVIDER, undefined);
  assert.ok(agent.mounts.includes(local), "the local index is still mounted");
  assert.ok(!agent.mounts.includes(key), "the client certificate is not");
  await using sb = await Sandbox.create({
    home: tempHome("msb-pip-secrets-home-"),
    env: agent.env,
    binds: agent.mounts.map((p) => ({ source: p, target: p, readOnly: true })),
  });
  const r = await sb.exec(`env; cat ~/.netrc ~/.config/pip/pip.conf /etc/pip.conf 2>/dev/null; ls ${local}`);
  assert.doesNotMatch(r.stdout, new RegExp(TOKEN));
  assert.match(r.stdout, /simple/);
});

/** Tokens of the trainer's: one in its environment, one in its pip.conf (and its client certificate). */
const ENV_TOKEN = `envtok-${randomBytes(8).toString("hex")}`;
const CONF_TOKEN = `conftok-${randomBytes(8).toString("hex")}`;
const PROBE = readFileSync(join(import.meta.dirname, "..", "..", "test", "fixtures", "secret_probe.py"), "utf8");
/** The probe's argument: the tokens reversed, so that no file or command line of the probe's holds one. */
const REVERSED = JSON.stringify([ENV_TOKEN, CONF_TOKEN].map((t) => [...t].reverse().join("")));

interface ProbeReport {
  searched: number;
  leaks: string[];
  pip: string;
  no_color: string | null;
}

/** The machine's own pip configuration files (`section.key` → value), without what the environment sets. */
async function machinePipConfig(): Promise<Map<string, string>> {
  const r = await run("python3", ["-m", "pip", "config", "list"]);
  const out = new Map<string, string>();
  for (const m of r.stdout.matchAll(/^([\w-]+)\.([\w-]+)='(.*)'$/gm)) out.set(`${m[1]}.${m[2]}`, m[3]!);
  return out;
}

/**
 * The trainer's environment: a pip.conf of the user's (XDG_CONFIG_HOME) with the machine's own settings (its local
 * indexes: eval.sh reinstalls offline from them), an index with a token beside them, a client certificate and one
 * harmless setting to see arrive; PIP_INDEX_URL and find-links with a token. Every remote URL is on loopback,
 * where nothing listens.
 */
async function trainerEnv(dir: string): Promise<NodeJS.ProcessEnv> {
  const conf = await machinePipConfig();
  const cert = join(dir, "client.pem");
  writeFileSync(cert, `-----BEGIN PRIVATE KEY-----\n${CONF_TOKEN}\n-----END PRIVATE KEY-----\n`, { mode: 0o600 });
  const extra = `${conf.get("global.extra-index-url") ?? ""} https://__token__:${CONF_TOKEN}@127.0.0.1:1/simple`;
  conf.set("global.extra-index-url", extra.trim());
  conf.set("global.client-cert", cert);
  conf.set("global.no-color", "true");
  const sections = new Map<string, string[]>();
  for (const [key, value] of conf) {
    const [section, name] = key.split(".") as [string, string];
    sections.set(section, [...(sections.get(section) ?? []), `${name} = ${value}`]);
  }
  mkdirSync(join(dir, "xdg", "pip"), { recursive: true });
  const text = [...sections].map(([s, lines]) => `[${s}]\n${lines.join("\n")}\n`).join("");
  writeFileSync(join(dir, "xdg", "pip", "pip.conf"), text);
  const links = `${process.env.PIP_FIND_LINKS ?? ""} http://127.0.0.1:1/${ENV_TOKEN}/links/`.trim();
  return {
    ...process.env,
    XDG_CONFIG_HOME: join(dir, "xdg"),
    PIP_INDEX_URL: `http://trainer:${ENV_TOKEN}@127.0.0.1:1/simple`,
    PIP_FIND_LINKS: links,
  };
}

/** A new file in a patch (git's format). */
function newFilePatch(path: string, text: string): string {
  const lines = text.endsWith("\n") ? text.slice(0, -1).split("\n") : text.split("\n");
  const head = `diff --git a/${path} b/${path}\nnew file mode 100644\n--- /dev/null\n+++ b/${path}\n`;
  return `${head}@@ -0,0 +1,${lines.length} @@\n${lines.map((l) => `+${l}`).join("\n")}\n`;
}

/**
 * The gold patch and a conftest.py that probes the evaluation's sandbox as pytest starts: it says what it found in
 * the session's header, and fails the run (a 0) if it found a token or the trainer's harmless setting is missing.
 */
function probingPatch(gold: string): string {
  const conftest = [
    PROBE.replace(/\nif __name__ == "__main__":[\s\S]*$/, "\n"),
    `_FOUND = probe([t[::-1] for t in json.loads(${JSON.stringify(REVERSED)})])`,
    `if _FOUND["leaks"] or _FOUND["no_color"] != "true" or _FOUND["searched"] < 100:`,
    `    raise RuntimeError("MSB-PROBE " + json.dumps(_FOUND))`,
    "def pytest_report_header(config):",
    `    return "MSB-PROBE " + json.dumps(_FOUND)`,
    "",
  ].join("\n");
  return gold + newFilePatch("conftest.py", conftest);
}

/** No token anywhere it looked, and it looked: many files, the trainer's harmless setting arrived, pip runs. */
function assertClean(where: string, r: ProbeReport): void {
  const said = `${where}: ${JSON.stringify({ ...r, pip: r.pip.slice(0, 2000) })}`;
  process.stderr.write(`# ${where}: ${r.searched} files searched, tokens found in ${JSON.stringify(r.leaks)}\n`);
  assert.deepEqual(r.leaks, [], said);
  assert.ok(r.searched >= 100, said);
  assert.equal(r.no_color, "true", `the trainer's own harmless setting arrives: ${said}`);
  assert.match(r.pip, /no-color='true'/, said);
}

const noToken = (where: string, text: string): void => {
  for (const t of [ENV_TOKEN, CONF_TOKEN]) assert.ok(!text.includes(t), `${where} holds a token`);
};

test("a trainer's pip credentials reach no evaluation or rollout sandbox (prepare, evaluate, serve)", {
  timeout: 900_000,
}, async () => {
  const dir = tempDir("msb-pip-e2e-");
  const home = tempHome("msb-pip-e2e-home-");
  const fx = await makeFixtureDataset(join(dir, "fx"), { instances: 1 });
  const inst = fx.instances[0]!;
  const env = await trainerEnv(dir);
  // Built with the trainer's configuration as it is (build steps may use it), by the CLI in that environment.
  const dataset = ["--dataset", fx.datasetPath, "--repos", fx.reposDir];
  const built = await runCli(home, ["prepare", ...dataset], env);
  assert.equal(built.code, 0, built.stderr);
  // What it says of the indexes it could not reach masks the password in their URLs, as pip's own messages do.
  const log = readFileSync(buildLogPath(home, envFor(inst, {}).key), "utf8");
  assert.match(log, /__token__:\*\*\*\*@127\.0\.0\.1:1/, log);
  for (const said of [log, built.stderr]) assert.ok(!said.includes(CONF_TOKEN), said);
  await evaluateWithProbe(home, dir, dataset, probingPatch(inst.patch!), env, inst.instance_id);
  await rolloutWithProbe(home, fx.datasetPath, probingPatch(inst.patch!), env);
});

/** `minisandbox evaluate` in the trainer's environment: the probe's report in the test log, the patch resolved. */
async function evaluateWithProbe(
  home: string,
  dir: string,
  dataset: string[],
  patch: string,
  env: NodeJS.ProcessEnv,
  id: string,
): Promise<void> {
  const preds = join(dir, "preds.json");
  writeFileSync(preds, JSON.stringify([{ instance_id: id, model_name_or_path: "trainer/model", model_patch: patch }]));
  const reports = join(dir, "reports");
  const args = ["evaluate", ...dataset, "--predictions", preds, "--run-id", "secrets", "--report-dir", reports];
  const r = await runCli(home, [...args, "--no-build"], env);
  assert.equal(r.code, 0, r.stderr);
  const logs = join(reports, "logs", "run_evaluation", "secrets", "trainer__model", id);
  const output = readFileSync(join(logs, "test_output.txt"), "utf8");
  const header = /^MSB-PROBE (\{.*\})$/m.exec(output);
  assert.ok(header, `the probe ran in the evaluation's sandbox:\n${output.slice(-3000)}`);
  assertClean("the evaluation's sandbox", JSON.parse(header[1]!) as ProbeReport);
  assert.equal(JSON.parse(readFileSync(join(logs, "report.json"), "utf8"))[id].resolved, true, output.slice(-3000));
  for (const f of readdirSync(logs, { withFileTypes: true }).filter((e) => e.isFile()))
    noToken(`the evaluation's ${f.name}`, readFileSync(join(logs, f.name), "utf8"));
}

/** `serve` in the trainer's environment: a rollout's sandbox probed by a command, then its fresh reward's. */
async function rolloutWithProbe(home: string, dataset: string, patch: string, env: NodeJS.ProcessEnv): Promise<void> {
  const key = "pip-e2e-admin-token-0123456789";
  const serve = await startServe(home, ["--dataset", dataset, "--auth-token", key], env);
  const client = RolloutClient.connect({ url: serve.url, apiKey: key });
  const id = JSON.parse(readFileSync(dataset, "utf8"))[0].instance_id as string;
  await using group = await client.startGroup({ instanceId: id, n: 1 });
  const r = group.rollouts[0]!;
  await r.files.write("/tmp/secret_probe.py", PROBE);
  const probed = await r.exec(`python /tmp/secret_probe.py '${REVERSED}'`, { timeoutMs: 120_000 });
  assert.equal(probed.exitCode, 0, probed.stderr);
  assertClean("a rollout's sandbox", JSON.parse(probed.stdout) as ProbeReport);
  const seen = await r.exec("env; cat /proc/self/environ; python -m pip config list; cat ~/.netrc 2>/dev/null");
  noToken("a rollout's environment or pip configuration", seen.stdout + seen.stderr);
  // The fresh reward's sandbox: the probe fails the tests if it finds a token there.
  assert.equal((await r.exec("git apply -", { stdin: patch })).exitCode, 0);
  const o = await r.reward();
  assert.deepEqual([o.status, o.reward], ["scored", 1], JSON.stringify({ ...o, patch: "" }));
  noToken("the server's stderr", serve.stderr());
}
