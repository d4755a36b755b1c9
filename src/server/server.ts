/**
 * `startServer`: one fastify app serving the native lifecycle API, a SWE-ReX runtime per sandbox under
 * `/sandboxes/<id>/`, and (with `defaultDir`) the same runtime at the root for one default sandbox.
 * Leftovers of a server that was killed (sandboxes, cgroups, upload scratch) are removed before it listens.
 */
import Fastify, { type FastifyInstance } from "fastify";
import multipart from "@fastify/multipart";
import { writeFileSync } from "node:fs";
import type { Limits } from "../sandbox/limits.js";
import { reapHome, type ReapReport } from "../sandbox/reaper.js";
import { resolveHome } from "../util/home.js";
import { nodeCacheFor } from "../env/environments.js";
import { registerBodyParser } from "./body-parser.js";
import { DirRoots } from "./dir-roots.js";
import { registerErrorHandling } from "./error-handler.js";
import { registerHooks } from "./hooks.js";
import { registerJobRoutes } from "./job-routes.js";
import { PeerPolicy } from "./peers.js";
import { registerImageRoutes } from "./image-routes.js";
import { registerStoreRoutes } from "./store-routes.js";
import { registerExecRoutes } from "./lifecycle-exec.js";
import { registerKeyedRuntimes } from "./keyed-runtime.js";
import { registerSdkRoutes } from "./sdk-routes.js";
import { registerSandboxRoutes } from "./lifecycle-sandboxes.js";
import { registerTaskRoutes } from "./lifecycle-tasks.js";
import { ServerMetrics } from "./metrics.js";
import { registerOpsRoutes } from "./ops-routes.js";
import {
  defaultMaxSandboxes,
  overcommitWarnings as overcommitOf,
  requestLimits,
  resolveAuth,
  serverMaxima,
  type ServerOptions,
} from "./options.js";
import { Budget, RateLimiter } from "./rate-limit.js";
import { SandboxRegistry } from "./registry.js";
import { ReplayStore } from "./replay.js";
import { principalOf, type RouteContext } from "./route-context.js";
import { registerRuntimeRoutes } from "./runtime-routes.js";
import { freshRewardSlots, RolloutEngine, type RolloutOutcome } from "../rollout/index.js";
import { defaultBesideSandboxes } from "../sandbox/capacity.js";
import { registerRolloutRoutes } from "./rollout-routes.js";
import { Dashboard } from "./dashboard.js";
import { registerDashboardRoutes } from "./dashboard-routes.js";
import { UploadScratch } from "./scratch.js";

export { isLoopback, type ServerOptions } from "./options.js";

export interface RunningServer {
  /** e.g. "http://127.0.0.1:41234" */
  url: string;
  host: string;
  port: number;
  app: FastifyInstance;
  registry: SandboxRegistry;
  metrics: ServerMetrics;
  /** Id of the default sandbox (`defaultDir`), if any. */
  defaultSandboxId?: string;
  /** Where the generated token is, when no token was given. */
  tokenFile?: string;
  /** False with `noAuth`. */
  authenticated: boolean;
  /** What was reaped at start: leftovers of a server that was killed. */
  reaped: ReapReport;
  /** Maxima the operator chose that let the admitted sandboxes overcommit the host (said at start). */
  warnings: string[];
  /** Close every sandbox, then stop listening. Idempotent. */
  close(): Promise<void>;
}

function createApp(o: ServerOptions): FastifyInstance {
  return Fastify({
    logger: o.logger ?? false,
    bodyLimit: o.maxBodyBytes ?? 16 * 1024 * 1024,
    // Receiving a request (headers and body) has a deadline; answering it does not (long commands are normal).
    requestTimeout: o.uploadTimeoutMs ?? 600_000,
    connectionTimeout: 0,
    keepAliveTimeout: 72_000,
    // Shutdown happens after every sandbox is closed: nothing useful is left on open connections.
    forceCloseConnections: true,
  });
}

interface Admission {
  maxSandboxes: number;
  maxRollouts: number;
  /** Sandboxes the host must fit at once at their maxima. */
  admitted: number;
  maxima: Limits;
}

/**
 * How many sandboxes the server admits (live sandboxes, and rollouts, warm pool sandboxes and fresh rewards when it
 * serves them), and the per-sandbox maxima under which all of them fit the host.
 */
function admission(o: ServerOptions): Admission {
  const maxSandboxes = o.maxSandboxes ?? defaultMaxSandboxes();
  const maxRollouts = o.rollouts ? (o.rollouts.maxRollouts ?? maxSandboxes) : 0;
  // Fresh rewards of rollouts, and a dataset provider's grading and diffing sandboxes: each a sandbox more at once.
  const rewards =
    (o.rollouts ? freshRewardSlots(o.rollouts) : 0) + (o.provider?.evaluate ? defaultBesideSandboxes() : 0);
  const admitted = maxSandboxes + maxRollouts + (o.rollouts?.warmPool?.max ?? 0) + rewards;
  return { maxSandboxes, maxRollouts, admitted, maxima: serverMaxima(o, admitted) };
}

function routeContext(o: ServerOptions, home: string, app: FastifyInstance, metrics: ServerMetrics): RouteContext {
  const { maxSandboxes, maxima } = admission(o);
  const registry = new SandboxRegistry({
    home,
    provider: o.provider,
    maxSandboxes,
    roots: new DirRoots(o.allowDirs ?? [], [home, ...(o.secretPaths ?? [])]),
    ttlSeconds: o.ttlSeconds,
    idleTimeoutSeconds: o.idleTimeoutSeconds,
    defaultLimits: maxima,
    metrics,
    log: app.log,
  });
  return {
    registry,
    metrics,
    limits: requestLimits(o),
    uploads: new Budget(o.maxConcurrentUploads ?? 4),
    reads: new Budget(o.maxConcurrentReads ?? 8),
    scratch: new UploadScratch(home),
    publicUrl: o.publicUrl,
    home,
    peers: new PeerPolicy(o.peerAllow ?? []),
  };
}

/** Layers between servers and the jobs of a fleet. */
function registerManyNodeRoutes(app: FastifyInstance, ctx: RouteContext): void {
  registerStoreRoutes(app, ctx);
  registerImageRoutes(app, ctx);
  registerJobRoutes(app, ctx);
}

/** The rollout API over an engine on the server's home (with `rollouts`); the dashboard counts its outcomes. */
function registerRollouts(app: FastifyInstance, ctx: RouteContext, o: ServerOptions, dashboard: Dashboard) {
  const engine = rolloutEngine(o, ctx.home, (outcome) => dashboard.outcome(outcome));
  if (engine) ctx.registry.countAlso({ of: (name) => engine.sandboxesOf(name), total: () => engine.sandboxesOf(null) });
  const access = registerRolloutRoutes(app, ctx, engine);
  if (engine) dashboard.attachRollouts({ engine, access, poolMax: o.rollouts?.warmPool?.max ?? 0 });
  return engine;
}

/** Layer leases of a server that was killed: their holder is gone. */
async function pruneStaleLeases(home: string): Promise<void> {
  await nodeCacheFor(home)
    .pruneStaleLeases()
    .catch(() => 0);
}

export async function startServer(opts: ServerOptions = {}): Promise<RunningServer> {
  const host = opts.host ?? "127.0.0.1";
  const home = resolveHome(opts.home);
  const { auth, tokenFile } = resolveAuth(opts, host, home);
  const reaped = await reapHome(home);
  keepServerAlive();
  await pruneStaleLeases(home);
  const app = createApp(opts);
  const metrics = new ServerMetrics();
  const ctx = routeContext(opts, home, app, metrics);
  ctx.scratch.reset();
  registerErrorHandling(app);
  registerHooks(app, { auth, rate: new RateLimiter(opts.rateLimit ?? 200), replay: new ReplayStore(), metrics });
  registerBodyParser(app);
  await app.register(multipart, { limits: { fileSize: ctx.limits.maxUploadBytes } });
  registerOpsRoutes(app, ctx);
  registerSandboxRoutes(app, ctx);
  registerExecRoutes(app, ctx);
  registerTaskRoutes(app, ctx);
  registerSdkRoutes(app, ctx);
  registerManyNodeRoutes(app, ctx);
  const dashboard = new Dashboard(ctx);
  const rollouts = registerRollouts(app, ctx, opts, dashboard);
  registerDashboardRoutes(app, dashboard);
  registerRuntimeRoutes(
    app,
    "/sandboxes/:id",
    (req) => ctx.registry.get((req.params as { id: string }).id, principalOf(req)),
    ctx,
  );
  await registerKeyedRuntimes(app, ctx);
  const close = once(async () => {
    dashboard.close();
    await rollouts?.close();
    await ctx.registry.closeAll();
    await ctx.registry.provider?.settle?.();
    await app.close();
  });
  try {
    const defaultSandboxId = await serveDefault(app, ctx, opts);
    await app.listen({ host, port: opts.port ?? 0 });
    app.server.maxConnections = opts.maxConnections ?? 1024;
    const addr = app.server.address();
    const port = typeof addr === "object" && addr ? addr.port : (opts.port ?? 0);
    const urlHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
    const url = `http://${urlHost}:${port}`;
    const { registry } = ctx;
    return {
      url,
      host,
      port,
      app,
      registry,
      metrics,
      defaultSandboxId,
      tokenFile,
      authenticated: !auth.open,
      reaped,
      warnings: overcommitWarnings(opts),
      close,
    };
  } catch (e) {
    await close();
    throw e;
  }
}

/** `defaultDir`: one sandbox of the operator's directory, owned by the admin, its runtime also at the root. */
async function serveDefault(app: FastifyInstance, ctx: RouteContext, o: ServerOptions) {
  if (!o.defaultDir) return undefined;
  const admin = { name: "admin", admin: true };
  const req = o.defaultPython === undefined ? {} : { python: o.defaultPython };
  const e = await ctx.registry.create(req, admin, {
    isDefault: true,
    trustedDir: o.defaultDir,
    trustedBinds: o.defaultBinds,
  });
  registerRuntimeRoutes(app, "", (req) => ctx.registry.get(e.id, principalOf(req)), ctx);
  return e.id;
}

/** The rollout engine (with `rollouts`): its sandboxes under the same maxima as the registry's. */
function rolloutEngine(
  o: ServerOptions,
  home: string,
  onOutcome: (outcome: RolloutOutcome) => void,
): RolloutEngine | undefined {
  if (!o.rollouts) return undefined;
  const { maxRollouts, maxima } = admission(o);
  return new RolloutEngine({ limits: maxima, ...o.rollouts, maxRollouts, home, onOutcome });
}

function overcommitWarnings(o: ServerOptions): string[] {
  const a = admission(o);
  return overcommitOf(a.maxima, a.admitted);
}

/**
 * A host out of memory kills sandboxes (OOM score 1000) before the server that holds them: the server lowers its
 * own score where it may (CAP_SYS_RESOURCE); elsewhere it keeps the default, still far below its sandboxes'.
 */
function keepServerAlive(): void {
  try {
    writeFileSync("/proc/self/oom_score_adj", "-500");
  } catch {
    /* not permitted here */
  }
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let p: Promise<void> | undefined;
  return () => (p ??= fn());
}
