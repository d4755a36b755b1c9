/**
 * HTML built from text that is never trusted: every interpolated value is escaped unless it is `Html` that this
 * module made. Pure (no Node, no DOM): the same code renders files on disk and the dashboard in the browser.
 */

/** Markup made here: interpolating it does not escape it again. */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

export type Content = Html | string | number | boolean | null | undefined | readonly Content[];

const ENTITIES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text as HTML text or attribute value (quotes included), so it can never open a tag or leave an attribute. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ENTITIES[c]!);
}

function render(value: Content): string {
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join("");
  if (value === null || value === undefined || value === false) return "";
  return escapeHtml(String(value));
}

/** `html\`<td>${name}</td>\``: the literal parts as they are, every value escaped (arrays joined). */
export function html(parts: TemplateStringsArray, ...values: readonly Content[]): Html {
  let out = parts[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + parts[i + 1]!;
  return new Html(out);
}

/** Figures as a row of label / value pairs (`<dl class="stats">`). */
export function stats(items: readonly (readonly [string, Content])[]): Html {
  return html`<dl class="stats">${items.map(([k, v]) => html`<div><dt>${k}</dt><dd>${v}</dd></div>`)}</dl>`;
}

/** Markup from this module's own constants only (never from data). */
export const trusted = (markup: string): Html => new Html(markup);

/** A class name or id from a fixed vocabulary plus an index: nothing else reaches `class=` or `id=`. */
export function token(text: string): string {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, "-");
}

/** Long text cut in the middle, saying how much was left out. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  const half = Math.floor(max / 2);
  return `${text.slice(0, half)}\n… ${text.length - max} characters left out …\n${text.slice(-half)}`;
}

export const formatMs = (ms: number): string =>
  ms >= 60_000
    ? `${(ms / 60_000).toFixed(1)} min`
    : ms >= 1000
      ? `${(ms / 1000).toFixed(1)} s`
      : `${Math.round(ms)} ms`;

export const percent = (part: number, whole: number): string =>
  whole === 0 ? "–" : `${((100 * part) / whole).toFixed(1)}%`;
