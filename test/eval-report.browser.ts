/**
 * `minisandbox evaluate --html` end to end: real evaluations of the fixture (gold, empty, and a patch that does not
 * apply) write a self-contained HTML report beside the harness's files, which stay byte for byte what they are
 * without it; the report, opened from disk in a real headless Chromium without a network, shows the right verdicts,
 * tests and patches, filters by verdict, and shows markup in an instance id, a test name and a patch as text.
 */
process.env.PIP_RETRIES ??= "0";

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { before, describe, it } from "node:test";
import type { Browser, Page } from "playwright-core";
import { envFor } from "../src/env/environments.js";
import { openStore, pullLayer } from "../src/env/store/index.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { assertInert, launchBrowser, text, withPage } from "./browser.js";
import { cachedFixtureStore, tempDir, tempHome } from "./helpers.js";
import { runCli } from "./serve-process.js";

const SUITE = "eval-report";
const MARKUP_ID = 'fixture__calc-1-<img src=x onerror="window.__pwned=1">';
const MARKUP_TEST = "tests/test_ops.py::<script>window.__pwned=2</script>";
const MARKUP_LINE = '+<script>window.__pwned=3</script><img src=x onerror="window.__pwned=4">';

const home = tempHome("msb-evalhtml-home-");
const work = tempDir("msb-evalhtml-");
const reports = join(work, "reports");
const fx = await makeFixtureDataset(join(work, "fx"), { instances: 20 });
const [first, second] = [fx.instances[0]!, fx.instances[1]!];
const browser: Browser = await launchBrowser();
const dataset = join(work, "dataset.json");

before(async () => {
  const store = await cachedFixtureStore(fx);
  for (const i of [first, second]) await pullLayer(openStore(join(home, "store")), store, envFor(i, {}).key);
  // The first task again, under an id and with a FAIL_TO_PASS test that carry markup (gold cannot pass that test).
  const markup = { ...first, instance_id: MARKUP_ID, FAIL_TO_PASS: [...(first.FAIL_TO_PASS as string[]), MARKUP_TEST] };
  writeFileSync(dataset, JSON.stringify([first, second, markup]));
});

async function evaluate(runId: string, predictions: string, more: string[] = []): Promise<string> {
  const args = ["evaluate", "--dataset", dataset, "--predictions", predictions, "--run-id", runId];
  const r = await runCli(home, [...args, "--report-dir", reports, "--workers", "2", ...more]);
  assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  const m = /^HTML report written to (.+)$/m.exec(r.stdout);
  assert.ok(m, `the path is printed:\n${r.stdout}`);
  return m[1]!;
}

/** Every file under the reports directory with its digest. */
function files(): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else out[relative(reports, p)] = createHash("sha256").update(readFileSync(p)).digest("hex");
    }
  };
  walk(reports);
  return out;
}

/** Open a report from disk, offline; `fn` checks it; nothing but the file may be requested. */
async function openReport(name: string, path: string, fn: (page: Page) => Promise<void>): Promise<void> {
  const file = pathToFileURL(path).href;
  await withPage(browser, SUITE, name, { allow: [file], offline: true }, async ({ page, requests, errors }) => {
    await page.goto(file);
    await fn(page);
    await assertInert(page, "body");
    assert.deepEqual([requests, errors], [[file], []], "nothing but the file itself, no error");
  });
}

const verdicts = async (page: Page): Promise<Record<string, string>> => {
  const out: Record<string, string> = {};
  for (const inst of await page.locator("details.inst").all())
    out[await text(inst.locator("summary strong"))] = await text(inst.locator("summary .pill").first());
  return out;
};

describe("HTML evaluation reports, in Chromium from disk", { concurrency: 1 }, () => {
  it("gold: resolved where tests pass, flipped tests listed; filters by verdict; JSON files unchanged", async () => {
    const path = await evaluate("gold", "gold", ["--html"]);
    assert.equal(path, join(reports, "gold.gold.html"));
    await openReport("gold", path, async (page) => {
      assert.deepEqual(await verdicts(page), {
        [first.instance_id]: "resolved",
        [second.instance_id]: "resolved",
        [MARKUP_ID]: "unresolved",
      });
      assert.match(await page.locator("svg.chart").first().innerHTML(), /2\/3 \(66\.7%\)/);
      const markup = page.locator("details.inst", { hasText: MARKUP_ID });
      await markup.locator("summary").click();
      const failed = markup.locator("tr", { hasText: MARKUP_TEST });
      assert.equal(await text(failed.locator(".pill")), "failed", "the test that did not flip");
      assert.equal(
        await markup.locator("tr .pill.k-passed").count(),
        (first.FAIL_TO_PASS as string[]).length + (first.PASS_TO_PASS as string[]).length,
      );
      await page.check("#fv-unresolved");
      assert.equal(await page.locator("details.inst:visible").count(), 1);
      assert.equal(await text(page.locator("details.inst:visible summary strong")), MARKUP_ID);
      await page.check("#fv-all");
      assert.equal(await page.locator("details.inst:visible").count(), 3);
    });
    // The report is one more file; every file of the harness is what a run without it writes.
    rmSync(path);
    const before = files();
    await evaluate("gold", "gold", ["--summary-only", "--html"]);
    assert.deepEqual(files(), { ...before, "gold.gold.html": files()["gold.gold.html"]! });
    rmSync(path);
    const r = await runCli(home, [
      "evaluate",
      "--dataset",
      dataset,
      "--predictions",
      "gold",
      "--run-id",
      "gold",
      "--report-dir",
      reports,
      "--summary-only",
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(files(), before, "the same bytes without --html");
  });

  it("empty predictions: every instance an empty patch", async () => {
    const path = await evaluate("empty", "empty", ["--html"]);
    await openReport("empty", path, async (page) => {
      assert.deepEqual(Object.values(await verdicts(page)), ["empty patch", "empty patch", "empty patch"]);
      assert.match(await text(page.locator("dl.stats")), /resolve rate\s*0\.0%/);
    });
  });

  it("a patch with markup that does not apply: an error, its patch as text, its conftest.py flagged", async () => {
    const patch = `diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n`;
    const conftest =
      "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n" +
      '@@ -0,0 +1 @@\n+collect_ignore = ["tests"]\n';
    const preds = join(work, "markup-preds.json");
    const body = `${patch} not in the file\n-nor this\n${MARKUP_LINE}\n${conftest}`;
    writeFileSync(
      preds,
      JSON.stringify([{ instance_id: second.instance_id, model_name_or_path: "m", model_patch: body }]),
    );
    const path = await evaluate("markup", preds, ["--html"]);
    await openReport("markup", path, async (page) => {
      const v = await verdicts(page);
      assert.deepEqual([v[second.instance_id], v[first.instance_id]], ["error", "incomplete"]);
      const inst = page.locator("details.inst", { hasText: second.instance_id });
      assert.equal(await text(inst.locator("summary .error")), "Patch Apply Failed");
      assert.equal(await text(inst.locator("summary .pill.k-flag")), "flagged 1");
      await inst.locator("summary").click();
      assert.equal(await text(inst.locator("pre.diff .add").first()), MARKUP_LINE);
      assert.match(await text(inst.locator("table", { hasText: "conftest.py" })), /conftest\s*conftest\.py\s*pytest/);
      assert.match(await text(page.locator("dl.stats")), /flagged\s*1/);
    });
  });
});
