/** The one stylesheet of every page: evaluation reports, trajectory files and the dashboard. No web fonts. */
export const STYLE = `
:root { --fg: #1d232b; --muted: #5d6773; --line: #d9dee4; --bg: #f6f7f9; --card: #fff; --accent: #2563eb;
  --ok: #16a34a; --bad: #dc2626; --warn: #d97706; --info: #7c3aed; --none: #94a3b8; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
  background: var(--bg); }
header.top { background: #111827; color: #f9fafb; padding: 10px 20px; display: flex; gap: 16px; align-items: baseline;
  flex-wrap: wrap; }
header.top h1 { font-size: 17px; margin: 0; }
header.top .sub { color: #cbd5e1; }
main { padding: 16px 20px; max-width: 1400px; }
section.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px;
  margin: 0 0 16px; }
h2 { font-size: 15px; margin: 0 0 8px; }
h3 { font-size: 14px; margin: 12px 0 6px; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 0 16px; }
.stats { display: flex; flex-wrap: wrap; gap: 10px 28px; margin: 0; }
.stats div { min-width: 90px; }
.stats dt { color: var(--muted); font-size: 12px; }
.stats dd { margin: 0; font-size: 20px; font-weight: 600; }
table.data { border-collapse: collapse; width: 100%; font-size: 13px; }
table.data th, table.data td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
table.data th { color: var(--muted); font-weight: 600; background: #f1f3f6; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.cmd, .mono, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
td.cmd { max-width: 420px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
pre { background: #f8fafc; border: 1px solid var(--line); border-radius: 4px; padding: 8px; overflow: auto;
  max-height: 480px; white-space: pre-wrap; word-break: break-word; margin: 4px 0; }
pre.diff span { display: block; }
pre.diff .add { background: #e7f7ec; color: #14532d; }
pre.diff .del { background: #fdecec; color: #7f1d1d; }
pre.diff .hunk { color: var(--info); }
pre.diff .file { font-weight: 700; }
.pill { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
  color: #fff; background: var(--none); white-space: nowrap; }
.pill.k-resolved, .pill.k-passed, .pill.k-scored, .pill.k-ready { background: var(--ok); }
.pill.k-unresolved, .pill.k-failed, .pill.k-broke { background: var(--bad); }
.pill.k-error, .pill.k-infra-failure, .pill.k-lost, .pill.k-flag { background: var(--warn); }
.pill.k-empty-patch, .pill.k-incomplete, .pill.k-closed { background: var(--none); }
.pill.k-busy, .pill.k-rewarding { background: var(--accent); }
.muted { color: var(--muted); }
.empty { color: var(--muted); font-style: italic; }
details { border-top: 1px solid var(--line); padding: 6px 0; }
details > summary { cursor: pointer; display: flex; gap: 10px; align-items: center; flex-wrap: wrap; }
details > summary::marker { color: var(--muted); }
.filters { display: flex; flex-wrap: wrap; gap: 6px 14px; border: 0; padding: 0; margin: 0 0 8px; }
.filters legend { font-weight: 600; padding: 0 8px 0 0; float: left; }
.filters label { cursor: pointer; white-space: nowrap; }
.compare { display: grid; grid-auto-flow: column; grid-auto-columns: minmax(340px, 1fr); gap: 12px;
  overflow-x: auto; }
.step { border: 1px solid var(--line); border-radius: 4px; margin: 6px 0; padding: 4px 8px; background: #fff; }
.step header { display: flex; gap: 10px; font-size: 12px; color: var(--muted); flex-wrap: wrap; }
.step.own { border-left: 4px solid var(--accent); }
.step.env { border-left: 4px solid var(--none); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 4px 0; font-size: 13px; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
.rollout h3 { margin-top: 4px; }
.stepgroup h4 { margin: 10px 0 2px; font-size: 13px; }
.traj:has(#tf-scored:checked) .rollout.s-infra, .traj:has(#tf-infra:checked) .rollout.s-scored { display: none; }
.login { max-width: 520px; margin: 60px auto; }
.login input[type=password] { width: 100%; padding: 6px; font: inherit; }
.login button, .toolbar button { padding: 5px 14px; font: inherit; cursor: pointer; }
.toolbar { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; margin: 0 0 12px; }
.status { font-size: 12px; }
.status.live { color: var(--ok); }
.status.down { color: var(--bad); }
.error { color: var(--bad); }
nav.tabs { display: flex; gap: 4px; }
nav.tabs button { background: transparent; color: #cbd5e1; border: 0; padding: 4px 10px; font: inherit;
  cursor: pointer; border-radius: 4px; }
nav.tabs button[aria-selected=true] { background: #374151; color: #fff; }
.scroll { max-height: 520px; overflow: auto; }
svg.chart { max-width: 100%; height: auto; display: block; }
svg .label { font-size: 11px; fill: var(--muted); }
svg .label.end { text-anchor: end; }
svg .label.mid { text-anchor: middle; }
svg .axis { stroke: var(--line); }
svg .track { fill: #eef1f5; }
svg .c0, svg .t0, svg .k-count { fill: var(--accent); stroke: var(--accent); }
svg .c1, svg .t1 { fill: var(--ok); stroke: var(--ok); } svg .c2, svg .t2 { fill: var(--warn); stroke: var(--warn); }
svg .c3, svg .t3 { fill: var(--info); stroke: var(--info); } svg .c4, svg .t4 { fill: var(--bad); stroke: var(--bad); }
svg .c5, svg .t5 { fill: #0891b2; stroke: #0891b2; } svg .c6, svg .t6 { fill: #be185d; stroke: #be185d; }
svg .c7, svg .t7 { fill: #4d7c0f; stroke: #4d7c0f; }
svg text.legend, svg rect { stroke: none; }
svg path.line { fill: none; stroke-width: 2; }
svg .k-resolved { fill: var(--ok); } svg .k-unresolved { fill: var(--bad); }
svg .k-timeout { fill: var(--warn); } svg .k-build-error { fill: #a16207; } svg .k-sandbox-lost { fill: #c2410c; }
svg .k-sandbox-failed { fill: #9a3412; } svg .k-eval-error { fill: var(--info); } svg .k-policy-error { fill: #be185d; }
svg .k-other { fill: var(--none); }
`;
