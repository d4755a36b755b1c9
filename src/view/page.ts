/**
 * A self-contained HTML file (Node only: it hashes its stylesheet). Its Content-Security-Policy allows no script
 * at all and loads nothing: the page opens from disk without a network, and markup that slipped into the data could
 * never run. Filters work with CSS alone (`:has(:checked)`).
 */
import { createHash } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { html, trusted, type Html } from "./html.js";
import { STYLE } from "./style.js";

export interface PageInput {
  title: string;
  body: Html;
  /** Rules of this page only (e.g. its filters), from class names this code chose. */
  css?: string;
}

/** The page's whole text. */
export function pageHtml(p: PageInput): string {
  const css = STYLE + (p.css ?? "");
  const hash = createHash("sha256").update(css).digest("base64");
  // Constants and a base64 digest only (no quote of its own to escape).
  const csp = `default-src 'none'; style-src 'sha256-${hash}'; img-src data:; base-uri 'none'; form-action 'none'`;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${trusted(csp)}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${p.title}</title>
<style>${trusted(css)}</style></head>
<body>${p.body}</body></html>
`.text;
}

/** Write the page to `path`; returns the path. */
export async function writePage(path: string, p: PageInput): Promise<string> {
  await writeFile(path, pageHtml(p));
  return path;
}
