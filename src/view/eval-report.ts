/**
 * An evaluation run as one page: the summary, resolve rate per repository, then every instance with its verdict,
 * its FAIL_TO_PASS and PASS_TO_PASS tests (which flipped), its integrity flags, the model patch as a diff, the test
 * output and timings.
 * Filters by verdict and repository are radio buttons and CSS (`:has`): the page needs no script.
 */
import { clip, formatMs, html, percent, stats, token, type Content, type Html } from "./html.js";
import { barChart } from "./plot.js";

export const VERDICTS = ["resolved", "unresolved", "error", "empty patch", "incomplete"] as const;
export type Verdict = (typeof VERDICTS)[number];

export interface TestLists {
  success: readonly string[];
  failure: readonly string[];
}

export interface ReportInstance {
  id: string;
  repo: string;
  verdict: Verdict;
  /** Why an errored instance has no grade (e.g. "Patch Apply Failed"). */
  errorKind?: string;
  /** Set when that error is the attempt's own doing (e.g. "eval_timeout": its code ran too long), not ours. */
  cause?: string;
  /** What the patch touches that changes how tests run (the instance's integrity.json). */
  flags?: readonly ReportFlag[];
  patch?: string;
  testOutput?: string;
  patchApplied?: boolean;
  failToPass?: TestLists;
  passToPass?: TestLists;
  /** Phase name → milliseconds (the instance's timings.json). */
  timings?: Readonly<Record<string, number>>;
}

export interface ReportFlag {
  kind: string;
  path: string;
  reason: string;
}

export interface ReportInput {
  runId: string;
  model: string;
  dataset: string;
  generatedAt: string;
  instances: readonly ReportInstance[];
  /** The run's own figures, when known (its timings file). */
  instancesPerMinute?: number;
  evalWallMs?: number;
}

const MAX_OUTPUT = 24_000;
const MAX_PASSED_SHOWN = 200;

function summary(input: ReportInput): Html {
  const n = input.instances.length;
  const count = (v: Verdict): number => input.instances.filter((i) => i.verdict === v).length;
  const items: [string, Content][] = [
    ["instances", n],
    ["resolve rate", percent(count("resolved"), n)],
  ];
  for (const v of VERDICTS) items.push([v, count(v)]);
  items.push(["flagged", input.instances.filter((i) => i.flags?.length).length]);
  if (input.instancesPerMinute !== undefined) items.push(["instances/min", input.instancesPerMinute]);
  return stats(items);
}

/** Repositories in name order, each with its instances and resolved count. */
export function byRepository(
  instances: readonly ReportInstance[],
): { repo: string; total: number; resolved: number }[] {
  const m = new Map<string, { total: number; resolved: number }>();
  for (const i of instances) {
    const r = m.get(i.repo) ?? { total: 0, resolved: 0 };
    r.total++;
    if (i.verdict === "resolved") r.resolved++;
    m.set(i.repo, r);
  }
  return [...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([repo, r]) => ({ repo, ...r }));
}

function filters(repos: readonly string[]): Html {
  const verdicts = VERDICTS.map((v) => html`<label><input type="radio" name="fv" id="fv-${token(v)}"> ${v}</label>`);
  const repoInputs = repos.map((r, i) => html`<label><input type="radio" name="fr" id="fr-${i}"> ${r}</label>`);
  return html`<fieldset class="filters"><legend>verdict</legend>
<label><input type="radio" name="fv" id="fv-all" checked> all</label>${verdicts}</fieldset>
<fieldset class="filters"><legend>repository</legend>
<label><input type="radio" name="fr" id="fr-all" checked> all</label>${repoInputs}</fieldset>`;
}

/** The page's own rules: one per verdict and one per repository index (no data reaches the stylesheet). */
export function reportCss(repoCount: number): string {
  const rules = VERDICTS.map((v) => `main:has(#fv-${token(v)}:checked) .inst:not(.v-${token(v)}) { display: none; }`);
  for (let i = 0; i < repoCount; i++) rules.push(`main:has(#fr-${i}:checked) .inst:not(.r-${i}) { display: none; }`);
  return `\n${rules.join("\n")}\n`;
}

function diffHtml(patch: string): Html {
  const lines = patch.split("\n").map((l) => {
    const cls = /^(diff --git|\+\+\+ |--- |index )/.test(l)
      ? "file"
      : l.startsWith("@@")
        ? "hunk"
        : l.startsWith("+")
          ? "add"
          : l.startsWith("-")
            ? "del"
            : "";
    return html`<span class="${cls}">${l || " "}</span>`;
  });
  return html`<pre class="diff">${lines}</pre>`;
}

function testTable(name: string, expected: string, t: TestLists | undefined): Html {
  if (!t) return html`<h3>${name}</h3><p class="empty">not graded</p>`;
  const failed = t.failure.map(
    (n) =>
      html`<tr><td class="mono">${n}</td><td>${expected}</td><td><span class="pill k-failed">failed</span></td></tr>`,
  );
  const shown = t.success.slice(0, MAX_PASSED_SHOWN);
  const passed = shown.map(
    (n) =>
      html`<tr><td class="mono">${n}</td><td>${expected}</td><td><span class="pill k-passed">passed</span></td></tr>`,
  );
  const more = t.success.length - shown.length;
  return html`<h3>${name}: ${t.success.length}/${t.success.length + t.failure.length} pass</h3>
<table class="data"><thead><tr><th>test</th><th>expected</th><th>after the patch</th></tr></thead>
<tbody>${failed}${passed}</tbody></table>${more > 0 ? html`<p class="muted">… and ${more} more passed</p>` : ""}`;
}

const ratio = (t: TestLists | undefined): string =>
  t ? `${t.success.length}/${t.success.length + t.failure.length}` : "–";

function timingsTable(t: Readonly<Record<string, number>> | undefined): Html {
  if (!t) return html``;
  const rows = Object.entries(t)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => html`<tr><td>${k}</td><td class="num">${formatMs(v)}</td></tr>`);
  return html`<h3>Timings</h3><table class="data"><tbody>${rows}</tbody></table>`;
}

function flagsTable(flags: readonly ReportFlag[] | undefined): Html {
  if (!flags?.length) return html``;
  const rows = flags.map(
    (f) => html`<tr><td><span class="pill k-flag">${f.kind}</span></td><td class="mono">${f.path}</td>
<td>${f.reason}</td></tr>`,
  );
  return html`<h3>Integrity flags: the patch changes how tests run</h3>
<table class="data"><thead><tr><th>kind</th><th>path</th><th>why</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function errorHtml(i: ReportInstance): Html {
  if (!i.errorKind) return html``;
  return html`<span class="error">${i.errorKind}${i.cause ? html` (${i.cause}: the attempt's own doing)` : ""}</span>`;
}

function instanceHtml(i: ReportInstance, repoIndex: number): Html {
  const total = i.timings?.totalMs;
  return html`<details class="inst v-${token(i.verdict)} r-${repoIndex}"><summary>
<span class="pill k-${token(i.verdict)}">${i.verdict}</span><strong class="mono">${i.id}</strong>
<span class="muted">${i.repo}</span>${errorHtml(i)}
${i.flags?.length ? html`<span class="pill k-flag">flagged ${i.flags.length}</span>` : ""}
<span>FAIL_TO_PASS ${ratio(i.failToPass)}</span><span>PASS_TO_PASS ${ratio(i.passToPass)}</span>
${total !== undefined ? html`<span class="muted">${formatMs(total)}</span>` : ""}</summary>${flagsTable(i.flags)}
${testTable("FAIL_TO_PASS", "FAIL → PASS", i.failToPass)}${testTable("PASS_TO_PASS", "PASS → PASS", i.passToPass)}
<h3>Model patch${i.patchApplied === false ? html` <span class="error">(did not apply)</span>` : ""}</h3>
${i.patch ? diffHtml(i.patch) : html`<p class="empty">no patch</p>`}
<h3>Test output</h3>
${i.testOutput ? html`<pre>${clip(i.testOutput, MAX_OUTPUT)}</pre>` : html`<p class="empty">none</p>`}
${timingsTable(i.timings)}</details>`;
}

/** The report's body (with `reportCss` for its filters). */
export function evalReportHtml(input: ReportInput): Html {
  const repos = byRepository(input.instances);
  const index = new Map(repos.map((r, i) => [r.repo, i]));
  const bars = repos.map((r) => ({
    label: r.repo,
    fraction: r.total ? r.resolved / r.total : 0,
    text: `${r.resolved}/${r.total} (${percent(r.resolved, r.total)})`,
  }));
  const wall = input.evalWallMs !== undefined ? ` · evaluated in ${formatMs(input.evalWallMs)}` : "";
  return html`<header class="top"><h1>Evaluation ${input.runId}</h1>
<span class="sub">${input.model} · ${input.dataset} · ${input.generatedAt}${wall}</span></header>
<main><section class="card"><h2>Summary</h2>${summary(input)}</section>
<section class="card"><h2>Resolve rate per repository</h2>${barChart(bars)}</section>
<section class="card"><h2>Instances</h2>${filters(repos.map((r) => r.repo))}
${input.instances.map((i) => instanceHtml(i, index.get(i.repo) ?? 0))}</section></main>`;
}
