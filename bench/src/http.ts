/**
 * Server benchmark: `run_in_session` round trips over real HTTP (one session, sequential), then N concurrent
 * sessions × M commands (throughput, latency, errors). Starts its own server on 127.0.0.1 unless given a URL.
 */
import { openSandbox } from "../../src/env/workspace.js";
import { startServer } from "../../src/server/server.js";
import { summarize, type Dist } from "../../src/util/stats.js";

export interface ServerBenchOptions {
  /** minisandbox home for the sandboxes (default: MINISANDBOX_HOME / per-user default). */
  home?: string;
  /** Use a running server instead of starting one. */
  url?: string;
  authToken?: string;
  /** Sequential round trips measured (after `warmup`). */
  roundTrips?: number;
  warmup?: number;
  /** Concurrent sessions and commands per session. */
  sessions?: number;
  commandsPerSession?: number;
  /** Sandboxes the concurrent sessions are spread over (default: sessions / 8, at least 1). */
  sandboxes?: number;
}

export type LatencyStats = Dist;

export interface ServerBenchResult extends LatencyStats {
  roundTrips: number;
  /** The same sequential commands in-process (Sandbox API, no HTTP), for the HTTP overhead. Absent with `url`. */
  inProcess?: LatencyStats;
  /** p50 over HTTP minus p50 in-process. */
  httpOverheadP50Ms?: number;
  concurrent: LatencyStats & {
    sessions: number;
    sandboxes: number;
    commandsPerSession: number;
    commands: number;
    errors: number;
    /** First few error messages. */
    errorSamples: string[];
    durationMs: number;
    commandsPerSecond: number;
    /** Time to create the sandboxes and sessions. */
    setupMs: number;
  };
}

const stats = summarize;

/** A small JSON client for the server under test; it remembers the sandboxes it creates, to delete them after. */
class BenchClient {
  readonly created: string[] = [];
  constructor(
    readonly base: string,
    readonly headers: Record<string, string>,
  ) {}

  async post(path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
    const res = await fetch(this.base + path, {
      method: "POST",
      headers: this.headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  }

  /** A new sandbox; its URL path. */
  async newSandbox(): Promise<string> {
    const r = await this.post("/sandboxes", {});
    if (r.status !== 201) throw new Error(`create sandbox: HTTP ${r.status} ${JSON.stringify(r.json)}`);
    this.created.push(r.json.id as string);
    return `/sandboxes/${r.json.id as string}`;
  }

  async deleteAll(): Promise<void> {
    const del = (id: string) =>
      fetch(`${this.base}/sandboxes/${id}`, { method: "DELETE", headers: this.headers }).catch(() => undefined);
    await Promise.all(this.created.map(del));
  }
}

export async function benchServerRoundTrip(opts: ServerBenchOptions = {}): Promise<ServerBenchResult> {
  const token = opts.authToken ?? (opts.url ? undefined : "bench-token");
  // One token drives every session here: the per-token rate limit (a guard against one flooding client) is off, so
  // that what is measured is the server's throughput, not its limit.
  const server = opts.url ? undefined : await startServer({ home: opts.home, authToken: token, rateLimit: 0 });
  const client = new BenchClient((opts.url ?? server!.url).replace(/\/+$/, ""), {
    "content-type": "application/json",
    ...(token ? { "X-API-Key": token } : {}),
  });
  try {
    const n = opts.roundTrips ?? 200;
    const warm = opts.warmup ?? 20;
    const http = stats(await sequentialRoundTrips(client, n, warm));
    const inProcess = opts.url ? undefined : stats(await inProcessRoundTrips(opts.home, n, warm));
    return {
      ...http,
      roundTrips: n,
      ...(inProcess ? { inProcess, httpOverheadP50Ms: Math.round((http.p50Ms - inProcess.p50Ms) * 100) / 100 } : {}),
      concurrent: await concurrentSessions(client, opts),
    };
  } finally {
    await client.deleteAll();
    await server?.close();
  }
}

/** 1. `run_in_session` back to back on one session; the latencies after `warm` warm-up commands. */
async function sequentialRoundTrips(client: BenchClient, n: number, warm: number): Promise<number[]> {
  const p = await client.newSandbox();
  await client.post(`${p}/create_session`, { session: "rt" });
  const rt: number[] = [];
  for (let i = 0; i < warm + n; i++) {
    const t = performance.now();
    const r = await client.post(`${p}/run_in_session`, { session: "rt", command: "echo x" });
    const dt = performance.now() - t;
    if (r.status !== 200 || r.json.output !== "x\n") throw new Error(`round trip failed: ${JSON.stringify(r.json)}`);
    if (i >= warm) rt.push(dt);
  }
  return rt;
}

/** 1b. The same commands in process (Sandbox API, no HTTP), for the HTTP overhead. */
async function inProcessRoundTrips(home: string | undefined, n: number, warm: number): Promise<number[]> {
  const sb = await openSandbox({ home });
  try {
    const { session } = await sb.sessions.create("rt");
    const local: number[] = [];
    for (let i = 0; i < warm + n; i++) {
      const t = performance.now();
      await session.run("echo x");
      if (i >= warm) local.push(performance.now() - t);
    }
    return local;
  } finally {
    await sb.close();
  }
}

/** 2. N sessions spread over a few sandboxes, each running M commands, all at once. */
async function concurrentSessions(
  client: BenchClient,
  opts: ServerBenchOptions,
): Promise<ServerBenchResult["concurrent"]> {
  const sessions = opts.sessions ?? 64;
  const perSession = opts.commandsPerSession ?? 100;
  const nSandboxes = Math.max(1, opts.sandboxes ?? Math.ceil(sessions / 8));
  const setupStart = performance.now();
  const boxes = await Promise.all(Array.from({ length: nSandboxes }, () => client.newSandbox()));
  const targets = await Promise.all(
    Array.from({ length: sessions }, async (_, i) => {
      const box = boxes[i % nSandboxes]!;
      const name = `s${i}`;
      const r = await client.post(`${box}/create_session`, { session: name, startup_timeout: 30 });
      if (r.status !== 200) throw new Error(`create session: ${JSON.stringify(r.json)}`);
      return { box, name };
    }),
  );
  const setupMs = performance.now() - setupStart;
  const lat: number[] = [];
  const errorSamples: string[] = [];
  let errors = 0;
  const failed = (sample: string): void => {
    errors++;
    if (errorSamples.length < 5) errorSamples.push(sample);
  };
  const started = performance.now();
  await Promise.all(
    targets.map(async ({ box, name }, si) => {
      for (let i = 0; i < perSession; i++) {
        const t = performance.now();
        try {
          const r = await client.post(`${box}/run_in_session`, { session: name, command: `echo ${si}-${i}` });
          lat.push(performance.now() - t);
          if (r.status !== 200 || r.json.output !== `${si}-${i}\n`) failed(JSON.stringify(r.json).slice(0, 300));
        } catch (e) {
          failed(String(e));
        }
      }
    }),
  );
  const durationMs = performance.now() - started;
  const commands = sessions * perSession;
  return {
    ...stats(lat),
    sessions,
    sandboxes: nSandboxes,
    commandsPerSession: perSession,
    commands,
    errors,
    errorSamples,
    durationMs: Math.round(durationMs),
    commandsPerSecond: Math.round((commands / durationMs) * 1000 * 10) / 10,
    setupMs: Math.round(setupMs),
  };
}
