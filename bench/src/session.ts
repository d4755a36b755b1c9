/**
 * Workload 4: session round trip. In process: one sandbox, one persistent session, `echo` commands back to back.
 * Over HTTP: http.ts (`benchServerRoundTrip`).
 */
import { Sandbox } from "../../src/index.js";
import { benchServerRoundTrip } from "./http.js";
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
      if (r.output.trim() !== String(i) || r.exitCode !== 0)
        throw new Error(`session round trip: unexpected ${JSON.stringify(r)}`);
    }
    return summarize(times);
  } finally {
    await sb.close();
  }
}

export async function benchSessionHttp(
  env: BenchEnvironment,
  opts: { quick: boolean; log: (m: string) => void },
): Promise<Record<string, unknown> | Unavailable> {
  try {
    // ServerBenchOptions: its own server on 127.0.0.1, sequential round trips, then 64 sessions at once.
    const r = await benchServerRoundTrip({
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
