/**
 * Small SVG charts: horizontal bars (a rate per repository), a histogram (rewards), stacked columns (outcome kinds
 * over time) and lines (rates, latencies over time). Colours come from classes (`c0`…`c7`, or a kind's class) in
 * the shared stylesheet; labels are escaped like every other text (`html.ts`).
 */
import { html, token, type Html } from "./html.js";

export interface Bar {
  label: string;
  /** 0 to 1. */
  fraction: number;
  /** Shown after the bar, e.g. "3/4 (75.0%)". */
  text: string;
}

const num = (n: number): string => (Number.isFinite(n) ? String(Math.round(n * 10) / 10) : "0");

/** One row per bar: label, a bar as long as its fraction, its text. */
export function barChart(bars: readonly Bar[], o: { width?: number; labelWidth?: number } = {}): Html {
  const width = o.width ?? 640;
  const labelW = o.labelWidth ?? 220;
  const textW = 130;
  const barW = width - labelW - textW;
  const rowH = 22;
  const rows = bars.map((b, i) => {
    const y = i * rowH;
    const w = Math.max(0, Math.min(1, b.fraction)) * barW;
    return html`<g class="bar-row"><title>${b.label}: ${b.text}</title>
<text x="${num(labelW - 6)}" y="${num(y + 15)}" class="label end">${b.label}</text>
<rect x="${num(labelW)}" y="${num(y + 4)}" width="${num(barW)}" height="14" class="track"></rect>
<rect x="${num(labelW)}" y="${num(y + 4)}" width="${num(w)}" height="14" class="c0"></rect>
<text x="${num(labelW + barW + 6)}" y="${num(y + 15)}" class="label">${b.text}</text></g>`;
  });
  const height = Math.max(rowH, bars.length * rowH);
  const [w, h] = [num(width), num(height)];
  return html`<svg class="chart" viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" role="img">${rows}</svg>`;
}

export interface Column {
  label: string;
  /** Stacked from the bottom, in this order. */
  parts: readonly { kind: string; value: number }[];
}

const PLOT = { width: 640, height: 180, left: 44, bottom: 22, top: 8 };

/** Columns of stacked parts (e.g. outcomes per minute by kind); each kind coloured by its class `k-<kind>`. */
export function stackedColumns(columns: readonly Column[], o: { yLabel?: string } = {}): Html {
  const { width, height, left, bottom, top } = PLOT;
  const max = Math.max(1, ...columns.map((c) => c.parts.reduce((n, p) => n + p.value, 0)));
  const plotH = height - bottom - top;
  const step = (width - left) / Math.max(1, columns.length);
  const bars = columns.map((c, i) => {
    let y = height - bottom;
    const x = left + i * step + step * 0.1;
    const rects = c.parts
      .filter((p) => p.value > 0)
      .map((p) => {
        const h = (p.value / max) * plotH;
        y -= h;
        return html`<rect x="${num(x)}" y="${num(y)}" width="${num(step * 0.8)}" height="${num(h)}"
 class="k-${token(p.kind)}"><title>${c.label}: ${p.value} ${p.kind}</title></rect>`;
      });
    const every = Math.max(1, Math.ceil(columns.length / 8));
    const tick =
      i % every === 0
        ? html`<text x="${num(x + step * 0.4)}" y="${num(height - 6)}" class="label mid">${c.label}</text>`
        : "";
    return html`${rects}${tick}`;
  });
  return frame(html`${bars}`, max, o.yLabel ?? "");
}

/** Counts of `values` in `bins` equal bins from `min` to `max` (a value equal to `max` is in the last bin). */
export function binCounts(values: readonly number[], bins: number, min: number, max: number): number[] {
  const counts = new Array<number>(bins).fill(0);
  const span = max - min || 1;
  for (const v of values) {
    if (!Number.isFinite(v) || v < min || v > max) continue;
    counts[Math.min(bins - 1, Math.floor(((v - min) / span) * bins))]!++;
  }
  return counts;
}

/** A histogram of values between `min` and `max`. */
export function histogram(values: readonly number[], o: { bins?: number; min?: number; max?: number } = {}): Html {
  const bins = o.bins ?? 10;
  const [min, max] = [o.min ?? 0, o.max ?? 1];
  const counts = binCounts(values, bins, min, max);
  const width = (max - min) / bins;
  const columns = counts.map((n, i) => ({
    label: num(min + i * width),
    parts: [{ kind: "count", value: n }],
  }));
  return stackedColumns(columns, { yLabel: "rollouts" });
}

export interface Series {
  name: string;
  /** [x, y], x increasing (e.g. milliseconds since the epoch). */
  points: readonly (readonly [number, number])[];
}

/** Lines over a shared x axis; `xLabel` turns an x into its tick text. */
export function lineChart(series: readonly Series[], o: { yLabel?: string; xLabel?: (x: number) => string } = {}) {
  const { width, height, left, bottom, top } = PLOT;
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) return html`<p class="empty">no data yet</p>`;
  const [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  const yMax = Math.max(...all.map((p) => p[1]), 1e-9) * 1.1;
  const sx = (x: number): number => left + ((x - x0) / (x1 - x0 || 1)) * (width - left - 4);
  const sy = (y: number): number => height - bottom - (y / yMax) * (height - bottom - top);
  const lines = series.map((s, i) => {
    const d = s.points.map((p, j) => `${j === 0 ? "M" : "L"}${num(sx(p[0]))},${num(sy(p[1]))}`).join(" ");
    const last = s.points.at(-1);
    const dot = last
      ? html`<circle cx="${num(sx(last[0]))}" cy="${num(sy(last[1]))}" r="3" class="c${i % 8}"></circle>`
      : "";
    return html`<path d="${d}" class="line c${i % 8}"><title>${s.name}</title></path>${dot}`;
  });
  const fmt = o.xLabel ?? num;
  const ticks = html`<text x="${num(left)}" y="${num(height - 6)}" class="label">${fmt(x0)}</text>
<text x="${num(width - 4)}" y="${num(height - 6)}" class="label end">${fmt(x1)}</text>`;
  const legend = series.map(
    (s, i) =>
      html`<text x="${num(left + 8 + i * 110)}" y="${num(top + 10)}" class="label legend t${i % 8}">${s.name}</text>`,
  );
  return frame(html`${lines}${ticks}${legend}`, yMax, o.yLabel ?? "");
}

/** Axes, the top of the y scale, and the chart's content. */
function frame(content: Html, yMax: number, yLabel: string): Html {
  const { width, height, left, bottom, top } = PLOT;
  return html`<svg class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img">
<line x1="${left}" y1="${top}" x2="${left}" y2="${height - bottom}" class="axis"></line>
<line x1="${left}" y1="${height - bottom}" x2="${width}" y2="${height - bottom}" class="axis"></line>
<text x="${left - 4}" y="${top + 8}" class="label end">${num(yMax)}</text>
<text x="${left - 4}" y="${height - bottom}" class="label end">0</text>
<text x="4" y="${(height - bottom) / 2}" class="label">${yLabel}</text>${content}</svg>`;
}
