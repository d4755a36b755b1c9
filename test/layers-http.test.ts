/**
 * Layers between servers and the jobs of a fleet, over real HTTP between real servers on 127.0.0.1: one server holds
 * fixture environments, another fetches them (only missing objects, each verified by hash, once per node however
 * many ask), sandboxes and evaluations on fetched layers, sources only from allowed peers (no request leaves for any
 * other, no redirect followed), tampered bytes refused with the store left as it was, sandboxes deleted by label,
 * the ready file and the exit on stdin's end, and `evaluate --plan` / `--summary-only`.
 */
process.env.PIP_RETRIES ??= "0";

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { makeFixtureDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import { envFor } from "../src/env/environments.js";
import { hasLayer, openStore, pullLayer, readManifest } from "../src/env/store/index.js";
import { startServer, type RunningServer } from "../src/server/server.js";
import { envProvider } from "../src/server/env-provider.js";
import { planPrepare } from "../src/env/prepare.js";
import { plan } from "../src/wire/index.js";
import { cachedFixtureStore, CLI, processesMatching, tempDir, tempHome } from "./helpers.js";
import { call, runCli, type Json } from "./serve-process.js";

const ADMIN = "admin-token";
const USER = "user-token";
const work = tempDir("msb-layers-");
const holderHome = tempHome("msb-layers-a-");
const fetcherHome = tempHome("msb-layers-b-");
let fx: FixtureDataset;
let keys: string[] = [];
let holder: RunningServer;
let fetcher: RunningServer;
const fakes: Server[] = [];

async function server(home: string, peerAllow: string[] = []): Promise<RunningServer> {
  return startServer({
    home,
    tokens: [
      { token: ADMIN, principal: { name: "admin", admin: true } },
      { token: USER, principal: { name: "user", admin: false } },
    ],
    provider: envProvider({ home, instances: fx.instances, reposDir: fx.reposDir }),
    peerAllow,
  });
}

/** A stand-in peer on 127.0.0.1 that answers with `handler` and counts what it was asked. */
async function fakePeer(handler: (path: string) => { status: number; body: Buffer; headers?: Record<string, string> }) {
  const seen: string[] = [];
  const srv = createServer((req, res) => {
    seen.push(req.url ?? "");
    const a = handler(req.url ?? "");
    res.writeHead(a.status, a.headers ?? {});
    res.end(a.body);
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  fakes.push(srv);
  const port = (srv.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, seen };
}

const pulls = (home: string): Json[] => {
  const file = join(home, "cache", "pulls.jsonl");
  return existsSync(file)
    ? readFileSync(file, "utf8")
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Json)
    : [];
};

before(async () => {
  fx = await makeFixtureDataset(join(work, "fx"), { instances: 20 });
  const store = await cachedFixtureStore(fx);
  keys = fx.instances.slice(0, 4).map((i) => envFor(i, {}).key);
  const local = openStore(join(holderHome, "store"));
  for (const k of keys) await pullLayer(local, store, k);
  holder = await server(holderHome);
  fetcher = await server(fetcherHome, ["127.0.0.1"]);
});
after(async () => {
  await fetcher?.close();
  await holder?.close();
  for (const f of fakes) f.close();
});

test("a node lists its layers with their manifests' digests; non-admin tokens are refused", async () => {
  const r = await call(holder.url, "GET", "/store/layers", { key: ADMIN });
  assert.equal(r.status, 200);
  const listed = new Map((r.json.layers as Json[]).map((l) => [l.key as string, l.manifest_sha256 as string]));
  for (const k of keys) {
    const digest = createHash("sha256")
      .update(readFileSync(join(holderHome, "store", "manifests", `${k}.json`)))
      .digest("hex");
    assert.equal(listed.get(k), digest);
  }
  for (const path of ["/store/layers", `/store/layers/${keys[0]}/manifest`, "/peers"])
    assert.equal((await call(holder.url, "GET", path, { key: USER })).status, 403, path);
  assert.equal((await call(holder.url, "GET", "/store/layers", { key: null })).status, 403);
  const bad = await call(holder.url, "GET", "/store/layers/..%2Fx/manifest", { key: ADMIN });
  assert.ok([400, 404].includes(bad.status), String(bad.status));
});

test("a layer comes from a peer once per node, only its missing objects, each verified", async () => {
  const source = { url: holder.url, token: ADMIN };
  // Four requests at once for the same layer: one fetch.
  const answers = await Promise.all(
    [1, 2, 3, 4].map(() =>
      call(fetcher.url, "POST", `/cache/layers/${keys[0]}`, { key: ADMIN, body: { sources: [source] } }),
    ),
  );
  for (const a of answers) assert.equal(a.status, 200, a.text);
  assert.equal(pulls(fetcherHome).filter((p) => p.key === keys[0]).length, 1, "fetched once");
  const first = pulls(fetcherHome)[0]!;
  assert.ok(first.objects > 100 && first.bytes > 1_000_000, JSON.stringify(first));
  assert.equal(first.source, holder.url, "the peer's origin, never its token");
  assert.ok(!readFileSync(join(fetcherHome, "cache", "pulls.jsonl"), "utf8").includes(ADMIN));
  const again = await call(fetcher.url, "POST", `/cache/layers/${keys[0]}`, {
    key: ADMIN,
    body: { sources: [source] },
  });
  assert.equal(again.json.fetched, false);
  // The second layer of the same repository shares almost everything with the first.
  const second = await call(fetcher.url, "POST", `/cache/layers/${keys[1]}`, {
    key: ADMIN,
    body: { sources: [source] },
  });
  assert.equal(second.json.fetched, true);
  assert.ok(second.json.objects_fetched < first.objects / 10, JSON.stringify(second.json));
  // What arrived is the holder's layer, object for object.
  const m = await readManifest(openStore(join(fetcherHome, "store")), keys[1]!);
  const theirs = await readManifest(openStore(join(holderHome, "store")), keys[1]!);
  assert.deepEqual(m, theirs);
  // Ready in the node cache, in whichever form this host shows layers (a layer image, or hard-linked trees).
  const forms = ["layers", "images"].filter((f) => existsSync(join(fetcherHome, "cache", f)));
  const shown = forms.flatMap((f) => readdirSync(join(fetcherHome, "cache", f)));
  assert.ok(shown.includes(keys[1]!), `in the node cache: ${shown.join(", ")}`);
});

test("a sandbox and an evaluation on a layer fetched from a peer; the job's files come back", async () => {
  const inst = fx.instances[2]!;
  const source = { url: holder.url, token: ADMIN };
  const sb = await call(fetcher.url, "POST", "/sandboxes", {
    key: ADMIN,
    body: { env_key: keys[2], sources: [source], labels: { job: "j1" } },
  });
  assert.equal(sb.status, 201, sb.text);
  const head = await call(fetcher.url, "POST", `/sandboxes/${sb.json.id}/exec`, {
    key: ADMIN,
    body: { command: "git rev-parse HEAD", cwd: "/testbed" },
  });
  assert.equal(head.json.stdout.trim(), inst.base_commit);
  assert.equal((await call(fetcher.url, "DELETE", `/sandboxes/${sb.json.id}`, { key: ADMIN })).status, 200);
  const ev = await call(fetcher.url, "POST", "/evaluations", {
    key: ADMIN,
    body: {
      instance: fx.instances[3],
      model_patch: fx.instances[3]!.patch,
      model_name_or_path: "gold",
      sources: [source],
      build: false,
      labels: { job: "j2" },
    },
  });
  assert.equal(ev.status, 200, ev.text);
  assert.equal(ev.json.status, "resolved", JSON.stringify(ev.json.error));
  assert.equal(ev.json.layer, "fetched");
  assert.deepEqual(Object.keys(ev.json.files).sort(), [
    "eval.sh",
    "integrity.json",
    "patch.diff",
    "report.json",
    "run_instance.log",
    "test_output.txt",
    "timings.json",
  ]);
  const report = JSON.parse(Buffer.from(ev.json.files["report.json"], "base64").toString()) as Json;
  assert.equal(report[fx.instances[3]!.instance_id].resolved, true);
  assert.equal(Buffer.from(ev.json.files["patch.diff"], "base64").toString(), fx.instances[3]!.patch);
  assert.equal((await call(fetcher.url, "GET", "/sandboxes", { key: ADMIN })).json.sandboxes.length, 0);
  assert.equal(readdirSync(join(fetcherHome, "server", "jobs")).length, 0, "the job's scratch is gone");
  // A non-admin cannot run a fleet's jobs; a row without a known environment is that row's failure.
  const refused = await call(fetcher.url, "POST", "/evaluations", {
    key: USER,
    body: { instance: fx.instances[3], model_patch: "", model_name_or_path: "m" },
  });
  assert.equal(refused.status, 403);
  const unknown = await call(fetcher.url, "POST", "/environments", {
    key: ADMIN,
    body: { instance: { ...fx.instances[3], repo: "nobody/nothing", spec: undefined, version: "9" }, build: true },
  });
  assert.equal(unknown.status, 200, unknown.text);
  assert.equal(unknown.json.status, "failed");
  assert.match(unknown.json.error, /nobody\/nothing/);
});

test("sources only from allowed or registered peers; never a redirect; tampered bytes refused", async () => {
  const lonelyHome = tempHome("msb-layers-c-");
  const lonely = await server(lonelyHome);
  after(() => lonely.close());
  const peer = await fakePeer(() => ({ status: 404, body: Buffer.from("{}") }));
  const r = await call(lonely.url, "POST", `/cache/layers/${keys[3]}`, {
    key: ADMIN,
    body: { sources: [{ url: peer.url }] },
  });
  assert.equal(r.status, 403, r.text);
  assert.match(r.text, /not an allowed peer/);
  const sb = await call(lonely.url, "POST", "/sandboxes", {
    key: ADMIN,
    body: { env_key: keys[3], sources: [{ url: peer.url }] },
  });
  assert.equal(sb.status, 403);
  assert.deepEqual(peer.seen, [], "no request left for a source that is not allowed");
  for (const url of ["file:///etc/passwd", "http://user:pw@127.0.0.1:1/", "ftp://127.0.0.1/"]) {
    const bad = await call(lonely.url, "POST", `/cache/layers/${keys[3]}`, {
      key: ADMIN,
      body: { sources: [{ url }] },
    });
    assert.equal(bad.status, 400, `${url}: ${bad.text}`);
  }

  // A registered peer that redirects elsewhere: the redirect is not followed.
  const target = await fakePeer(() => ({ status: 200, body: Buffer.from("{}") }));
  const redirecting = await fakePeer((p) => ({
    status: 302,
    body: Buffer.alloc(0),
    headers: { location: target.url + p },
  }));
  const reg = await call(lonely.url, "PUT", "/peers", { key: ADMIN, body: { urls: [redirecting.url] } });
  assert.deepEqual(reg.json.peers, [redirecting.url]);
  const redirected = await call(lonely.url, "POST", `/cache/layers/${keys[3]}`, {
    key: ADMIN,
    body: { sources: [{ url: redirecting.url }] },
  });
  assert.equal(redirected.status, 503, redirected.text);
  assert.equal(redirected.json.code, "layer_unavailable");
  assert.deepEqual(target.seen, []);

  // A peer serving the real manifest but a tampered object: refused, the store left without the layer.
  const manifestBytes = readFileSync(join(holderHome, "store", "manifests", `${keys[3]}.json`));
  const tampering = await fakePeer((p) => {
    if (p.endsWith("/manifest")) return { status: 200, body: manifestBytes };
    return { status: 200, body: Buffer.from("not the bytes you asked for") };
  });
  await call(lonely.url, "PUT", "/peers", { key: ADMIN, body: { urls: [tampering.url] } });
  const tampered = await call(lonely.url, "POST", `/cache/layers/${keys[3]}`, {
    key: ADMIN,
    body: { sources: [{ url: tampering.url }] },
  });
  assert.equal(tampered.status, 503);
  assert.match(tampered.text, /does not match its hash|ended early|more bytes/);
  assert.equal(await hasLayer(openStore(join(lonelyHome, "store")), keys[3]!), false);
  // A manifest that is not the one the holder advertised: refused before any object moves.
  const wrongDigest = await call(lonely.url, "POST", `/cache/layers/${keys[3]}`, {
    key: ADMIN,
    body: { sources: [{ url: tampering.url, manifest_sha256: "0".repeat(64) }] },
  });
  assert.equal(wrongDigest.status, 503);
  assert.match(wrongDigest.text, /hashes to/);
});

test("sandboxes deleted by label, and never all at once", async () => {
  const make = (labels: Record<string, string>) =>
    call(fetcher.url, "POST", "/sandboxes", { key: ADMIN, body: { labels } });
  const ids = [];
  for (const job of ["x", "x", "y"]) ids.push((await make({ fleet_job: job })).json.id as string);
  const listed = await call(fetcher.url, "GET", "/sandboxes?label=fleet_job%3Dx", { key: ADMIN });
  assert.equal(listed.json.sandboxes.length, 2);
  const none = await call(fetcher.url, "DELETE", "/sandboxes", { key: ADMIN });
  assert.equal(none.status, 400);
  const gone = await call(fetcher.url, "DELETE", "/sandboxes?label=fleet_job%3Dx", { key: ADMIN });
  assert.deepEqual(gone.json.deleted, ids.slice(0, 2).sort());
  const left = await call(fetcher.url, "GET", "/sandboxes", { key: ADMIN });
  assert.deepEqual(
    left.json.sandboxes.map((s: Json) => s.id),
    [ids[2]],
  );
  // Another principal's sandboxes are not theirs to delete.
  const theirs = await call(fetcher.url, "DELETE", "/sandboxes?label=fleet_job%3Dy", { key: USER });
  assert.deepEqual(theirs.json.deleted, []);
  await call(fetcher.url, "DELETE", "/sandboxes?label=fleet_job%3Dy", { key: ADMIN });
});

test("serve --ready-file and --exit-with-stdin: a supervisor's view of the server", async () => {
  const home = tempHome("msb-layers-d-");
  const ready = join(home, "ready.json");
  const child = spawn(
    process.execPath,
    [CLI, "--home", home, "serve", "--port", "0", "--log-level", "silent", "--ready-file", ready, "--exit-with-stdin"],
    { stdio: ["pipe", "ignore", "pipe"], env: { ...process.env, MINISANDBOX_AUTH_TOKEN: ADMIN } },
  );
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  after(() => child.kill("SIGKILL"));
  for (let i = 0; i < 400 && !existsSync(ready); i++) await sleep(50);
  const info = JSON.parse(readFileSync(ready, "utf8")) as { url: string; pid: number };
  assert.equal(info.pid, child.pid);
  const sb = await call(info.url, "POST", "/sandboxes", { key: ADMIN, body: {} });
  assert.equal(sb.status, 201);
  child.stdin!.end(); // the supervisor is gone
  assert.equal(await exited, 0);
  await sleep(200);
  assert.deepEqual(processesMatching(sb.json.id as string), [], "its sandbox closed with it");
});

test("prepare --plan prints the declared PreparePlan; a node takes its instance as it is, and only such", async () => {
  const home = tempHome("msb-layers-p-");
  const printed = await runCli(home, ["prepare", "--dataset", fx.datasetPath, "--plan"]);
  assert.equal(printed.code, 0, printed.stderr);
  const p = plan.PreparePlan.parse(JSON.parse(printed.stdout), ["stdout"]);
  assert.deepEqual(plan.PreparePlan.fromCamel(await planPrepare(fx.instances)), p, "the library's plan, nothing else");
  assert.equal(p.environments.length, new Set(fx.instances.map((i) => envFor(i, {}).key)).size);
  const first = p.environments.find((e) => e.env_key === keys[0])!;
  assert.equal(first.instance.task_format, "swebench");
  const present = await call(holder.url, "POST", "/environments", {
    key: ADMIN,
    body: { instance: first.instance, build: false },
  });
  assert.equal(present.status, 200, present.text);
  assert.equal(present.json.status, "present");
  assert.equal(present.json.env_key, first.env_key, "the plan's instance, taken as it is");
  const { task_format: _, ...raw } = first.instance;
  const rawRow = await call(holder.url, "POST", "/environments", { key: ADMIN, body: { instance: raw, build: false } });
  assert.equal(rawRow.status, 422, "a row that was not normalized is refused, not guessed at");
  assert.match(rawRow.text, /task_format/);
});

test("evaluate --plan lays a run out; --summary-only sums up what is on disk", async () => {
  const home = tempHome("msb-layers-e-");
  const ids = fx.instances.slice(0, 3).map((i) => i.instance_id);
  const preds = join(work, "preds.json");
  writeFileSync(
    preds,
    JSON.stringify([
      { instance_id: ids[0], model_name_or_path: "m/x", model_patch: fx.instances[0]!.patch },
      { instance_id: ids[1], model_name_or_path: "m/x", model_patch: "" },
    ]),
  );
  const args = ["evaluate", "--dataset", fx.datasetPath, "--predictions", preds, "--run-id", "p1"];
  const sel = ids.flatMap((i) => ["--instance-ids", i]);
  const reportDir = join(work, "plan-report");
  const printed = await runCli(home, [...args, ...sel, "--report-dir", reportDir, "--plan"]);
  assert.equal(printed.code, 0, printed.stderr);
  const p = plan.EvaluationPlan.parse(JSON.parse(printed.stdout), ["stdout"]);
  assert.deepEqual(
    p.jobs.map((j) => j.instance_id),
    [ids[0]],
  );
  assert.deepEqual(
    p.records.map((r) => [r.instance_id, r.status]),
    [
      [ids[1], "empty_patch"],
      [ids[2], "no_prediction"],
    ],
  );
  assert.equal(p.jobs[0].env_key, envFor(fx.instances[0]!, {}).key);
  assert.equal(p.jobs[0].log_dir, join(reportDir, "logs", "run_evaluation", "p1", "m__x", ids[0]!));
  assert.deepEqual(p.unknown_prediction_ids, []);
  const noRun = await runCli(
    home,
    [...args, "--plan"].filter((a) => a !== "p1" && a !== "--run-id"),
  );
  assert.equal(noRun.code, 2, "--plan without --run-id is refused");
  const summary = await runCli(home, [...args, ...sel, "--report-dir", reportDir, "--summary-only", "--json"]);
  assert.equal(summary.code, 0, summary.stderr);
  const s = plan.EvaluationSummary.parse(JSON.parse(summary.stdout), ["stdout"]);
  assert.deepEqual(s.summary.error_ids, [ids[0]], "planned but not run: no report, an error as in the harness");
  assert.deepEqual(s.summary.empty_patch_ids, [ids[1]]);
  assert.deepEqual(s.summary.incomplete_ids, [ids[2]]);
  assert.equal(s.summaryPath, join(reportDir, "m__x.p1.json"));
});
