/**
 * Request hooks, in order: authentication (before routing, as SWE-ReX expects), the per-principal rate limit, then
 * `X-Request-ID` replay (once the body is read: the key covers method, full URL, principal and body), and metrics.
 */
import { createHash } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import "./fastify-types.js";
import type { Authenticator } from "./auth.js";
import { isDashboardAsset } from "./dashboard-assets.js";
import type { ServerMetrics } from "./metrics.js";
import type { RateLimiter } from "./rate-limit.js";
import type { ReplayStore } from "./replay.js";

/** Paths answered without a token: a liveness probe that says nothing about sandboxes, the dashboard's files. */
const OPEN_PATHS = new Set(["/healthz"]);
const isOpen = (path: string): boolean => OPEN_PATHS.has(path) || isDashboardAsset(path);

export interface HookDeps {
  auth: Authenticator;
  rate: RateLimiter;
  replay: ReplayStore;
  metrics: ServerMetrics;
}

export function registerHooks(app: FastifyInstance, deps: HookDeps): void {
  app.addHook("onRequest", async (req, reply) => {
    if (isOpen(req.url.split("?")[0]!)) return;
    const who = deps.auth.identify(req.headers["x-api-key"]);
    if (!who.ok) return reply.code(who.status).send({ detail: who.detail });
    req.principal = who.principal;
    const wait = deps.rate.take(who.principal.name);
    if (wait > 0) {
      deps.metrics.rateLimited.inc();
      reply.header("retry-after", String(wait));
      return reply
        .code(429)
        .send({ detail: `rate limit of ${who.principal.name} exceeded; retry`, code: "limit_reached" });
    }
  });
  app.addHook("preHandler", (req, reply) => replayOrBegin(req, reply, deps));
  app.addHook("onSend", async (req, reply, payload) => {
    storeForReplay(req, reply, payload, deps.replay);
    return payload;
  });
  app.addHook("onResponse", async (req, reply) => {
    if (req.replayKey) deps.replay.finish(req.replayKey, undefined);
    deps.metrics.requests.inc({
      method: req.method,
      route: req.routeOptions.url ?? "unmatched",
      status: String(reply.statusCode),
    });
  });
}

/** The replay key: method, full URL (query included), principal, body digest and the request id. */
function replayKey(req: FastifyRequest, rid: string): string | undefined {
  // Multipart bodies are read by their handler, after this hook: such requests are never replayed.
  if (req.isMultipart() || !req.principal) return undefined;
  const body = req.bodyDigest ?? createHash("sha256").digest("hex");
  return createHash("sha256")
    .update(JSON.stringify([req.method, req.url, req.principal.name, body, rid]))
    .digest("hex");
}

async function replayOrBegin(req: FastifyRequest, reply: FastifyReply, deps: HookDeps): Promise<void> {
  const rid = req.headers["x-request-id"];
  if (typeof rid !== "string" || rid === "") return;
  const key = replayKey(req, rid);
  if (!key) return;
  const stored = deps.replay.get(key) ?? (await deps.replay.inFlight(key));
  if (stored) {
    deps.metrics.replays.inc();
    reply.code(stored.status);
    if (stored.contentType) reply.header("content-type", stored.contentType);
    return reply.send(stored.body);
  }
  deps.replay.begin(key);
  req.replayKey = key;
}

function storeForReplay(req: FastifyRequest, reply: FastifyReply, payload: unknown, replay: ReplayStore): void {
  if (!req.replayKey) return;
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
