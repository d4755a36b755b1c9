/**
 * Workload 3: K sandboxes on one (warm) environment created at once. Per sandbox: create -> first output of `echo`;
 * wall time to all ready; failures; then one session opened in each and the memory of an idle sandbox measured as
 * the sum over its processes (pid namespace + the host-side bwrap monitor and enter helpers), RSS and PSS.
 */
import { Sandbox } from "../../src/index.js";
import { readState } from "../../src/sandbox/state.js";
import { memoryOf, processTable, sandboxProcesses } from "./proc.js";
import { evictLayer } from "./ready.js";
import type { BenchEnvironment } from "./setup.js";
import { summarize } from "./stats.js";
import type { ConcurrencyLevel } from "./types.js";
import { nodeCacheFor } from "../../src/env/environments.js";

export async function benchConcurrency(opts: {
  env: BenchEnvironment;
  levels: number[];
  /** Open a session in every sandbox and measure idle memory (at every level up to this K). */
  memoryUpToK: number;
  log: (m: string) => void;
}): Promise<ConcurrencyLevel[]> {
  const { env } = opts;
  const out: ConcurrencyLevel[] = [];
  (await nodeCacheFor(env.home).acquire(env.primaryKey)).release().catch(() => undefined);
  for (const k of opts.levels) {
    const sandboxes: (Sandbox | undefined)[] = new Array(k);
    const times: number[] = [];
    const errors: string[] = [];
    let failures = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: k }, async (_, i) => {
        const t = performance.now();
        try {
          const sb = await Sandbox.create({ instance: env.primary, home: env.home, specsFile: env.specsFile });
          sandboxes[i] = sb;
          const r = await sb.exec("echo ready");
          if (r.exitCode !== 0 || r.stdout.trim() !== "ready")
            throw new Error(`first command: exit ${r.exitCode} ${r.stderr.trim().slice(-200)}`);
          times.push(performance.now() - t);
        } catch (e) {
          failures++;
          if (errors.length < 5) errors.push((e as Error).message.split("\n")[0]!);
        }
      }),
    );
    const wallMs = performance.now() - t0;
    let rss: number | null = null;
    let pss: number | null = null;
    let procs: number | null = null;
    try {
      if (k <= opts.memoryUpToK) {
        const live = sandboxes.filter((s): s is Sandbox => s !== undefined && !s.isClosed);
        await Promise.all(live.map((s) => s.sessions.create()));
        // Let the sessions settle (startup output consumed, shells idle at the prompt).
        await new Promise((r) => setTimeout(r, 300));
        const table = processTable();
        let sumRss = 0;
        let sumPss = 0;
        let sumProcs = 0;
        for (const sb of live) {
          for (const pid of sandboxProcesses(sb.pid1, table, readState(sb.paths)?.cgroups.pids)) {
            const m = memoryOf(pid);
            if (!m) continue;
            sumRss += m.rss;
            sumPss += m.pss;
            sumProcs++;
          }
        }
        if (live.length) {
          rss = Math.round(sumRss / live.length);
          pss = Math.round(sumPss / live.length);
          procs = Math.round((sumProcs / live.length) * 10) / 10;
        }
      }
    } catch (e) {
      errors.push(`memory measurement: ${(e as Error).message.split("\n")[0]}`);
    } finally {
      await Promise.all(sandboxes.map((s) => s?.close()));
    }
    out.push({
      k,
      wallMs: Math.round(wallMs * 100) / 100,
      perSandbox: times.length ? summarize(times) : null,
      failures,
      errors,
      rssPerIdleBytes: rss,
      pssPerIdleBytes: pss,
      processesPerIdle: procs,
    });
    opts.log(`concurrency: K=${k} all ready in ${(wallMs / 1000).toFixed(2)} s, ${failures} failure(s)`);
  }
  return out;
}

/** The concurrency check on a cold layer: K sandboxes on an evicted layer (materialized once). Not timed in detail. */
export async function coldStampede(
  env: BenchEnvironment,
  k: number,
): Promise<{ wallMs: number; failures: number; materializations: number }> {
  await evictLayer(env.home, env.primaryKey);
  const cache = nodeCacheFor(env.home);
  // One placement (`materialize`: a tree materialized, or an image placed), whichever process and path made it.
  let materializations = 0;
  const onStart = (): void => void materializations++;
  cache.on("materialize", onStart);
  const t0 = performance.now();
  let failures = 0;
  const sbs = await Promise.all(
    Array.from({ length: k }, () =>
      Sandbox.create({ instance: env.primary, home: env.home, specsFile: env.specsFile }).catch(() => {
        failures++;
        return undefined;
      }),
    ),
  );
  const wallMs = performance.now() - t0;
  cache.off("materialize", onStart);
  await Promise.all(sbs.map((s) => s?.close()));
  return { wallMs: Math.round(wallMs), failures, materializations };
}
