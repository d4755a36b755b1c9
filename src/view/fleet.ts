/**
 * A fleet at a glance (`python -m minisandbox.fleet status --html`): its nodes with their slots and load, and
 * which environment is warm on which node. The input is the fleet driver's status as JSON, read defensively.
 */
import { html, stats, type Html } from "./html.js";

export interface FleetNode {
  node: string;
  url: string;
  slots: number;
  running: number;
  usable: boolean;
  /** Environments (layer keys) warm on this node. */
  layerKeys: string[];
}

type Rec = Record<string, unknown>;
const isRec = (v: unknown): v is Rec => typeof v === "object" && v !== null && !Array.isArray(v);
const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);

/** The nodes of a status document (`{"nodes": [...]}`), or undefined when it is not one. */
export function parseFleetStatus(doc: unknown): FleetNode[] | undefined {
  if (!isRec(doc) || !Array.isArray(doc.nodes)) return undefined;
  return doc.nodes.filter(isRec).map((n) => ({
    node: String(n.node ?? ""),
    url: String(n.url ?? ""),
    slots: num(n.slots),
    running: num(n.running),
    usable: n.usable !== false,
    layerKeys: Array.isArray(n.layer_keys) ? n.layer_keys.map(String) : [],
  }));
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * The nodes of a fleet status file: one JSON document (`{"nodes": [...]}`, what `fleet status --html` hands
 * `minisandbox view`), or the JSON lines `fleet status --json` prints (its last `result` event); undefined when
 * the text is neither (a trajectories JSONL, say).
 */
export function fleetStatusOf(text: string): FleetNode[] | undefined {
  const whole = parseJson(text);
  if (whole !== undefined) return parseFleetStatus(whole);
  const lines = text.split("\n").filter((l) => l.trim());
  for (const line of lines.reverse()) {
    const doc = parseJson(line);
    if (isRec(doc) && doc.event === "result") return parseFleetStatus(doc);
  }
  return undefined;
}

export function fleetHtml(nodes: readonly FleetNode[]): Html {
  const keys = [...new Set(nodes.flatMap((n) => n.layerKeys))].sort();
  const holders = (k: string): number => nodes.filter((n) => n.layerKeys.includes(k)).length;
  const rows = nodes.map(
    (n) => html`<tr><td>${n.node}</td><td class="mono">${n.url}</td><td class="num">${n.running} / ${n.slots}</td>
<td><span class="pill k-${n.usable ? "ready" : "lost"}">${n.usable ? "usable" : "lost"}</span></td>
<td class="num">${n.layerKeys.length}</td></tr>`,
  );
  const cells = (k: string): Html[] => nodes.map((n) => html`<td>${n.layerKeys.includes(k) ? "warm" : ""}</td>`);
  const warm = keys.map(
    (k) => html`<tr><td class="mono">${k.slice(0, 16)}</td>${cells(k)}<td class="num">${holders(k)}</td></tr>`,
  );
  return html`<section class="card"><h2>Nodes</h2>${stats([
    ["nodes", nodes.length],
    ["usable", nodes.filter((n) => n.usable).length],
    ["slots", nodes.reduce((s, n) => s + n.slots, 0)],
    ["running", nodes.reduce((s, n) => s + n.running, 0)],
    ["environments", keys.length],
  ])}
<table class="data"><thead><tr><th>node</th><th>server</th><th class="num">running / slots</th><th>state</th>
<th class="num">warm environments</th></tr></thead><tbody>${rows}</tbody></table></section>
<section class="card"><h2>Where each environment is warm</h2><div class="scroll"><table class="data">
<thead><tr><th>environment</th>${nodes.map((n) => html`<th>${n.node}</th>`)}<th class="num">nodes</th></tr></thead>
<tbody>${warm}</tbody></table></div></section>`;
}
