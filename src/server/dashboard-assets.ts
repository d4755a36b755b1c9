/**
 * The dashboard's files: one page, one stylesheet and the browser modules compiled from src/dashboard and
 * src/view (`dist/web/`). They hold no data, are the same for every server, and are the only paths besides
 * /healthz answered without a token; every byte of data comes from the authenticated routes.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { STYLE } from "../view/style.js";

export interface Asset {
  type: string;
  body: string;
}

/** No script but our own files, no style but our stylesheet, nothing from elsewhere, never in a frame. */
export const DASHBOARD_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "cache-control": "no-store",
};

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>minisandbox dashboard</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="assets/style.css">
<script type="module" src="assets/dashboard/app.js"></script>
</head><body><noscript>The dashboard needs JavaScript.</noscript><div id="app"></div></body></html>
`;

/** The compiled browser modules: every .js under dist/web/src, by its path there. */
function browserModules(): Map<string, Asset> {
  const root = fileURLToPath(new URL("../../web/src/", import.meta.url));
  const out = new Map<string, Asset>();
  const walk = (dir: string): void => {
    let entries: import("node:fs").Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return; // not built: the page says the dashboard is missing
    }
    for (const e of entries) {
      const path = join(dir, e.name);
      if (e.isDirectory()) walk(path);
      else if (e.name.endsWith(".js"))
        out.set(relative(root, path), { type: "text/javascript; charset=utf-8", body: readFileSync(path, "utf8") });
    }
  };
  walk(root);
  return out;
}

let assets: Map<string, Asset> | undefined;

/** URL path → file, read once per process. */
export function dashboardAssets(): ReadonlyMap<string, Asset> {
  if (assets) return assets;
  assets = new Map([
    ["/dashboard/", { type: "text/html; charset=utf-8", body: PAGE }],
    ["/dashboard/assets/style.css", { type: "text/css; charset=utf-8", body: STYLE }],
  ]);
  for (const [path, asset] of browserModules()) assets.set(`/dashboard/assets/${path}`, asset);
  return assets;
}

/** Paths answered without a token: the page, its stylesheet and modules (exactly these), and `/dashboard`. */
export function isDashboardAsset(path: string): boolean {
  return path === "/dashboard" || dashboardAssets().has(path);
}
