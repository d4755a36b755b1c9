/**
 * A real headless Chromium (Debian's `chromium`) for tests, driven by playwright-core: launched with a fresh
 * profile and without the background traffic Chromium would send, each page in its own context, every request
 * recorded (a page must load nothing from outside what the test allows), page errors collected, and a screenshot
 * in `test-results/<suite>/` when a check fails.
 */
import assert from "node:assert/strict";
import { accessSync, constants, mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { chromium, type Browser, type Locator, type Page } from "playwright-core";

export const CHROMIUM = process.env.MSB_CHROMIUM ?? "/usr/bin/chromium";

const ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Why the browser suites cannot run here (undefined: they can). */
export function chromiumMissing(): string | undefined {
  try {
    accessSync(CHROMIUM, constants.X_OK);
    return undefined;
  } catch {
    return `no Chromium at ${CHROMIUM}: scripts/install-system-deps.sh installs it (MSB_CHROMIUM names another)`;
  }
}

/**
 * A test file's browser suite, loaded only where Chromium is. Without it the file reports one skipped test that
 * says why, on stderr as well, so that a run without a browser never reads as a passing one; with
 * MSB_REQUIRE_CHROMIUM=1 (CI, whose setup installs it) that test fails instead.
 */
export async function browserSuite(name: string, load: () => Promise<unknown>): Promise<void> {
  const missing = chromiumMissing();
  if (!missing) {
    await load();
    return;
  }
  if (process.env.MSB_REQUIRE_CHROMIUM === "1") {
    test(name, () => assert.fail(`${missing} (MSB_REQUIRE_CHROMIUM=1)`));
    return;
  }
  process.stderr.write(`\nSKIPPED, NOT RUN: ${name}: ${missing}\n\n`);
  test(name, { skip: missing }, () => {});
}

/** One browser for a test file (closed after it); Playwright gives it a fresh temporary profile (--user-data-dir). */
export async function launchBrowser(): Promise<Browser> {
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
  after(() => browser.close());
  return browser;
}

/** Where a suite's screenshots go (also `MSB_SCREENSHOTS`, to keep the pages of a passing run). */
export function resultsDir(suite: string): string {
  const dir = join(import.meta.dirname, "..", "..", "test-results", suite);
  mkdirSync(dir, { recursive: true });
  return dir;
}

export interface PageRun {
  page: Page;
  /** Every URL the page requested. */
  requests: string[];
  /** Uncaught errors and console errors of the page. */
  errors: string[];
}

export interface PageOptions {
  /** Requests to other places than these prefixes are aborted (and recorded). */
  allow: readonly string[];
  /** No network at all (file:// pages). */
  offline?: boolean;
  viewport?: { width: number; height: number };
}

/** Run `fn` on a fresh page; on failure its screenshot is written to `resultsDir(suite)/<name>.png`. */
export async function withPage(
  browser: Browser,
  suite: string,
  name: string,
  o: PageOptions,
  fn: (run: PageRun) => Promise<void>,
): Promise<void> {
  const context = await browser.newContext({ viewport: o.viewport ?? { width: 1400, height: 900 } });
  if (o.offline) await context.setOffline(true);
  const run: PageRun = { page: await context.newPage(), requests: [], errors: [] };
  await context.route("**/*", (route) => {
    const url = route.request().url();
    run.requests.push(url);
    return o.allow.some((p) => url.startsWith(p)) ? route.continue() : route.abort();
  });
  run.page.on("pageerror", (e) => run.errors.push(e.message));
  run.page.on("console", (m) => void (m.type() === "error" && run.errors.push(m.text())));
  try {
    await fn(run);
    if (process.env.MSB_SCREENSHOTS)
      await run.page.screenshot({ path: join(process.env.MSB_SCREENSHOTS, `${name}.png`), fullPage: true });
  } catch (e) {
    const path = join(resultsDir(suite), `${name}.png`);
    await run.page.screenshot({ path, fullPage: true }).catch(() => undefined);
    (e as Error).message += `\n(screenshot: ${path})`;
    throw e;
  } finally {
    await context.close();
  }
}

/** What a page may hold of the browser's globals, for the checks below (tests compile without the DOM's types). */
interface PageGlobals {
  __pwned?: number;
  document: { querySelector(s: string): { querySelectorAll(s: string): { length: number } } | null };
}

/** Nothing from the data ran under `selector`: no flag set by it, no element made from its markup. */
export async function assertInert(page: Page, selector: string): Promise<void> {
  const state = await page.evaluate((sel) => {
    const g = globalThis as unknown as PageGlobals;
    const scope = g.document.querySelector(sel);
    return {
      pwned: g.__pwned ?? null,
      imgs: scope?.querySelectorAll("img").length ?? -1,
      scripts: scope?.querySelectorAll("script").length ?? -1,
    };
  }, selector);
  assert.deepEqual(state, { pwned: null, imgs: 0, scripts: 0 }, `markup under ${selector} stayed text`);
}

/** An element's text ("" when it has none). */
export async function text(locator: Locator): Promise<string> {
  return (await locator.textContent()) ?? "";
}
