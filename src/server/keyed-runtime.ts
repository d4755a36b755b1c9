/**
 * Instance-addressed SWE-ReX runtimes: `/run/<instance_id>/<key>/<endpoint>`. A client that can only be given a URL
 * (SWE-agent's `remote` deployment, one per instance in an expert file) gets a sandbox on that instance without any
 * lifecycle call: the first request on a (token, instance, key) creates it (parallel first requests share one
 * creation), `POST …/close` deletes it, and the next request on the same key starts a fresh one. `GET …/is_alive`
 * and `GET …/` answer before anything exists, without creating it (clients probe with a sub-second timeout).
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { SandboxNotFoundError } from "../errors.js";
import type { Principal } from "./auth.js";
import type { Entry, SandboxRegistry } from "./registry.js";
import { principalOf, type RouteContext } from "./route-context.js";
import { registerRuntimeRoutes } from "./runtime-routes.js";

export const KEYED_PREFIX = "/run/:instance/:key";

interface KeyedParams {
  instance: string;
  key: string;
}

/** Sandboxes by (principal, instance, key): at most one live per key. */
class KeyedSandboxes {
  private readonly ids = new Map<string, Promise<string>>();
  constructor(private readonly registry: SandboxRegistry) {}

  private slot(who: Principal, p: KeyedParams): string {
    return JSON.stringify([who.name, p.instance, p.key]);
  }

  has(who: Principal, p: KeyedParams): boolean {
    return this.ids.has(this.slot(who, p));
  }

  async getOrCreate(who: Principal, p: KeyedParams): Promise<Entry> {
    const slot = this.slot(who, p);
    const existing = this.ids.get(slot);
    if (existing) {
      const id = await existing; // a failed creation fails everyone who shared it
      try {
        return this.registry.get(id, who);
      } catch (e) {
        // Reaped (idle, TTL) or deleted through the native API: this key starts afresh.
        if (!(e instanceof SandboxNotFoundError)) throw e;
        if (this.ids.get(slot) === existing) this.ids.delete(slot);
      }
    }
    const created = this.registry
      .create({ instance_id: p.instance, labels: { run_key: p.key } }, who)
      .then((entry) => entry.id);
    this.ids.set(slot, created);
    created.catch(() => {
      if (this.ids.get(slot) === created) this.ids.delete(slot);
    });
    return this.registry.get(await created, who);
  }

  /** SWE-ReX's close, for a keyed runtime: the sandbox ends (sessions and all). */
  async close(who: Principal, p: KeyedParams): Promise<void> {
    const slot = this.slot(who, p);
    const pending = this.ids.get(slot);
    if (!pending) return;
    this.ids.delete(slot);
    const id = await pending.catch(() => undefined);
    if (id === undefined) return;
    await this.registry.delete(id, "delete").catch((e) => {
      if (!(e instanceof SandboxNotFoundError)) throw e;
    });
  }
}

export async function registerKeyedRuntimes(app: FastifyInstance, ctx: RouteContext): Promise<void> {
  const keyed = new KeyedSandboxes(ctx.registry);
  const entries = new WeakMap<FastifyRequest, Entry>();
  await app.register(async (scope) => {
    scope.addHook("preHandler", async (req, reply) => {
      const params = req.params as KeyedParams;
      const who = principalOf(req);
      const endpoint = (req.routeOptions.url ?? "").slice(KEYED_PREFIX.length);
      if (endpoint === "/close") {
        await keyed.close(who, params);
        return reply.send({});
      }
      if (req.method === "GET" && !keyed.has(who, params)) {
        if (endpoint === "/is_alive") return reply.send({ is_alive: true, message: "" });
        if (endpoint === "/") return reply.send({ message: "hello world" });
      }
      entries.set(req, await keyed.getOrCreate(who, params));
    });
    registerRuntimeRoutes(
      scope,
      KEYED_PREFIX,
      (req) => {
        const e = entries.get(req);
        if (!e) throw new SandboxNotFoundError("no sandbox for this runtime key");
        return e;
      },
      ctx,
    );
  });
}
