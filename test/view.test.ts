/**
 * The renderers shared by the reports, the trajectory viewer and the dashboard (src/view), on hostile input:
 * escaping of every interpolated value and attribute, trajectory records of any shape, bucket quantiles, and the
 * file pages' policy (no script allowed at all; their stylesheet hashed).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { bucketQuantile } from "../src/server/dashboard-history.js";
import { evalReportHtml, reportCss } from "../src/view/eval-report.js";
import { fleetHtml, fleetStatusOf, parseFleetStatus } from "../src/view/fleet.js";
import { escapeHtml, html, token } from "../src/view/html.js";
import { pageHtml } from "../src/view/page.js";
import { barChart, binCounts } from "../src/view/plot.js";
import { parseTrajectories, trajectoriesHtml } from "../src/view/trajectory.js";
import { run } from "../src/util/run.js";
import { CLI, tempDir } from "./helpers.js";

const EVIL = `"><script>x()</script><img src=x onerror='y()'>&amp;`;

/** No tag, attribute or entity of `EVIL` survives as markup: only its escaped form. */
function assertEscaped(markup: string): void {
  assert.ok(!markup.includes("<script>x()"), "no script tag from data");
  assert.ok(!markup.includes("<img src=x"), "no img tag from data");
  assert.ok(!markup.includes(`'y()'`), "no quote left to close an attribute");
  assert.ok(markup.includes(escapeHtml(EVIL)), "the text is there, escaped");
}

test("values are escaped in text and attributes; markup made here is not escaped twice", () => {
  assert.equal(
    escapeHtml(`<a href="x" title='y'>&</a>`),
    "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;",
  );
  const inner = html`<b>${EVIL}</b>`;
  assert.equal(html`<p title="${EVIL}">${inner}${[EVIL, 1, null, false]}</p>`.text.split(escapeHtml(EVIL)).length, 4);
  assertEscaped(html`<p title="${EVIL}">${EVIL}</p>`.text);
  assert.equal(token(`Empty Patch"><x`), "empty-patch-x");
  assertEscaped(barChart([{ label: EVIL, fraction: 2, text: EVIL }]).text);
});

test("trajectory records of any shape are read without throwing, and shown escaped", () => {
  const lines = [
    JSON.stringify({
      trajectory_id: EVIL,
      group_id: EVIL,
      status: "scored",
      reward: 1,
      resolved: true,
      messages: [
        { role: "system", content: EVIL },
        { role: "user", content: EVIL },
        { role: "assistant", content: EVIL },
        { role: "user", content: { nested: EVIL } },
      ],
      turns: [{ usage: { prompt_tokens: 7, completion_tokens: "NaN" }, exec_ms: 3 }],
      outcome: { note: EVIL },
    }),
    JSON.stringify({ messages: "not a list", turns: [null, 5], loss_mask: "x", reward: "1", failure: EVIL }),
    "[1, 2]",
    "{not json",
    "",
  ];
  const parsed = parseTrajectories(lines.join("\n"));
  assert.equal(parsed.trajectories.length, 2);
  assert.deepEqual(
    parsed.problems.map((p) => p.split(":")[0]),
    ["line 3", "line 4"],
  );
  const [a, b] = parsed.trajectories;
  assert.deepEqual(
    a!.messages.map((m) => m.own),
    [false, false, true, false],
    "loss mask from the roles when the record has none",
  );
  assert.equal(a!.turns[0]!.promptTokens, 7);
  assert.equal(a!.turns[0]!.completionTokens, undefined);
  assert.equal(b!.reward, null, "a reward that is not a number is none");
  const out = trajectoriesHtml(parsed, EVIL).text;
  assertEscaped(out);
  assert.ok(out.includes("2 unreadable line(s)"));
});

test("an evaluation report escapes ids, repositories, test names, patches, outputs and flags", () => {
  const out = evalReportHtml({
    runId: EVIL,
    model: EVIL,
    dataset: EVIL,
    generatedAt: "now",
    instances: [
      {
        id: EVIL,
        repo: EVIL,
        verdict: "unresolved",
        errorKind: EVIL,
        cause: EVIL,
        flags: [{ kind: EVIL, path: EVIL, reason: EVIL }],
        patch: `+${EVIL}\n-${EVIL}`,
        testOutput: EVIL,
        failToPass: { success: [EVIL], failure: [EVIL] },
        passToPass: { success: [], failure: [EVIL] },
      },
    ],
  }).text;
  assertEscaped(out);
  assert.ok(out.includes("Integrity flags") && out.includes("flagged 1"), "the patch's flags are shown");
  assert.ok(!/class="[^"]*[<>'][^"]*"/.test(out), "class names come from a fixed vocabulary");
  assert.equal(reportCss(2).match(/#fr-\d/g)?.length, 2, "one rule per repository index, none from a name");
});

test("a file page allows no script and names its stylesheet by hash", () => {
  const page = pageHtml({ title: EVIL, body: html`<p>${EVIL}</p>`, css: ".x{}" });
  const csp = /<meta http-equiv="Content-Security-Policy" content="([^"]+)">/.exec(page)![1]!;
  assert.match(csp, /^default-src 'none'; style-src 'sha256-[^']+'/);
  assert.ok(!csp.includes("script-src"), "scripts fall under default-src 'none'");
  const css = /<style>([\s\S]*)<\/style>/.exec(page)![1]!;
  assert.equal(csp.match(/sha256-([^']+)/)![1], createHash("sha256").update(css).digest("base64"));
  assertEscaped(page);
});

test("quantiles from cumulative buckets; bins take the top value in the last bin", () => {
  const bounds = [0.01, 0.1, 1];
  assert.equal(bucketQuantile(bounds, [0, 0, 0], 0.5), 0, "no observation");
  assert.equal(bucketQuantile(bounds, [10, 10, 10], 0.5), 0.005, "inside the first bucket");
  assert.ok(Math.abs(bucketQuantile(bounds, [5, 10, 10], 0.75) - 0.055) < 1e-9, "interpolated in the second");
  assert.equal(bucketQuantile(bounds, [0, 0, 4], 0.99), 0.1 + 0.9 * 0.99, "the top one");
  assert.deepEqual(binCounts([0, 0.05, 0.5, 1, 1, 2, Number.NaN], 2, 0, 1), [2, 3]);
});

test("a fleet's status: nodes and warm environments, read defensively and escaped", () => {
  assert.equal(parseFleetStatus([1, 2]), undefined);
  assert.equal(parseFleetStatus({ nodes: "x" }), undefined);
  const nodes = parseFleetStatus({
    nodes: [
      { node: EVIL, url: EVIL, slots: 4, running: 1, usable: true, layer_keys: ["k1", EVIL] },
      { node: "n2", slots: "x", usable: false, layer_keys: "nope" },
      7,
    ],
  })!;
  assert.deepEqual(
    nodes.map((n) => [n.slots, n.usable, n.layerKeys.length]),
    [
      [4, true, 2],
      [0, false, 0],
    ],
  );
  const out = fleetHtml(nodes).text;
  assertEscaped(out);
  assert.equal(out.match(/<td>warm<\/td>/g)?.length, 2, "each environment warm where it is");
});

test("a fleet's status is found in its JSON document or in `fleet status --json` lines, never in trajectories", () => {
  const nodes = [{ node: "n0", url: "http://n0:1", slots: 2, running: 0, usable: true, layer_keys: ["k"] }];
  assert.deepEqual(fleetStatusOf(JSON.stringify({ nodes }, null, 2))?.[0]?.layerKeys, ["k"]);
  const lines = [
    { event: "log", message: "starting" },
    { event: "result", nodes },
  ].map((l) => JSON.stringify(l));
  assert.deepEqual(fleetStatusOf(`${lines.join("\n")}\n`)?.[0]?.node, "n0", "the result event of --json");
  const trajectory = JSON.stringify({ rollout_id: "r", group_id: "g", steps: [], reward: 1 });
  assert.equal(fleetStatusOf(trajectory), undefined, "one trajectory line is not a status");
  assert.equal(fleetStatusOf(`${trajectory}\n${trajectory}\n`), undefined);
  assert.equal(fleetStatusOf(""), undefined);
});

test("minisandbox view: a fleet's --json output becomes its page; a file it cannot use is bad input", async () => {
  const dir = tempDir("msb-view-cli-");
  const status = join(dir, "status.jsonl");
  const nodes = [{ node: "node-a", url: "http://a:1", slots: 2, running: 1, usable: true, layer_keys: ["k1"] }];
  writeFileSync(
    status,
    `${JSON.stringify({ event: "log", message: "m" })}\n${JSON.stringify({ event: "result", nodes })}\n`,
  );
  const ok = await run(process.execPath, [CLI, "view", status]);
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(ok.stdout.trim(), join(dir, "status.html"));
  assert.match(readFileSync(join(dir, "status.html"), "utf8"), /<h1>Fleet<\/h1>[\s\S]*node-a/);
  writeFileSync(join(dir, "empty.jsonl"), "");
  for (const [file, why] of [
    ["missing.jsonl", /cannot be read \(ENOENT\); give a file that exists/],
    ["empty.jsonl", /is neither a trajectories JSONL nor a fleet's status \(it is empty\); give /],
  ] as const) {
    const r = await run(process.execPath, [CLI, "view", join(dir, file)]);
    assert.deepEqual([r.code, r.stdout], [2, ""], file);
    assert.match(r.stderr, why);
    assert.equal(r.stderr.trim().split("\n").length, 1, "one line");
  }
});
