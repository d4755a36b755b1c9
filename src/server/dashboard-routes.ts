/**
 * Dashboard routes. The page and its files are open (they hold no data; `dashboard-assets.ts`); the data needs the
 * token like every API route: `GET /dashboard/state` (one snapshot) and `GET /dashboard/events` (server-sent
 * events, a snapshot after each live sample), both read-only and scoped to the caller's principal. The browser sends
 * the token as `X-API-Key` (kept in the tab's sessionStorage): no cookie, so no other site can ride on it.
 */
import type { FastifyInstance } from "fastify";
import { NotFoundError } from "../errors.js";
import type { Dashboard } from "./dashboard.js";
import { DASHBOARD_HEADERS, dashboardAssets } from "./dashboard-assets.js";
import { LIFECYCLE } from "./lifecycle-sandboxes.js";
import { principalOf } from "./route-context.js";

const PING_MS = 15_000;

export function registerDashboardRoutes(app: FastifyInstance, dashboard: Dashboard): void {
  const config = LIFECYCLE;
  const serve = (path: string) => {
    const asset = dashboardAssets().get(path);
    if (!asset) throw new NotFoundError(`${path}: no such dashboard file (is the dashboard built? npm run build)`);
    return asset;
  };
  app.get("/dashboard", { config }, async (_req, reply) => reply.redirect("/dashboard/"));
  app.get("/dashboard/", { config }, async (_req, reply) => {
    const a = serve("/dashboard/");
    return reply.headers(DASHBOARD_HEADERS).type(a.type).send(a.body);
  });
  app.get("/dashboard/assets/*", { config }, async (req, reply) => {
    const a = serve(req.url.split("?")[0]!);
    return reply.headers(DASHBOARD_HEADERS).type(a.type).send(a.body);
  });
  app.get("/dashboard/state", { config }, async (req, reply) => {
    reply.headers(DASHBOARD_HEADERS);
    return dashboard.state(principalOf(req));
  });
  app.get("/dashboard/events", { config }, async (req, reply) => {
    const raw = reply.raw;
    // Refused (too many streams) before anything is written: a normal 429.
    const stop = dashboard.watch(principalOf(req), (text) => {
      if (raw.destroyed || raw.writableNeedDrain) return false;
      return raw.write(`data: ${text}\n\n`);
    });
    const ping = setInterval(() => raw.destroyed || raw.write(": ping\n\n"), PING_MS);
    raw.once("close", () => {
      clearInterval(ping);
      stop();
    });
    reply.hijack();
    raw.writeHead(200, { ...DASHBOARD_HEADERS, "content-type": "text/event-stream; charset=utf-8" });
    raw.write(": connected\n\n");
  });
}
