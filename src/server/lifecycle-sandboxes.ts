/** Native API: create, list, inspect and delete sandboxes. A principal sees and deletes only its own. */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { InvalidInputError } from "../errors.js";
import { native } from "../wire/index.js";
import type { Entry } from "./registry.js";
import { byId, principalOf, type RouteContext } from "./route-context.js";

export const LIFECYCLE = { kind: "lifecycle" } as const;

export function baseUrl(req: FastifyRequest, publicUrl?: string): string {
  if (publicUrl) return publicUrl.replace(/\/+$/, "");
  return `${req.protocol}://${req.host}`;
}

/** What the API says about a sandbox. */
export function describe(e: Entry, base: string): native.SandboxInfo {
  const l = e.limits;
  return {
    id: e.id,
    runtime_url: e.isDefault ? base : `${base}/sandboxes/${e.id}`,
    owner: e.owner,
    created_at: e.createdAt.toISOString(),
    expires_at: e.expiresAt?.toISOString() ?? null,
    idle_timeout_seconds: e.idleTimeoutMs !== undefined ? e.idleTimeoutMs / 1000 : null,
    last_active_at: new Date(e.lastActive).toISOString(),
    busy: e.inflight > 0,
    source: e.source,
    dir: e.dir ?? null,
    instance_id: e.instanceId ?? null,
    env_key: e.envKey ?? null,
    network: e.network,
    limits: {
      memory_bytes: l.memoryBytes ?? null,
      pids: l.pids ?? null,
      cpu_seconds: l.cpuSeconds ?? null,
      disk_bytes: l.diskBytes ?? null,
      cpus: l.cpus ?? null,
    },
    labels: e.labels,
    sessions: e.sandbox.sessions.names(),
    default: e.isDefault,
    meta: e.meta,
  };
}

export function registerSandboxRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { registry } = ctx;
  const config = LIFECYCLE;
  const entry = byId(registry);
  app.post("/sandboxes", { config }, async (req, reply) => {
    const body = native.CreateSandboxRequest.parse(req.body);
    if (body.sources?.length) ctx.peers.check(body.sources);
    const e = await registry.create(body, principalOf(req));
    reply.code(201);
    return describe(e, baseUrl(req, ctx.publicUrl));
  });
  app.get("/sandboxes", { config }, async (req) => ({
    sandboxes: labelled(registry.list(principalOf(req)), req).map((e) => describe(e, baseUrl(req, ctx.publicUrl))),
  }));
  // Everything of one job at once (e.g. what a fleet's killed tasks left): `?label=k=v`, repeatable, all must match.
  app.delete("/sandboxes", { config }, async (req) => {
    const selectors = labelSelectors(req);
    if (selectors.length === 0)
      throw new InvalidInputError("DELETE /sandboxes needs at least one ?label=KEY=VALUE (it never deletes all)");
    const chosen = labelled(registry.list(principalOf(req)), req).filter((e) => !e.isDefault);
    const deleted: string[] = [];
    await Promise.all(
      chosen.map((e) =>
        registry.delete(e.id, "delete").then(
          () => void deleted.push(e.id),
          () => undefined, // closed meanwhile
        ),
      ),
    );
    return { deleted: deleted.sort() };
  });
  app.get("/sandboxes/:id", { config }, async (req) => describe(entry(req), baseUrl(req, ctx.publicUrl)));
  app.delete("/sandboxes/:id", { config }, async (req) => {
    const e = entry(req);
    if (e.isDefault)
      throw new InvalidInputError(
        `sandbox ${e.id} is this server's default sandbox (serve --dir); it lives as long as the server`,
      );
    await registry.delete(e.id, "delete");
    return { id: e.id, deleted: true };
  });
}

/** `?label=k=v` (repeatable) as [key, value] pairs. */
function labelSelectors(req: FastifyRequest): [string, string][] {
  const raw = (req.query as { label?: string | string[] }).label;
  const list = raw === undefined ? [] : Array.isArray(raw) ? raw : [raw];
  return list.map((l) => {
    const i = l.indexOf("=");
    if (i <= 0) throw new InvalidInputError(`label selector ${JSON.stringify(l)}: expected KEY=VALUE`);
    return [l.slice(0, i), l.slice(i + 1)];
  });
}

/** The entries carrying every label the request selects. */
function labelled(entries: Entry[], req: FastifyRequest): Entry[] {
  const selectors = labelSelectors(req);
  return entries.filter((e) => selectors.every(([k, v]) => e.labels[k] === v));
}
