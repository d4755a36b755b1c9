/**
 * Server benchmark: `run_in_session` round trips over real HTTP (one session, sequential), then N concurrent
 * sessions × M commands (throughput, latency, errors). Starts its own server on 127.0.0.1 unless given a URL.
 */
import { Sandbox } from "../sandbox/sandbox.js";
import { startServer } from "../server/server.js";
import { summarize, type Dist } from "../util/stats.js";

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

export async function benchServerRoundTrip(opts: ServerBenchOptions = {}): Promise<ServerBenchResult> {
  const token = opts.authToken ?? (opts.url ? undefined : "bench-token");
  const server = opts.url ? undefined : await startServer({ home: opts.home, authToken: token });
  const base = (opts.url ?? server!.url).replace(/\/+$/, "");
  const headers: Record<string, string> = {
    "content-type": "application/json",
    ...(token ? { "X-API-Key": token } : {}),
  };
  const post = async (path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> => {
    const res = await fetch(base + path, {
      method: "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  };
  const created: string[] = [];
  const newSandbox = async (): Promise<string> => {
    const r = await post("/sandboxes", {});
    if (r.status !== 201) throw new Error(`create sandbox: HTTP ${r.status} ${JSON.stringify(r.json)}`);
    created.push(r.json.id as string);
    return `/sandboxes/${r.json.id as string}`;
  };
  try {
    // 1. Sequential round trips on one session.
    const p = await newSandbox();
    await post(`${p}/create_session`, { session: "rt" });
    const n = opts.roundTrips ?? 200;
    const warm = opts.warmup ?? 20;
    const rt: number[] = [];
    for (let i = 0; i < warm + n; i++) {
      const t = performance.now();
      const r = await post(`${p}/run_in_session`, { session: "rt", command: "echo x" });
      const dt = performance.now() - t;
      if (r.status !== 200 || r.json.output !== "x\n") throw new Error(`round trip failed: ${JSON.stringify(r.json)}`);
      if (i >= warm) rt.push(dt);
    }

    // 1b. The same in-process, for the HTTP overhead.
    let inProcess: LatencyStats | undefined;
    if (!opts.url) {
      const sb = await Sandbox.create({ home: opts.home });
      try {
        const { session } = await sb.sessions.create("rt");
        const local: number[] = [];
        for (let i = 0; i < warm + n; i++) {
          const t = performance.now();
          await session.run("echo x");
          if (i >= warm) local.push(performance.now() - t);
        }
        inProcess = stats(local);
      } finally {
        await sb.close();
      }
    }

    // 2. Concurrent sessions.
    const sessions = opts.sessions ?? 64;
    const perSession = opts.commandsPerSession ?? 100;
    const nSandboxes = Math.max(1, opts.sandboxes ?? Math.ceil(sessions / 8));
    const setupStart = performance.now();
    const boxes = await Promise.all(Array.from({ length: nSandboxes }, () => newSandbox()));
    const targets = await Promise.all(
      Array.from({ length: sessions }, async (_, i) => {
        const box = boxes[i % nSandboxes]!;
        const name = `s${i}`;
        const r = await post(`${box}/create_session`, { session: name, startup_timeout: 30 });
        if (r.status !== 200) throw new Error(`create session: ${JSON.stringify(r.json)}`);
        return { box, name };
      }),
    );
    const setupMs = performance.now() - setupStart;
    const lat: number[] = [];
    let errors = 0;
    const errorSamples: string[] = [];
    const started = performance.now();
    await Promise.all(
      targets.map(async ({ box, name }, si) => {
        for (let i = 0; i < perSession; i++) {
          const t = performance.now();
          try {
            const r = await post(`${box}/run_in_session`, { session: name, command: `echo ${si}-${i}` });
            lat.push(performance.now() - t);
            if (r.status !== 200 || r.json.output !== `${si}-${i}\n`) {
              errors++;
              if (errorSamples.length < 5) errorSamples.push(JSON.stringify(r.json).slice(0, 300));
            }
          } catch (e) {
            errors++;
            if (errorSamples.length < 5) errorSamples.push(String(e));
          }
        }
      }),
    );
    const durationMs = performance.now() - started;
    const commands = sessions * perSession;
    const http = stats(rt);
    return {
      ...http,
      roundTrips: n,
      ...(inProcess ? { inProcess, httpOverheadP50Ms: Math.round((http.p50Ms - inProcess.p50Ms) * 100) / 100 } : {}),
      concurrent: {
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
      },
    };
  } finally {
    await Promise.all(
      created.map((id) => fetch(`${base}/sandboxes/${id}`, { method: "DELETE", headers }).catch(() => undefined)),
    );
    await server?.close();
  }
}
