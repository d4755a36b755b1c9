/**
 * The dashboard at scale, on a real `minisandbox serve` process: N live sandboxes, each with a bash session; the
 * same command load (8 clients, session round trips) with nobody watching and with two dashboard event streams
 * open; the server's CPU in each phase, how long a live sample of all N sandboxes takes, how often events come and
 * how big they are; and, when a Chromium and playwright-core are at hand, the page itself: time until every row is
 * shown, and how late its timers run while it follows the updates (the page's responsiveness).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { summarize, type Dist } from "../../src/util/stats.js";
import { request, startServe } from "./server-load.js";

export interface DashboardBenchOptions {
  sandboxes: number;
  /** Session round trips per client in each phase (8 clients). */
  commands: number;
  watchSeconds: number;
  workDir?: string;
  chromium?: string;
}

export interface DashboardBenchResult {
  available: true;
  sandboxes: number;
  createWallMs: number;
  /** `run_in_session` round trips, 8 clients at once, nobody watching / two event streams open. */
  commandUnwatched: Dist;
  commandWatched: Dist;
  /** The server process's CPU (% of one core) in each phase. */
  serverCpuUnwatched: number;
  serverCpuWatched: number;
  /** The server's own time to sample every sandbox (each event says it). */
  sampleMs: Dist;
  eventIntervalMs: Dist;
  eventBytes: number;
  browser: { available: true; firstRenderMs: number; timerLagMs: Dist } | { available: false; reason: string };
}

const CLIENTS = 8;
const KEY = `dashboard-bench-${"k".repeat(24)}`;

function cpuTicks(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return Number(f[11]) + Number(f[12]);
}

/** `fn`, with the server's CPU over it (percent of one core; 100 clock ticks a second). */
async function withCpu<T>(pid: number, fn: () => Promise<T>): Promise<{ value: T; cpu: number }> {
  const [t0, c0] = [performance.now(), cpuTicks(pid)];
  const value = await fn();
  const seconds = (performance.now() - t0) / 1000;
  return { value, cpu: Math.round(((cpuTicks(pid) - c0) / 100 / seconds) * 1000) / 10 };
}

async function commandLoad(url: string, ids: readonly string[], commands: number): Promise<number[]> {
  const samples: number[] = [];
  await Promise.all(
    ids.slice(0, CLIENTS).map(async (id) => {
      for (let i = 0; i < commands; i++) {
        const t = performance.now();
        const r = await request(`${url}/sandboxes/${id}/run_in_session`, KEY, "POST", { command: `echo ${i}` });
        samples.push(performance.now() - t);
        if (r.output !== `${i}\n`) throw new Error(`unexpected output ${JSON.stringify(r.output)}`);
      }
    }),
  );
  return samples;
}

interface Watch {
  stop: () => Promise<{ intervals: number[]; sampleMs: number[]; bytes: number[] }>;
}

/** One event stream, read as a browser does (fetch, the token in a header). */
function watch(url: string): Watch {
  const ac = new AbortController();
  const seen = { intervals: [] as number[], sampleMs: [] as number[], bytes: [] as number[] };
  const done = (async () => {
    const res = await fetch(`${url}/dashboard/events`, { headers: { "X-API-Key": KEY }, signal: ac.signal });
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let [buf, last] = ["", 0];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (!block.startsWith("data: ")) continue;
        const now = performance.now();
        if (last) seen.intervals.push(now - last);
        last = now;
        seen.bytes.push(block.length);
        seen.sampleMs.push((JSON.parse(block.slice(6)) as { server: { sampleMs: number } }).server.sampleMs);
      }
    }
  })().catch(() => undefined);
  return {
    stop: async () => {
      ac.abort();
      await done;
      return seen;
    },
  };
}

export async function benchDashboard(o: DashboardBenchOptions): Promise<DashboardBenchResult> {
  const root = mkdtempSync(join(o.workDir ?? tmpdir(), "msb-dashboard-bench-"));
  const tokens = join(root, "tokens.json");
  writeFileSync(tokens, JSON.stringify({ tokens: [{ name: "admin", token: KEY, admin: true }] }), { mode: 0o600 });
  const s = await startServe(join(root, "home"), tokens, o.sandboxes + 8, ["--rate-limit", "0"]);
  const pid = s.child.pid!;
  try {
    const t0 = performance.now();
    const ids: string[] = [];
    for (let i = 0; i < o.sandboxes; i += 16) {
      const batch = Array.from({ length: Math.min(16, o.sandboxes - i) }, async () => {
        const id = (await request(`${s.url}/sandboxes`, KEY, "POST", {})).id as string;
        await request(`${s.url}/sandboxes/${id}/create_session`, KEY, "POST", {});
        ids.push(id);
      });
      await Promise.all(batch);
    }
    const createWallMs = Math.round(performance.now() - t0);
    const unwatched = await withCpu(pid, () => commandLoad(s.url, ids, o.commands));
    const streams = [watch(s.url), watch(s.url)];
    await new Promise((r) => setTimeout(r, 3000)); // the first samples
    const watched = await withCpu(pid, () => commandLoad(s.url, ids, o.commands));
    const browser = await inBrowser(s.url, o);
    const seen = await Promise.all(streams.map((w) => w.stop()));
    return {
      available: true,
      sandboxes: o.sandboxes,
      createWallMs,
      commandUnwatched: summarize(unwatched.value),
      commandWatched: summarize(watched.value),
      serverCpuUnwatched: unwatched.cpu,
      serverCpuWatched: watched.cpu,
      sampleMs: summarize(seen.flatMap((x) => x.sampleMs)),
      eventIntervalMs: summarize(seen.flatMap((x) => x.intervals)),
      eventBytes: Math.max(0, ...seen.flatMap((x) => x.bytes)),
      browser,
    };
  } finally {
    s.child.kill("SIGTERM");
    await s.exited;
    rmSync(root, { recursive: true, force: true });
  }
}

/** The page in a headless Chromium: every row shown, then its timers' lateness while updates keep coming. */
async function inBrowser(url: string, o: DashboardBenchOptions): Promise<DashboardBenchResult["browser"]> {
  let pw: typeof import("playwright-core");
  try {
    pw = await import("playwright-core");
  } catch {
    return { available: false, reason: "playwright-core is not installed (a development dependency)" };
  }
  const args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"];
  args.push("--disable-background-networking", "--disable-component-update", "--disable-sync");
  const executablePath = o.chromium ?? "/usr/bin/chromium";
  const browser = await pw.chromium.launch({ executablePath, headless: true, args }).catch((e: Error) => e);
  if (browser instanceof Error) return { available: false, reason: `no Chromium: ${browser.message.split("\n")[0]}` };
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const t0 = performance.now();
    await page.goto(`${url}/dashboard/#token=${KEY}`);
    // Polled from here: the page's policy (no eval) refuses Playwright's in-page polling of an expression.
    await page
      .locator("tr[data-key]")
      .nth(o.sandboxes - 1)
      .waitFor({ timeout: 60_000 });
    const firstRenderMs = Math.round(performance.now() - t0);
    // A 50 ms timer in the page: how late it fires is how long the page was busy (rendering updates).
    const lags = (await page.evaluate(`new Promise((done) => {
      const lags = [];
      let last = performance.now();
      const t = setInterval(() => {
        const now = performance.now();
        lags.push(Math.max(0, now - last - 50));
        last = now;
      }, 50);
      setTimeout(() => { clearInterval(t); done(lags); }, ${o.watchSeconds * 1000});
    })`)) as number[];
    return { available: true, firstRenderMs, timerLagMs: summarize(lags) };
  } finally {
    await browser.close();
  }
}
