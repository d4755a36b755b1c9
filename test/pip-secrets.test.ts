/**
 * Operator secrets stay with the operator: a real pip configuration with credentials (index URLs with user:token@
 * or a token in the path, a proxy, a client certificate, a keyring provider, PIP_* variables) reaches build steps as
 * it is, and agent, rollout and evaluation sandboxes without any of them (no remote URL at all: a token can be
 * anywhere in one); local file:// indexes stay (eval.sh reinstalls offline).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir, tempHome } from "./helpers.js";
import { pipSettings, withoutCredentials } from "../src/env/pip-config.js";
import { Sandbox } from "../src/index.js";

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
