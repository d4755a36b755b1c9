/**
 * `startServer`: one fastify app serving the native lifecycle API, a SWE-ReX runtime per sandbox under
 * `/sandboxes/<id>/`, and (with `defaultDir`) the same runtime at the root for one default sandbox.
 */
import { timingSafeEqual, createHash } from "node:crypto";
import Fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from "fastify";
import multipart from "@fastify/multipart";
import { resolveHome } from "../util/home.js";
import { InvalidInputError } from "../util/errors.js";
import type { Limits } from "../sandbox/limits.js";
import "./fastify-types.js";
import { codeFor, HttpError, statusFor, swerexception } from "./errors.js";
import { registerLifecycleRoutes } from "./lifecycle.js";
import { ServerMetrics } from "./metrics.js";
import { RequestValidationError } from "./models.js";
import type { WorkspaceProvider } from "./provider.js";
import { SandboxNotFoundError, SandboxRegistry, type Entry } from "./registry.js";
import { ReplayStore } from "./replay.js";
import { registerRuntimeRoutes } from "./runtime.js";
import { DEFAULT_ZIP_LIMITS, type ZipLimits } from "./upload.js";

export interface ServerOptions {
  /** Interface to bind (default 127.0.0.1). A non-loopback host requires `authToken`. */
  host?: string;
  /** Port (default 0: any free port). */
  port?: number;
  /** Required in `X-API-Key` on every route but `/healthz`. Without one, the API is open (loopback only). */
  authToken?: string;
  /** minisandbox data directory (default: MINISANDBOX_HOME or the per-user default). */
  home?: string;
  provider?: WorkspaceProvider;
  /** Live sandboxes at most (0/undefined: unlimited); over it POST /sandboxes answers 429. */
  maxSandboxes?: number;
  /** Serve one default sandbox of this directory; the SWE-ReX routes then also answer at the root. */
  defaultDir?: string;
  /** Host directories `POST /sandboxes {dir}` may mount (default: any). */
  allowDirs?: string[];
  /** Defaults for sandboxes that do not give their own. */
  ttlSeconds?: number;
  idleTimeoutSeconds?: number;
  /** Server-wide maximum resource limits (also the defaults). */
  limits?: Limits;
  /** Largest JSON body (default 64 MiB). */
  maxBodyBytes?: number;
  /** Largest upload (default 1 GiB) and what an archive may unpack to. */
  maxUploadBytes?: number;
  zipLimits?: ZipLimits;
  /** Largest file `read_file` / `GET /sandboxes/:id/files` return (default 256 MiB). */
  maxReadBytes?: number;
  /** Base URL put in `runtime_url` (default: from each request's Host header). */
  publicUrl?: string;
  /** Fastify logger option (default: off). `true` logs JSON lines at info to stdout. */
  logger?: FastifyServerOptions["logger"];
  /** Floor for SWE-ReX's `startup_timeout` (seconds, default 10). */
  minStartupTimeoutSeconds?: number;
}

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
  /** Close every sandbox, then stop listening. Idempotent. */
  close(): Promise<void>;
}

export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host) || host === "::ffff:127.0.0.1";
}

const digest = (s: string): Buffer => createHash("sha256").update(s).digest();

export async function startServer(opts: ServerOptions = {}): Promise<RunningServer> {
  const host = opts.host ?? "127.0.0.1";
  if (!isLoopback(host) && !opts.authToken) {
    throw new InvalidInputError(
      `refusing to listen on ${host} without an auth token: pass --auth-token (or bind 127.0.0.1)`,
    );
  }
  const home = resolveHome(opts.home);
  const metrics = new ServerMetrics();
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: opts.maxBodyBytes ?? 64 * 1024 * 1024,
    requestTimeout: 0,
    // Long commands are normal: never cut a request for taking long.
    connectionTimeout: 0,
    keepAliveTimeout: 72_000,
    // Shutdown happens after every sandbox is closed: nothing useful is left on open connections.
    forceCloseConnections: true,
  });
  const registry = new SandboxRegistry({
    home,
    provider: opts.provider,
    maxSandboxes: opts.maxSandboxes,
    allowDirs: opts.allowDirs,
    ttlSeconds: opts.ttlSeconds,
    idleTimeoutSeconds: opts.idleTimeoutSeconds,
    defaultLimits: opts.limits,
    metrics,
    log: app.log,
  });
  const replay = new ReplayStore();
  const tokenDigest = opts.authToken ? digest(opts.authToken) : undefined;

  // Known route patterns, to answer 405 (not 404) for a wrong method, as FastAPI does.
  const routes: { method: string[]; re: RegExp }[] = [];
  app.addHook("onRoute", (r) => {
    const re = new RegExp(`^${r.url.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:[A-Za-z_]+/g, "[^/]+")}$`);
    routes.push({ method: ([] as string[]).concat(r.method as string | string[]), re });
  });

  // Auth first (before routing decisions are visible), then idempotent replay.
  app.addHook("onRequest", async (req, reply) => {
    const path = req.url.split("?")[0]!;
    if (path === "/healthz") return;
    if (tokenDigest) {
      const key = req.headers["x-api-key"];
      if (key === undefined) return reply.code(403).send({ detail: "Not authenticated" });
      if (typeof key !== "string" || !timingSafeEqual(digest(key), tokenDigest))
        return reply.code(401).send({ detail: "Invalid API Key" });
    }
    const rid = req.headers["x-request-id"];
    if (typeof rid === "string" && rid !== "") {
      const key = ReplayStore.key(req.method, path, rid);
      const stored = replay.get(key) ?? (await replay.inFlight(key));
      if (stored) {
        metrics.replays.inc();
        reply.code(stored.status);
        if (stored.contentType) reply.header("content-type", stored.contentType);
        return reply.send(stored.body);
      }
      replay.begin(key);
      req.replayKey = key;
    }
  });

  app.addHook("onSend", async (req, reply, payload) => {
    if (req.replayKey) {
      const key = req.replayKey;
      req.replayKey = undefined;
      const body = typeof payload === "string" || Buffer.isBuffer(payload) ? payload : undefined;
      const ct = reply.getHeader("content-type");
      replay.finish(
        key,
        body === undefined
          ? undefined
          : { status: reply.statusCode, contentType: ct === undefined ? undefined : String(ct), body },
      );
    }
    return payload;
  });

  app.addHook("onResponse", async (req, reply) => {
    if (req.replayKey) replay.finish(req.replayKey, undefined);
    metrics.requests.inc({
      method: req.method,
      route: req.routeOptions.url ?? "unmatched",
      status: String(reply.statusCode),
    });
  });

  // JSON bodies: empty means absent; a missing content type is read as JSON (FastAPI does the same).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(
    "*",
    { parseAs: "buffer" },
    (req: FastifyRequest, body: Buffer | string, done: (err: Error | null, body?: unknown) => void) => {
      const text = typeof body === "string" ? body : body.toString("utf8");
      if (text.length === 0) return done(null, undefined);
      const ct = String(req.headers["content-type"] ?? "");
      if (ct === "" || /json/i.test(ct)) {
        try {
          return done(null, JSON.parse(text));
        } catch (e) {
          const m = /position (\d+)/.exec((e as Error).message);
          return done(
            new RequestValidationError([
              {
                type: "json_invalid",
                loc: ["body", m ? Number(m[1]) : 0],
                msg: "JSON decode error",
                input: {},
                ctx: { error: (e as Error).message },
              },
            ]),
          );
        }
      }
      return done(null, text);
    },
  );
  await app.register(multipart, { limits: { fileSize: opts.maxUploadBytes ?? 1024 ** 3 } });

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split("?")[0]!;
    const allowed = routes.filter((r) => r.re.test(path)).flatMap((r) => r.method);
    if (allowed.length) {
      reply.header("allow", [...new Set(allowed)].join(", "));
      return reply.code(405).send({ detail: "Method Not Allowed" });
    }
    return reply.code(404).send({ detail: "Not Found" });
  });

  app.setErrorHandler(
    (err: Error & { statusCode?: number; code?: string }, req: FastifyRequest, reply: FastifyReply) => {
      if (err instanceof RequestValidationError) return reply.code(422).send({ detail: err.detail });
      if (err instanceof HttpError) return reply.code(err.statusCode).send({ detail: err.detail });
      if (err instanceof SandboxNotFoundError)
        return reply.code(404).send({ detail: err.message, code: "sandbox_not_found" });
      // Transport-level errors of fastify and its plugins (body too large, bad multipart...): their own status.
      if (
        typeof err.statusCode === "number" &&
        err.statusCode >= 400 &&
        err.statusCode < 500 &&
        typeof err.code === "string" &&
        err.code.startsWith("FST_")
      ) {
        return reply.code(err.statusCode).send({ detail: err.message, code: err.code });
      }
      const kind = req.routeOptions.config?.kind;
      if (kind === "runtime") {
        req.log.info({ err: { message: err.message, name: err.name } }, "runtime error (511)");
        return reply.code(511).send(swerexception(err));
      }
      const status = statusFor(err);
      if (status >= 500) req.log.error({ err }, "request failed");
      return reply.code(status).send({ detail: err.message, code: codeFor(err) });
    },
  );

  app.get("/healthz", async () => ({ status: "ok", sandboxes: registry.size }));
  app.get("/metrics", async (_req, reply) => {
    reply.type("text/plain; version=0.0.4; charset=utf-8");
    return metrics.render({
      sandboxes: registry.size,
      sessions: registry.sessionCount(),
      creating: registry.pendingCreations,
      maxSandboxes: registry.maxSandboxes,
    });
  });
  app.get("/", { config: { kind: "runtime" } }, async () => ({ message: "hello world" }));

  const runtimeDeps = {
    registry,
    metrics,
    maxUploadBytes: opts.maxUploadBytes ?? 1024 ** 3,
    zipLimits: opts.zipLimits ?? DEFAULT_ZIP_LIMITS,
    minStartupTimeoutS: opts.minStartupTimeoutSeconds ?? 10,
    maxReadBytes: opts.maxReadBytes ?? 256 * 1024 * 1024,
  };
  registerLifecycleRoutes(app, {
    registry,
    metrics,
    publicUrl: opts.publicUrl,
    maxReadBytes: runtimeDeps.maxReadBytes,
  });
  registerRuntimeRoutes(app, "/sandboxes/:id", (req) => registry.get((req.params as { id: string }).id), runtimeDeps);

  let defaultEntry: Entry | undefined;
  if (opts.defaultDir) {
    defaultEntry = await registry.create({ dir: opts.defaultDir }, { isDefault: true });
    const id = defaultEntry.id;
    registerRuntimeRoutes(app, "", () => registry.get(id), runtimeDeps);
  }

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      await registry.closeAll();
      await app.close();
    })());

  try {
    await app.listen({ host, port: opts.port ?? 0 });
  } catch (e) {
    await close();
    throw e;
  }
  const addr = app.server.address();
  const port = typeof addr === "object" && addr ? addr.port : (opts.port ?? 0);
  const urlHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
  return {
    url: `http://${urlHost}:${port}`,
    host,
    port,
    app,
    registry,
    metrics,
    defaultSandboxId: defaultEntry?.id,
    close,
  };
}
