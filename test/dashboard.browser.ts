/**
 * The dashboard of a real `minisandbox serve` (with rollouts on a fixture environment) and the trajectory viewer, in
 * a real headless Chromium: the dashboard refuses without the token exactly as the API does; each principal sees
 * its own sandboxes (an admin all), the page follows a sandbox that closes; a rollout group run by the Python
 * package's TrajectoryRunner shows with its outcomes, and the JSONL its TrajectoryWriter wrote shows every step, in
 * a file opened from disk and in the dashboard. Markup in commands and trajectories is shown as text, never run.
 */
process.env.PIP_RETRIES ??= "0";

import assert from "node:assert/strict";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { get as httpGet } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { before, describe, it } from "node:test";
import type { Browser, Page } from "playwright-core";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { envFor } from "../src/env/environments.js";
import { openStore, pullLayer } from "../src/env/store/index.js";
import { run } from "../src/util/run.js";
import { assertInert, launchBrowser, text, withPage } from "./browser.js";
import { cachedFixtureStore, CLI, tempDir, tempHome } from "./helpers.js";
import { call, runCli, startServe, type ServeProcess } from "./serve-process.js";

const ADMIN = "dashboard-admin-token-0123456789";
const ALICE = "dashboard-alice-token-0123456789";
const HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>';
const PACKAGE = join(import.meta.dirname, "..", "..", "integrations", "python");
const DRIVER = join(import.meta.dirname, "..", "..", "test", "fixtures", "dashboard_driver.py");
const SUITE = "dashboard";

const home = tempHome("msb-dash-home-");
const work = tempDir("msb-dash-work-");
const dirs = join(work, "dirs");
// The server and the browser first (started in a hook, they would be stopped when the hook ends).
const fx = await makeFixtureDataset(join(work, "fx"), { instances: 20 });
const inst = fx.instances[0]!;
const serve: ServeProcess = await startServeOn();
const browser: Browser = await launchBrowser();

async function startServeOn(): Promise<ServeProcess> {
  const dataset = join(work, "dataset.json");
  writeFileSync(dataset, JSON.stringify([inst]));
  const tokens = join(work, "tokens.json");
  writeFileSync(tokens, JSON.stringify({ tokens: [{ name: "alice", token: ALICE }] }), { mode: 0o600 });
  for (const d of ["a", "b"]) mkdirSync(join(dirs, d), { recursive: true });
  return startServe(home, ["--dataset", dataset, "--auth-token", ADMIN, "--tokens-file", tokens, "--allow-dir", dirs]);
}

before(async () => {
  await pullLayer(openStore(join(home, "store")), await cachedFixtureStore(fx), envFor(inst, {}).key);
});

/** The address `minisandbox dashboard` prints for a principal (its token from the environment, as for the SDK). */
async function dashboardUrl(token: string): Promise<string> {
  const env = { ...process.env, MINISANDBOX_API_KEY: token };
  const r = await run(process.execPath, [CLI, "--home", home, "dashboard", "--url", serve.url], { env });
  assert.equal(r.code, 0, r.stderr);
  return r.stdout.trim();
}

/** A dashboard page signed in with `token`, at the address `minisandbox dashboard` prints (token in the fragment). */
async function openDashboard(page: Page, token: string): Promise<void> {
  const url = await dashboardUrl(token);
  assert.equal(url, `${serve.url}/dashboard/#token=${encodeURIComponent(token)}`);
  await page.goto(url);
  await page.waitForSelector(".status.live", { timeout: 20_000 });
  assert.equal(new URL(page.url()).hash, "", "the token is taken out of the address");
}

/** `GET /dashboard/events` on a connection of its own (closed by `close`). */
function openStream(key: string): Promise<{ status: number; body: () => Promise<string>; close: () => void }> {
  return new Promise((resolve, reject) => {
    const req = httpGet(`${serve.url}/dashboard/events`, { headers: { "X-API-Key": key } }, (res) => {
      const body = () => new Promise<string>((done) => res.setEncoding("utf8").on("data", done));
      resolve({ status: res.statusCode ?? 0, body, close: () => req.destroy() });
    });
    req.on("error", reject);
  });
}

const row = (page: Page, id: string) => page.locator(`tr[data-key="${id}"]`);

describe("the dashboard of a real server, in Chromium", { concurrency: 1 }, () => {
  it("refuses without the token exactly as the API does", async () => {
    for (const path of ["/dashboard/state", "/dashboard/events", "/sandboxes"]) {
      const none = await call(serve.url, "GET", path, { key: null });
      assert.deepEqual([none.status, none.json], [403, { detail: "Not authenticated" }], path);
      const wrong = await call(serve.url, "GET", path, { key: "not-the-token-0123456789" });
      assert.deepEqual([wrong.status, wrong.json], [401, { detail: "Invalid API Key" }], path);
    }
    const page = await call(serve.url, "GET", "/dashboard/", { key: null });
    assert.equal(page.status, 200, "the page itself is open: it holds no data");
    assert.equal(page.text, (await call(serve.url, "GET", "/dashboard/", { key: ADMIN })).text, "same page for all");
    assert.match(page.headers.get("content-security-policy") ?? "", /script-src 'self'/);
    assert.equal(page.headers.get("set-cookie"), null, "no cookie");
    // Streams are bounded per principal: the ninth is refused like any spent budget.
    const opened = await Promise.all(Array.from({ length: 8 }, () => openStream(ALICE)));
    assert.deepEqual(
      opened.map((s) => s.status),
      Array(8).fill(200),
    );
    const refused = await openStream(ALICE);
    assert.deepEqual([refused.status, JSON.parse(await refused.body()).code], [429, "limit_reached"]);
    for (const s of opened) s.close();
    // Closed streams give their places back.
    let again: Awaited<ReturnType<typeof openStream>>[] = [];
    for (let i = 0; i < 50 && again.filter((s) => s.status === 200).length < 8; i++) {
      for (const s of again) s.close();
      await sleep(100);
      again = await Promise.all(Array.from({ length: 8 }, () => openStream(ALICE)));
    }
    assert.deepEqual(
      again.map((s) => s.status),
      Array(8).fill(200),
    );
    for (const s of again) s.close();
    await withPage(browser, SUITE, "sign-in", { allow: [serve.url] }, async ({ page, errors }) => {
      await page.goto(`${serve.url}/dashboard/`);
      await page.fill("input[type=password]", "not-the-token-0123456789");
      await page.click("button[type=submit]");
      await page.waitForSelector("text=Invalid API Key");
      assert.equal(await page.locator("table").count(), 0, "no data shown");
      assert.deepEqual(
        errors.filter((e) => !/401|403/.test(e)),
        [],
      );
    });
  });

  it("shows each principal its own sandboxes, markup in a command as text, and follows one that closes", async () => {
    const make = async (key: string, dir: string): Promise<string> => {
      const r = await call(serve.url, "POST", "/sandboxes", { key, body: { dir: join(dirs, dir) } });
      assert.equal(r.status, 201, r.text);
      return r.json.id as string;
    };
    const [mine, theirs] = [await make(ALICE, "a"), await make(ADMIN, "b")];
    const body = { command: ["bash", "-c", `exec -a '${HOSTILE}' sleep 300`] };
    void call(serve.url, "POST", `/sandboxes/${mine}/exec`, { key: ALICE, body }).catch(() => undefined);
    const opts = { allow: [serve.url] };
    await withPage(browser, SUITE, "alice", opts, async ({ page: alice, requests }) => {
      await openDashboard(alice, ALICE);
      await row(alice, mine).waitFor();
      await alice.locator("tbody", { hasText: HOSTILE }).waitFor();
      assert.equal(await row(alice, theirs).count(), 0, "another principal's sandbox is not shown");
      const state = async (key: string) => (await call(serve.url, "GET", "/dashboard/state", { key })).json;
      const [forAlice, forAdmin] = [await state(ALICE), await state(ADMIN)];
      assert.deepEqual([forAlice.commands, forAlice.store, forAlice.peers], [undefined, undefined, undefined]);
      assert.ok(forAdmin.commands && forAdmin.store && forAdmin.peers, "what the API shows admins only");
      await assertInert(alice, "main");
      await withPage(browser, SUITE, "admin", opts, async ({ page: admin }) => {
        await openDashboard(admin, ADMIN);
        await row(admin, mine).waitFor();
        await row(admin, theirs).waitFor();
        assert.equal((await call(serve.url, "DELETE", `/sandboxes/${mine}`, { key: ALICE })).status, 200);
        await row(admin, mine).waitFor({ state: "detached", timeout: 15_000 });
        await row(alice, mine).waitFor({ state: "detached", timeout: 15_000 });
        assert.equal(await row(admin, theirs).count(), 1);
      });
      assert.deepEqual(
        requests.filter((u) => !u.startsWith(serve.url)),
        [],
        "nothing loaded from elsewhere",
      );
    });
    await call(serve.url, "DELETE", `/sandboxes/${theirs}`, { key: ADMIN });
  });

  let jsonl = "";
  it("shows a rollout group run by the Python package, with its outcomes, to its owner", async () => {
    jsonl = join(work, "trajectories.jsonl");
    const gold = join(work, "gold.diff");
    writeFileSync(gold, inst.patch ?? "");
    const r = await run("python3", [DRIVER, serve.url, ALICE, inst.instance_id, gold, jsonl], {
      env: { PATH: process.env.PATH, PYTHONPATH: PACKAGE, PYTHONDONTWRITEBYTECODE: "1", NO_PROXY: "*" },
      timeoutMs: 600_000,
    });
    assert.equal(r.code, 0, `driver failed:\n${r.stdout}\n${r.stderr}`);
    const { group_id: group, rewards } = JSON.parse(r.stdout.trim().split("\n").pop()!) as {
      group_id: string;
      rewards: number[];
    };
    assert.deepEqual(rewards, [0, 1]);
    await withPage(browser, SUITE, "rollouts", { allow: [serve.url] }, async ({ page }) => {
      await openDashboard(page, ALICE);
      await row(page, group).waitFor();
      assert.match(await text(row(page, group)), /0 1|1 0/, "the group's rewards");
      const figure = (name: string) => text(page.locator(`dl.stats div:has(dt:text-is("${name}")) dd`));
      assert.equal(await figure("resolved"), "1");
      assert.equal(await figure("unresolved"), "1");
      // Why each has its reward (the gold patch graded, the other left no diff), and no patch flagged.
      assert.deepEqual(
        [await figure("graded"), await figure("empty_patch"), await figure("flagged patches")],
        ["1", "1", "0"],
      );
      const latest = page.locator("table.outcomes tbody tr");
      assert.deepEqual((await latest.allTextContents()).map((t) => /(graded|empty_patch)/.exec(t)?.[1]).sort(), [
        "empty_patch",
        "graded",
      ]);
      assert.ok((await page.locator("td", { hasText: /^rollout$/ }).count()) >= 2, "its rollouts' sandboxes");
    });
    assert.equal((await call(serve.url, "DELETE", `/rollouts/groups/${group}`, { key: ALICE })).status, 200);
  });

  /** The steps of the driver's two trajectories, shown as text: checked in a file and in the dashboard alike. */
  async function checkTrajectories(page: Page): Promise<void> {
    const rollouts = page.locator(".rollout");
    assert.equal(await rollouts.count(), 2);
    const first = rollouts.nth(0);
    assert.match(await text(first.locator("h3")), /@0\s*scored/);
    assert.match(await text(first.locator("dl.facts")), /reward\s*1/);
    assert.equal(await first.locator(".stepgroup").count(), 3, "echo, apply, submit");
    const step = await text(first.locator(".stepgroup").nth(0));
    for (const text of [HOSTILE, "prompt 100 tok", "completion 20 tok", "loss mask 1", "loss mask 0", "exit 0"])
      assert.ok(step.includes(text), `step 1 shows ${text}`);
    assert.match(await text(rollouts.nth(1).locator("dl.facts")), /reward\s*0/);
    await assertInert(page, "body");
  }

  it("shows a written trajectory's steps as a file from disk and in the dashboard; a fleet's status", async () => {
    assert.ok(existsSync(jsonl), "the trajectories of the previous test");
    const out = join(work, "trajectories.html");
    const r = await runCli(home, ["view", jsonl, "-o", out]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), out);
    const file = pathToFileURL(out).href;
    await withPage(
      browser,
      SUITE,
      "viewer-file",
      { allow: [file], offline: true },
      async ({ page, requests, errors }) => {
        await page.goto(file);
        await checkTrajectories(page);
        assert.deepEqual([requests, errors], [[file], []], "nothing but the file itself, no error");
      },
    );
    // A fleet's status (what `python -m minisandbox.fleet status --html` hands the same command).
    const status = join(work, "fleet.json");
    const nodes = [
      { node: HOSTILE, url: "http://n0:8000", slots: 4, running: 1, usable: true, layer_keys: ["aaaa", "bbbb"] },
      { node: "n1", url: "http://n1:8000", slots: 4, running: 0, usable: false, layer_keys: ["bbbb"] },
    ];
    writeFileSync(status, JSON.stringify({ nodes }));
    const fleetPage = join(work, "fleet.html");
    assert.equal((await runCli(home, ["view", status, "-o", fleetPage])).code, 0);
    const fleetUrl = pathToFileURL(fleetPage).href;
    await withPage(browser, SUITE, "fleet-file", { allow: [fleetUrl], offline: true }, async ({ page }) => {
      await page.goto(fleetUrl);
      const warm = async (key: string) => text(page.locator("tr", { has: page.locator(`td:text-is("${key}")`) }));
      assert.match(await warm("aaaa"), /^aaaawarm1$/);
      assert.match(await warm("bbbb"), /^bbbbwarmwarm2$/);
      assert.ok((await text(page.locator("table").first())).includes(HOSTILE), "a node's name as text");
      await assertInert(page, "body");
    });
    await withPage(browser, SUITE, "viewer-dashboard", { allow: [serve.url] }, async ({ page }) => {
      await openDashboard(page, ADMIN);
      await page.click("nav.tabs button:text-is('Trajectories')");
      await page.setInputFiles("input[type=file]", jsonl);
      await page.waitForSelector(".rollout");
      await checkTrajectories(page);
    });
  });
});
