/**
 * What SWE-ReX clients find on the server: instance-addressed runtimes (`/run/<instance>/<key>/…`: created by the
 * first request, shared by parallel first requests, deleted by `close`, fresh afterwards, apart per token), instance
 * ids matched case-insensitively (image-based runners lower-case them), non-interactive defaults (pagers are `cat`,
 * pip without retries offline), the home's dotfiles, and `python` on request.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer, type RunningServer } from "../src/server/index.js";
import { envProvider } from "../src/server/env-provider.js";
import { loadDataset } from "../src/tasks/index.js";
import { preparedFixture, type PreparedFixture } from "./agent-clients.js";
import { tempDir } from "./helpers.js";

function writeJson(rows: object[]): string {
  const file = join(tempDir(), "dataset.json");
  writeFileSync(file, JSON.stringify(rows));
  return file;
}
import { call } from "./serve-process.js";

const ADMIN = "dropin-admin";
const BOB = "dropin-bob";
let srv: RunningServer;
let fx: PreparedFixture;

before(async () => {
  fx = await preparedFixture();
  const instances = await loadDataset(fx.dataset);
  srv = await startServer({
    home: fx.home,
    provider: envProvider({ home: fx.home, instances }),
    authToken: ADMIN,
    tokens: [{ token: BOB, principal: { name: "bob", admin: false } }],
    allowDirs: [tmpdir()],
    rateLimit: 0,
  });
});
after(() => srv?.close());

const execute = (path: string, command: string, key = ADMIN) =>
  call(srv.url, "POST", `${path}/execute`, { key, body: { command, shell: true } });

test("instance-addressed runtimes: made on first use, shared, deleted on close, fresh after, per token", async () => {
  const base = "/run/fixture__calc-1/attempt-0";
  const probe = await call(srv.url, "GET", `${base}/is_alive`, { key: ADMIN });
  assert.deepEqual(probe.json, { is_alive: true, message: "" });
  assert.equal((await call(srv.url, "GET", `${base}/`, { key: ADMIN })).json.message, "hello world");
  assert.equal(srv.registry.size, 0, "probes create nothing");

  const first = await Promise.all(Array.from({ length: 4 }, () => execute(base, "hostname; git rev-parse HEAD")));
  for (const r of first) assert.equal(r.status, 200, r.text);
  const hosts = new Set(first.map((r) => r.json.stdout));
  assert.equal(hosts.size, 1, "parallel first requests share one sandbox");
  const calc1 = fx.instances.find((i) => i.instance_id === "fixture__calc-1")!;
  assert.match([...hosts][0] as string, new RegExp(`\\n${calc1.base_commit}\\n$`));
  const live = srv.registry.list({ name: "admin", admin: true });
  assert.equal(live.length, 1);
  assert.deepEqual([live[0]!.instanceId, live[0]!.labels.run_key], ["fixture__calc-1", "attempt-0"]);

  const session = await call(srv.url, "POST", `${base}/create_session`, {
    key: ADMIN,
    body: { startup_source: ["/root/.bashrc"], startup_timeout: 10 },
  });
  assert.equal(session.status, 200, session.text);
  assert.equal(session.json.output, "", "the home has a silent .bashrc");
  const log = await call(srv.url, "POST", `${base}/run_in_session`, {
    key: ADMIN,
    body: { command: "cd /testbed && git log -3", timeout: 20, check: "silent" },
  });
  assert.equal(log.status, 200, `git log never waits in a pager: ${log.text}`);
  assert.match(log.json.output, /^commit [0-9a-f]{40}/);

  const other = await execute("/run/fixture__calc-1/attempt-1", "hostname");
  assert.notEqual(other.json.stdout, first[0]!.json.stdout, "another key, another sandbox");
  const bobs = await execute(base, "hostname", BOB);
  assert.notEqual(bobs.json.stdout, first[0]!.json.stdout, "another token never reaches this one's sandbox");
  assert.equal(srv.registry.size, 3);

  const closed = await call(srv.url, "POST", `${base}/close`, { key: ADMIN });
  assert.deepEqual([closed.status, closed.json], [200, {}]);
  assert.equal(srv.registry.size, 2, "close deleted the sandbox");
  const again = await execute(base, "hostname; test -e /root/.bashrc && echo dotfiles");
  assert.notEqual(again.json.stdout.split("\n")[0], (first[0]!.json.stdout as string).split("\n")[0]);
  assert.match(again.json.stdout, /dotfiles/);
  for (const [path, key] of [
    [base, ADMIN],
    ["/run/fixture__calc-1/attempt-1", ADMIN],
    [base, BOB],
  ] as const)
    await call(srv.url, "POST", `${path}/close`, { key });
  assert.equal(srv.registry.size, 0);
  assert.deepEqual((await call(srv.url, "POST", `${base}/close`, { key: ADMIN })).json, {}, "close is idempotent");
});

test("delete_on_close: SWE-ReX's close ends a sandbox that asked for it; others keep SWE-ReX's meaning", async () => {
  const doomed = await call(srv.url, "POST", "/sandboxes", { key: ADMIN, body: { delete_on_close: true } });
  const kept = await call(srv.url, "POST", "/sandboxes", { key: ADMIN, body: {} });
  for (const sb of [doomed, kept]) {
    const r = await call(srv.url, "POST", `/sandboxes/${sb.json.id}/close`, { key: ADMIN });
    assert.deepEqual([r.status, r.json], [200, {}]);
  }
  assert.equal((await call(srv.url, "GET", `/sandboxes/${doomed.json.id}`, { key: ADMIN })).status, 404);
  assert.equal((await call(srv.url, "GET", `/sandboxes/${kept.json.id}`, { key: ADMIN })).status, 200);
  await call(srv.url, "DELETE", `/sandboxes/${kept.json.id}`, { key: ADMIN });
});

test("instance ids: a lower-cased id finds its instance; an unknown one is refused with its name", async () => {
  const calc2 = fx.instances.find((i) => i.instance_id === "fixture__calc-2")!;
  const r = await call(srv.url, "POST", "/sandboxes", { key: ADMIN, body: { instance_id: "FIXTURE__CALC-2" } });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.json.meta.instance_id, "fixture__calc-2");
  const head = await call(srv.url, "POST", `/sandboxes/${r.json.id}/exec`, {
    key: ADMIN,
    body: { command: "git -C /testbed rev-parse HEAD" },
  });
  assert.equal(head.json.stdout, `${calc2.base_commit}\n`);
  await call(srv.url, "DELETE", `/sandboxes/${r.json.id}`, { key: ADMIN });
  const unknown = await execute("/run/nobody__nothing-1/k", "true");
  assert.notEqual(unknown.status, 200);
  assert.match(unknown.text, /unknown instance nobody__nothing-1/);
  assert.equal(srv.registry.size, 0);
});

test("an instance whose environment cannot be built: one line, the cause first, then the fix", async () => {
  const rows = JSON.parse(readFileSync(fx.dataset, "utf8")) as Record<string, unknown>[];
  const bad = { ...rows[0], instance_id: "nobody__missing-1", repo: "nobody/missing" };
  const s2 = await startServer({
    home: fx.home,
    provider: envProvider({ home: fx.home, instances: await loadDataset(writeJson([bad])), reposDir: tempDir() }),
    authToken: ADMIN,
  });
  try {
    const r = await call(s2.url, "POST", "/sandboxes", { key: ADMIN, body: { instance_id: "nobody__missing-1" } });
    assert.equal(r.json.code, "build_failed", r.text);
    assert.match(
      r.json.detail,
      /^build failed at step "fetch": repository nobody\/missing not found.*; fix: give local /,
    );
    assert.doesNotMatch(r.json.detail, /\n/);
  } finally {
    await s2.close();
  }
});

test("non-interactive defaults and dotfiles in every sandbox; python on request", async () => {
  const r = await call(srv.url, "POST", "/sandboxes", { key: ADMIN, body: { python: "3.11" } });
  assert.equal(r.status, 201, r.text);
  const run = (command: string, env?: Record<string, string>) =>
    call(srv.url, "POST", `/sandboxes/${r.json.id}/exec`, { key: ADMIN, body: { command, env } });
  const env = await run("echo $PAGER $GIT_PAGER $MANPAGER $PIP_RETRIES; python --version; pip --version");
  assert.match(env.json.stdout, /^cat cat cat 0\nPython 3\.11\.\d+\npip .*\(python 3\.11\)\n$/);
  assert.equal((await run("echo $PAGER", { PAGER: "less" })).json.stdout, "less\n", "the caller's env wins");
  const dot = await run(
    "bash -lc 'echo login ok' && cat ~/.bashrc | wc -l && env -i HOME=/root bash -ic 'echo $PAGER'",
  );
  assert.match(dot.json.stdout, /^login ok\n\d+\ncat\n$/);
  await call(srv.url, "DELETE", `/sandboxes/${r.json.id}`, { key: ADMIN });
  const missing = await call(srv.url, "POST", "/sandboxes", { key: ADMIN, body: { python: "2.1" } });
  assert.equal(missing.status, 404);
  assert.match(missing.json.detail, /Python 2\.1 is not installed/);
  const bad = await call(srv.url, "POST", "/sandboxes", { key: ADMIN, body: { python: "latest" } });
  assert.equal(bad.status, 400);
  assert.equal(srv.registry.size, 0);
});
