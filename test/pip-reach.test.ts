/**
 * A machine whose only reachable package index is a local one: indexes that do not answer are left out before pip
 * runs (one quick connection each, on loopback here), so a build neither waits on pip's retries nor hides why a
 * package is missing. Real probes against a closed and an open loopback port; a real build in a real sandbox.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import { connectProbe, DEFAULT_INDEX_URL, withReachableIndexes, type Probe } from "../src/env/pip-reach.js";
import { prepareInstances } from "../src/env/prepare.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { loadDataset } from "../src/tasks/index.js";
import { tempDir, tempHome } from "./helpers.js";

/** A loopback port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const settings = (env: Record<string, string>) => ({ env, mounts: [] });
const NO_PROXY = {};

test("indexes that do not answer are left out; the first one left becomes the index", async () => {
  const down = `http://127.0.0.1:${await closedPort()}/simple`;
  const server = createServer((c) => c.end());
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const up = `http://127.0.0.1:${(server.address() as AddressInfo).port}/simple`;
  try {
    assert.equal(await connectProbe("127.0.0.1", (server.address() as AddressInfo).port), undefined);
    const r = await withReachableIndexes(
      settings({ PIP_INDEX_URL: down, PIP_EXTRA_INDEX_URL: `file:///srv/simple ${up}`, PIP_CERT: "/c" }),
      NO_PROXY,
      connectProbe,
    );
    assert.deepEqual(r.settings.env, { PIP_INDEX_URL: "file:///srv/simple", PIP_EXTRA_INDEX_URL: up, PIP_CERT: "/c" });
    assert.equal(
      r.note,
      `the package index is unreachable from this machine: ${down} (ECONNREFUSED 127.0.0.1); ` +
        `pip uses only file:///srv/simple, ${up}`,
    );
    // Everything answers: unchanged, nothing said.
    const same = settings({ PIP_INDEX_URL: up });
    assert.deepEqual(await withReachableIndexes(same, NO_PROXY, connectProbe), { settings: same });
  } finally {
    server.close();
  }
});

test("a note never repeats the credentials in an index's URL: masked as pip masks them", async () => {
  const port = await closedPort();
  const r = await withReachableIndexes(
    settings({
      PIP_INDEX_URL: `http://trainer:s3cret@127.0.0.1:${port}/simple`,
      PIP_EXTRA_INDEX_URL: `https://t0ken@127.0.0.1:${port}/x file:///srv/simple`,
    }),
    NO_PROXY,
    connectProbe,
  );
  assert.deepEqual(r.settings.env, { PIP_INDEX_URL: "file:///srv/simple" });
  assert.equal(
    r.note,
    `the package indexes are unreachable from this machine: http://trainer:****@127.0.0.1:${port}/simple ` +
      `(ECONNREFUSED 127.0.0.1), https://****@127.0.0.1:${port}/x (ECONNREFUSED 127.0.0.1); ` +
      "pip uses only file:///srv/simple",
  );
});

test("pip's default index counts when none is set; find-links alone; proxies and --no-index untouched", async () => {
  const asked: string[] = [];
  const offline: Probe = async (host, port) => {
    asked.push(`${host}:${port}`);
    return `ENOTFOUND ${host}`;
  };
  const local = await withReachableIndexes(settings({ PIP_EXTRA_INDEX_URL: "file:///srv/simple" }), {}, offline);
  assert.deepEqual(local.settings.env, { PIP_INDEX_URL: "file:///srv/simple" });
  assert.deepEqual(asked, ["pypi.org:443"], "one probe, of pip's default index");
  assert.match(local.note!, new RegExp(`^the package index is unreachable from this machine: ${DEFAULT_INDEX_URL}`));
  const wheels = await withReachableIndexes(settings({ PIP_FIND_LINKS: "/srv/wheels" }), {}, offline);
  assert.deepEqual(wheels.settings.env, { PIP_FIND_LINKS: "/srv/wheels", PIP_NO_INDEX: "1" });
  assert.match(wheels.note!, /pip uses only \/srv\/wheels$/);
  const nothing = await withReachableIndexes(settings({}), {}, offline);
  assert.deepEqual(nothing.settings.env, {}, "nothing better to use: left as it is");
  assert.match(nothing.note!, /pip has nothing else to use$/);
  asked.length = 0;
  const proxied = settings({ PIP_EXTRA_INDEX_URL: "file:///srv/simple" });
  assert.deepEqual(await withReachableIndexes(proxied, { HTTPS_PROXY: "http://proxy:3128" }, offline), {
    settings: proxied,
  });
  const noIndex = settings({ PIP_NO_INDEX: "1", PIP_FIND_LINKS: "/srv/wheels" });
  assert.deepEqual(await withReachableIndexes(noIndex, {}, offline), { settings: noIndex });
  assert.deepEqual(asked, [], "nothing probed behind a proxy or without an index");
});

test("a build with an unreachable index: no pip retries, and a missing package's cause names the index", async () => {
  const home = tempHome();
  const fx = await makeFixtureDataset(join(tempDir(), "fx"), { instances: 1 });
  const row = JSON.parse(JSON.stringify(fx.instances[0]!)) as Record<string, unknown>;
  row["instance_id"] = "fixture__calc-offline";
  row["spec"] = { ...(row["spec"] as object), pip_packages: ["pytest", "minisandbox-no-such-package"] };
  const file = join(tempDir(), "offline.json");
  writeFileSync(file, JSON.stringify([row]));
  const down = `http://127.0.0.1:${await closedPort()}/simple`;
  const saved = { index: process.env.PIP_INDEX_URL, retries: process.env.PIP_RETRIES };
  process.env.PIP_INDEX_URL = down; // the user's configuration names an index that does not answer
  delete process.env.PIP_RETRIES; // pip's own retries, as a user has them
  const steps: string[] = [];
  try {
    const [r] = await prepareInstances(await loadDataset(file), {
      home,
      reposDir: fx.reposDir,
      onStep: (_, step) => steps.push(step),
    });
    assert.equal(r!.status, "failed");
    const note = `the package index is unreachable from this machine: ${down} (ECONNREFUSED 127.0.0.1)`;
    assert.match(r!.error!, /package minisandbox-no-such-package is not available/);
    assert.ok(r!.error!.includes(note), r!.error);
    assert.equal(steps.filter((s) => s.startsWith(note)).length, 1, "said once in the progress, as a step");
    const log = readFileSync(r!.logFile!, "utf8");
    assert.ok(log.includes(`# ${note}`), "the build's log says it");
    assert.doesNotMatch(log, /Retrying \(Retry/, "pip never waited on the unreachable index");
  } finally {
    for (const [k, v] of [
      ["PIP_INDEX_URL", saved.index],
      ["PIP_RETRIES", saved.retries],
    ] as const)
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  }
});
