/**
 * Workload 4: session round trip. In process: one sandbox, one persistent session, `echo` commands back to back.
 * Over HTTP: src/server/bench.ts (`benchServerRoundTrip`), when that module exists.
 */
import { Sandbox } from "../sandbox/sandbox.js";
import type { BenchEnvironment } from "./setup.js";
import { summarize } from "./stats.js";
import type { Dist, Unavailable } from "./types.js";

export async function benchSessionInProcess(env: BenchEnvironment, commands: number): Promise<Dist> {
  const sb = await Sandbox.create({ instance: env.primary, home: env.home, specsFile: env.specsFile });
  try {
    const { session } = await sb.sessions.create();
    for (let i = 0; i < 10; i++) await session.run("echo warm");
    const times: number[] = [];
    for (let i = 0; i < commands; i++) {
      const t = performance.now();
      const r = await session.run(`echo ${i}`);
      times.push(performance.now() - t);
      if (r.output.trim() !== String(i) || r.exitCode !== 0) throw new Error(`session round trip: unexpected ${JSON.stringify(r)}`);
    }
    return summarize(times);
  } finally {
    await sb.close();
  }
}

/** What src/server/bench.ts is expected to export. */
type ServerBench = (opts: Record<string, unknown>) => Promise<Record<string, unknown>>;

/**
 * Optional modules written by other parts of the project are imported by a computed specifier, so that the bench
 * compiles and runs without them and reports the workload as not available.
 */
export async function optionalExport<T>(modules: string[], name: string): Promise<T | undefined> {
  for (const m of modules) {
    try {
      const mod = (await import(new URL(m, import.meta.url).href)) as Record<string, unknown>;
      if (typeof mod[name] === "function") return mod[name] as T;
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (code !== "ERR_MODULE_NOT_FOUND") throw e;
    }
  }
  return undefined;
}

export async function benchSessionHttp(env: BenchEnvironment, opts: { quick: boolean; log: (m: string) => void }): Promise<Record<string, unknown> | Unavailable> {
  const fn = await optionalExport<ServerBench>(["../server/bench.js"], "benchServerRoundTrip");
  if (!fn) return { available: false, reason: "src/server/bench.ts (benchServerRoundTrip) is not in this build yet" };
  try {
    // ServerBenchOptions: its own server on 127.0.0.1, sequential round trips, then 64 sessions at once.
    const r = await fn({
      home: env.home,
      roundTrips: opts.quick ? 50 : 200,
      warmup: 20,
      sessions: 64,
      commandsPerSession: opts.quick ? 10 : 100,
    });
    return { available: true, ...r };
  } catch (e) {
    return { available: false, reason: `benchServerRoundTrip failed: ${(e as Error).message.split("\n")[0]}` };
  }
}
