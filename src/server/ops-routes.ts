/** Liveness (no token; says nothing about sandboxes), Prometheus metrics (admin tokens), SWE-ReX's `GET /`. */
import type { FastifyInstance } from "fastify";
import { ForbiddenError } from "../errors.js";
import { principalOf, type RouteContext } from "./route-context.js";
import { RUNTIME } from "./runtime-common.js";

export function registerOpsRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/metrics", { config: { kind: "lifecycle" } }, async (req, reply) => {
    if (!principalOf(req).admin) throw new ForbiddenError("GET /metrics needs an admin token");
    reply.type("text/plain; version=0.0.4; charset=utf-8");
    return ctx.metrics.render({
      sandboxes: ctx.registry.size,
      sessions: ctx.registry.sessionCount(),
      creating: ctx.registry.pendingCreations,
      maxSandboxes: ctx.registry.maxSandboxes,
    });
  });
  app.get("/", { config: RUNTIME }, async () => ({ message: "hello world" }));
}
