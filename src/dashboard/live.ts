/**
 * The live tab: figures, charts and tables of one snapshot. Built once, then updated in place (rows keyed by id,
 * text set only when it changed), so that 500 sandboxes refreshing every second stay cheap for the browser.
 */
import type { DashboardSnapshot, GroupRow, OutcomeSummary, SandboxRow } from "../view/dashboard-data.js";
import { html, stats, token, type Html } from "../view/html.js";
import { histogram, lineChart, stackedColumns } from "../view/plot.js";
import { formatBytes } from "../util/size.js";
import { ago, card, clock, el, setMarkup, setText } from "./dom.js";

const SANDBOX_COLUMNS = ["sandbox", "owner", "kind", "instance", "state", "age", "memory", "CPU", "procs", "running"];
const GROUP_COLUMNS = ["group", "instance", "owner", "age", "ready", "rollouts", "rewards"];
const OUTCOME_ORDER = [
  "resolved",
  "unresolved",
  "timeout",
  "build_error",
  "sandbox_lost",
  "sandbox_failed",
  "eval_error",
];

/** A table whose rows are kept by key and updated cell by cell. */
class KeyedTable<T> {
  readonly root: HTMLTableElement;
  private readonly body = el("tbody");
  private readonly rows = new Map<string, HTMLTableCellElement[]>();

  constructor(
    columns: readonly string[],
    private readonly cells: (row: T, now: number) => string[],
    private readonly numeric: ReadonlySet<number> = new Set(),
  ) {
    const head = el("tr", {}, ...columns.map((c, i) => el("th", { text: c, class: numeric.has(i) ? "num" : "" })));
    this.root = el("table", { class: "data" }, el("thead", {}, head), this.body);
  }

  update(items: readonly { key: string; row: T }[], now: number): void {
    const keep = new Set(items.map((i) => i.key));
    for (const [key, tds] of this.rows) {
      if (keep.has(key)) continue;
      this.rows.delete(key);
      tds[0]!.parentElement!.remove();
    }
    for (const [at, { key, row }] of items.entries()) {
      const values = this.cells(row, now);
      const tds = this.rows.get(key) ?? this.add(key, values.length);
      for (const [i, v] of values.entries()) setText(tds[i]!, v);
      // The last column is the long one (a command line): all of it on hover.
      const last = tds[tds.length - 1]!;
      if (last.title !== values.at(-1)) last.title = values.at(-1)!;
      // Rows move only when the order changed (moving all of them each time would lay the table out again).
      const tr = tds[0]!.parentElement!;
      if (this.body.children[at] !== tr) this.body.insertBefore(tr, this.body.children[at] ?? null);
    }
  }

  private add(key: string, columns: number): HTMLTableCellElement[] {
    const tds = Array.from({ length: columns }, (_, i) =>
      el("td", { class: this.numeric.has(i) ? "num" : i === columns - 1 ? "cmd" : "" }),
    );
    this.body.append(el("tr", { attrs: { "data-key": key } }, ...tds));
    this.rows.set(key, tds);
    return tds;
  }
}

const sandboxCells = (s: SandboxRow, now: number): string[] => [
  s.id,
  s.owner,
  s.kind,
  s.instanceId ?? "–",
  s.state,
  ago(now - s.createdAt),
  s.memoryBytes === null ? "–" : formatBytes(s.memoryBytes),
  `${s.cpuPercent.toFixed(1)}%`,
  String(s.processes),
  s.command || "(idle)",
];

const groupCells = (g: GroupRow, now: number): string[] => [
  g.id,
  g.instanceId,
  g.owner,
  ago(now - g.createdAt),
  `${Math.round(g.readyMs)} ms`,
  Object.entries(g.states)
    .map(([k, n]) => `${n} ${k}`)
    .join(", "),
  g.rewards.map((r) => (r === null ? "·" : String(r))).join(" "),
];

export class LiveView {
  readonly root = el("div");
  private readonly figures = el("div");
  private readonly charts = { rate: el("div"), latency: el("div"), outcomes: el("div"), rewards: el("div") };
  private readonly filter = el("input", {
    attrs: { type: "search", placeholder: "filter: id, owner, instance, command" },
  });
  private readonly sandboxes = new KeyedTable(SANDBOX_COLUMNS, sandboxCells, new Set([5, 6, 7, 8]));
  private readonly groups = new KeyedTable(GROUP_COLUMNS, groupCells, new Set([3, 4]));
  private readonly sandboxTitle = el("h2", { text: "Sandboxes" });
  private readonly groupTitle = el("h2", { text: "Rollout groups" });
  private readonly latest = el("div");
  private readonly node = el("div", { class: "grid2" });
  private last: DashboardSnapshot | undefined;

  constructor() {
    const c = this.charts;
    this.root.append(
      el("section", { class: "card" }, this.figures),
      el(
        "div",
        { class: "grid2" },
        card("Commands per second", c.rate),
        card("Command latency (s)", c.latency),
        card("Rollout outcomes per minute", c.outcomes),
        card("Rewards of scored rollouts", c.rewards),
      ),
      el(
        "section",
        { class: "card" },
        this.sandboxTitle,
        el("div", { class: "toolbar" }, this.filter),
        el("div", { class: "scroll" }, this.sandboxes.root),
      ),
      el("section", { class: "card" }, this.groupTitle, el("div", { class: "scroll" }, this.groups.root)),
      card("Latest outcomes: why, and what the patch touches", this.latest),
      this.node,
    );
    this.filter.addEventListener("input", () => this.last && this.render(this.last));
  }

  render(s: DashboardSnapshot): void {
    this.last = s;
    this.renderFigures(s);
    this.renderCharts(s);
    const q = this.filter.value.trim().toLowerCase();
    const shown = s.sandboxes
      .filter((r) => !q || [r.id, r.owner, r.instanceId ?? "", r.command].some((t) => t.toLowerCase().includes(q)))
      .sort((a, b) => b.createdAt - a.createdAt);
    setText(this.sandboxTitle, `Sandboxes (${shown.length}${q ? ` of ${s.sandboxes.length}` : ""})`);
    this.sandboxes.update(
      shown.map((r) => ({ key: r.id, row: r })),
      s.at,
    );
    setText(this.groupTitle, `Rollout groups in flight (${s.groups.length})`);
    this.groups.update(
      s.groups.map((g) => ({ key: g.id, row: g })),
      s.at,
    );
    setMarkup(this.latest, latestOutcomes(s.outcomes, s.at));
    this.renderNode(s);
  }

  private renderFigures(s: DashboardSnapshot): void {
    const rollouts = s.sandboxes.filter((r) => r.kind === "rollout").length;
    const rate = s.commands?.perSecond.at(-1)?.[1];
    const p50 = s.commands?.p50.at(-1)?.[1];
    const p99 = s.commands?.p99.at(-1)?.[1];
    const totals = s.outcomes.totals;
    const figures: [string, string][] = [
      ["sandboxes", `${s.sandboxes.length}${s.server.maxSandboxes ? ` / ${s.server.maxSandboxes}` : ""}`],
      ["rollouts", String(rollouts)],
      ["groups", String(s.groups.length)],
      ["resolved", String(totals.resolved ?? 0)],
      ["unresolved", String(totals.unresolved ?? 0)],
      [
        "infra failures",
        String(
          Object.entries(totals)
            .filter(([k]) => k !== "resolved" && k !== "unresolved")
            .reduce((n, [, v]) => n + v, 0),
        ),
      ],
    ];
    figures.push(["flagged patches", String(s.outcomes.flagged)]);
    if (s.server.sessions !== undefined) figures.push(["sessions", String(s.server.sessions)]);
    if (rate !== undefined) figures.push(["commands/s", rate.toFixed(1)]);
    if (p50 !== undefined && p99 !== undefined) figures.push(["latency p50 / p99", `${ms(p50)} / ${ms(p99)}`]);
    if (s.pool) figures.push(["warm pool", `${s.pool.size} / ${s.pool.max}`]);
    if (s.store?.stats) figures.push(["store dedup", `${s.store.stats.dedupRatio.toFixed(2)}×`]);
    setMarkup(this.figures, stats(figures));
  }

  private renderCharts(s: DashboardSnapshot): void {
    const c = s.commands;
    const admin = html`<p class="empty">admins only</p>`;
    setMarkup(
      this.charts.rate,
      c ? lineChart([{ name: "commands/s", points: c.perSecond }], { xLabel: clock }) : admin,
    );
    setMarkup(
      this.charts.latency,
      c
        ? lineChart(
            [
              { name: "p50", points: c.p50 },
              { name: "p90", points: c.p90 },
              { name: "p99", points: c.p99 },
            ],
            { xLabel: clock },
          )
        : admin,
    );
    const kinds = [...new Set([...OUTCOME_ORDER, ...s.outcomes.perMinute.flatMap((m) => Object.keys(m.kinds))])];
    const columns = s.outcomes.perMinute.map((m) => ({
      label: clock(m.at).slice(0, 5),
      parts: kinds.map((k) => ({ kind: k, value: m.kinds[k] ?? 0 })),
    }));
    setMarkup(this.charts.outcomes, stackedColumns(columns, { yLabel: "outcomes" }));
    setMarkup(this.charts.rewards, histogram(s.outcomes.rewards));
  }

  private renderNode(s: DashboardSnapshot): void {
    if (!s.principal.admin) {
      setMarkup(this.node, html``);
      return;
    }
    const layers = s.cache?.layers ?? [];
    const rows = layers.map(
      (l) =>
        html`<tr><td class="mono">${l.key.slice(0, 16)}</td><td class="num">${formatBytes(l.bytes)}</td>
<td class="num">${l.leases}</td><td>${ago(s.at - l.lastUsedAt)} ago</td></tr>`,
    );
    const st = s.store?.stats;
    const store = st
      ? stats([
          ["layers", st.layers],
          ["objects", st.objects],
          ["logical", formatBytes(st.logicalBytes)],
          ["stored", formatBytes(st.storedBytes)],
          ["dedup ratio", `${st.dedupRatio.toFixed(2)}×`],
        ])
      : html`<p class="empty">${s.store?.error ?? "reading…"}</p>`;
    const peers = s.peers?.length
      ? html`<ul>${s.peers.map((p) => html`<li class="mono">${p}</li>`)}</ul>`
      : html`<p class="empty">none registered</p>`;
    setMarkup(
      this.node,
      html`<section class="card"><h2>Node cache: warm environments (${layers.length})</h2>
<table class="data"><thead><tr><th>layer</th><th class="num">size</th><th class="num">leases</th><th>last used</th>
</tr></thead>
<tbody>${rows}</tbody></table>${s.cache?.error ? html`<p class="error">${s.cache.error}</p>` : ""}</section>
<section class="card"><h2>Store</h2>${store}<h3>Fleet peers</h3>${peers}
<p class="muted">sampled in ${s.server.sampleMs} ms</p></section>`,
    );
  }
}

const ms = (seconds: number): string => (seconds >= 1 ? `${seconds.toFixed(2)} s` : `${Math.round(seconds * 1000)} ms`);

const flagPill = (f: string): Html => html`<span class="pill k-flag">${f}</span> `;

/** The newest outcomes with their reasons and integrity flags, and the counts by reason. */
function latestOutcomes(o: OutcomeSummary, now: number): Html {
  if (o.latest.length === 0) return html`<p class="empty">none yet</p>`;
  const rows = o.latest.map(
    (r) => html`<tr><td>${ago(now - r.at)} ago</td><td class="mono">${r.instanceId}</td>
<td><span class="pill k-${token(r.kind)}">${r.kind}</span></td><td>${r.reason}</td>
<td class="num">${r.reward ?? "–"}</td><td>${r.flags.map(flagPill)}</td></tr>`,
  );
  const reasons = Object.entries(o.reasons).sort(([a], [b]) => (a < b ? -1 : 1));
  return html`${stats(reasons)}<div class="scroll"><table class="data outcomes"><thead><tr><th>decided</th>
<th>instance</th><th>outcome</th><th>reason</th><th class="num">reward</th><th>integrity flags</th></tr></thead>
<tbody>${rows}</tbody></table></div>`;
}
