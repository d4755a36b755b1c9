/**
 * Rollout API (`/rollouts/...`): groups of N rollouts of one task, per-rollout commands and files, rewards, forks,
 * prewarm and gold pre-checks, over the server's `RolloutEngine` (src/rollout). A group belongs to the principal
 * that started it; another principal's group or rollout is the same 404 as a missing one.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { InvalidInputError, LimitError, NotFoundError, NotImplementedError } from "../errors.js";
import type { Rollout, RolloutEngine, RolloutGroup, RolloutOwner } from "../rollout/index.js";
import { rollout as wire } from "../wire/index.js";
import type { Principal } from "./auth.js";
import { readBounded, writeBounded } from "./bounded-io.js";
import { runExecRequest } from "./lifecycle-exec.js";
import { LIFECYCLE } from "./lifecycle-sandboxes.js";
import { principalOf, type RouteContext } from "./route-context.js";

const config = LIFECYCLE;

/** Registers the routes; returns who may see which group (the dashboard shows each principal its own). */
export function registerRolloutRoutes(
  app: FastifyInstance,
  ctx: RouteContext,
  engine: RolloutEngine | undefined,
): RolloutAccess {
  const access = new RolloutAccess(engine);
  app.post("/rollouts/groups", { config }, async (req, reply) => {
    const r = wire.CreateGroupRequest.parse(req.body);
    const g = await access.engine().startGroup({
      instance: r.instance_id,
      n: r.n,
      owner: ownerOf(ctx, principalOf(req)),
      ...(r.gold_check !== undefined ? { goldCheck: r.gold_check } : {}),
      ...(r.ttl_seconds !== undefined ? { ttlMs: r.ttl_seconds * 1000 } : {}),
    });
    access.own(g, principalOf(req));
    reply.code(201);
    return wire.GroupInfo.fromCamel(g.info());
  });
  app.get("/rollouts/groups", { config }, async (req) =>
    wire.GroupList.fromCamel({ groups: access.groups(principalOf(req)).map((g) => g.info()) }),
  );
  app.get("/rollouts/groups/:gid", { config }, async (req) => wire.GroupInfo.fromCamel(access.group(req).info()));
  app.delete("/rollouts/groups/:gid", { config }, async (req) => {
    const g = access.group(req);
    await access.engine().closeGroup(g.id);
    return { id: g.id, closed: true };
  });
  app.post("/rollouts/prewarm", { config }, async (req) => {
    const r = wire.PrewarmRequest.parse(req.body);
    const owner = ownerOf(ctx, principalOf(req));
    const report = await access.engine().prewarm(r.instance_ids, { sandboxes: r.sandboxes, owner });
    return wire.PrewarmReport.fromCamel(report);
  });
  app.post("/rollouts/gold-check", { config }, async (req) => {
    const v = await access.engine().goldCheck(wire.GoldCheckRequest.parse(req.body).instance_id);
    return wire.GoldVerdict.fromCamel(v);
  });
  registerRolloutWork(app, ctx, access);
  return access;
}

/** A principal as the engine's owner: its token's cap covers its plain sandboxes and its rollouts together. */
function ownerOf(ctx: RouteContext, who: Principal): RolloutOwner {
  return {
    name: who.name,
    ...(who.maxSandboxes !== undefined ? { maxSandboxes: who.maxSandboxes } : {}),
    heldElsewhere: () => ctx.registry.ownedHere(who.name),
  };
}

/** Routes on one rollout: inspect, commands, files, reward, fork, close. */
function registerRolloutWork(app: FastifyInstance, ctx: RouteContext, access: RolloutAccess): void {
  app.get("/rollouts/:rid", { config }, async (req) => wire.RolloutInfo.fromCamel(access.rollout(req).info()));
  app.post("/rollouts/:rid/exec", { config }, (req, reply) =>
    runExecRequest(ctx, () => access.rollout(req), req.body, reply),
  );
  app.get("/rollouts/:rid/files", { config }, async (req, reply) => {
    const path = (req.query as { path?: string }).path;
    if (!path) throw new InvalidInputError("query parameter 'path' is required");
    const sandbox = access.rollout(req).use();
    const release = ctx.reads.tryAcquire();
    if (!release)
      throw new LimitError(`${ctx.reads.capacity} file reads are in progress on this server; retry`, {
        retryAfterMs: 1000,
      });
    try {
      const bytes = await readBounded(sandbox, path, {
        maxBytes: ctx.limits.maxReadBytes,
        timeoutMs: ctx.limits.fileTimeoutMs,
      });
      reply.type("application/octet-stream");
      return bytes;
    } finally {
      release();
    }
  });
  app.put("/rollouts/:rid/files", { config }, async (req) => {
    const r = wire.WriteFileRequest.parse(req.body);
    await writeBounded(access.rollout(req).use(), r.path, r.content, ctx.limits.fileTimeoutMs);
    return {};
  });
  app.post("/rollouts/:rid/reward", { config }, async (req) => {
    const r = wire.RewardRequest.parse(req.body);
    const o = await access.rollout(req).reward({
      ...(r.mode ? { mode: r.mode } : {}),
      ...(r.timeout_seconds !== undefined ? { timeoutMs: r.timeout_seconds * 1000 } : {}),
      ...(r.reward ? { reward: r.reward } : {}),
    });
    return wire.RolloutOutcome.fromCamel(o);
  });
  app.post("/rollouts/:rid/fork", { config }, async (req, reply) => {
    const { k, checkpoint_id } = wire.ForkRequest.parse(req.body);
    const children = await access.rollout(req).fork(k, checkpointOf(checkpoint_id));
    reply.code(201);
    return wire.RolloutList.fromCamel({ rollouts: children.map((c) => c.info()) });
  });
  registerResetRoutes(app, access);
  app.delete("/rollouts/:rid", { config }, async (req) => {
    const r = access.rollout(req);
    await r.close();
    return { id: r.id, closed: true };
  });
}

const checkpointOf = (id: string | null | undefined): { checkpoint?: string } =>
  id === undefined || id === null ? {} : { checkpoint: id };

/** Reset in place, checkpoints (kept by the rollout's group, addressed through any of its rollouts). */
function registerResetRoutes(app: FastifyInstance, access: RolloutAccess): void {
  app.post("/rollouts/:rid/reset", { config }, async (req) => {
    const { checkpoint_id } = wire.ResetRequest.parse(req.body);
    const r = access.rollout(req);
    const t0 = performance.now();
    await r.reset(checkpointOf(checkpoint_id));
    return { rollout: wire.RolloutInfo.fromCamel(r.info()), reset_ms: Math.round((performance.now() - t0) * 10) / 10 };
  });
  app.post("/rollouts/:rid/checkpoints", { config }, async (req, reply) => {
    const r = access.rollout(req);
    const t0 = performance.now();
    const id = await r.checkpoint();
    reply.code(201);
    return { checkpoint_id: id, rollout_id: r.id, checkpoint_ms: Math.round((performance.now() - t0) * 10) / 10 };
  });
  app.delete("/rollouts/:rid/checkpoints/:cid", { config }, async (req) => {
    const r = access.rollout(req);
    const id = (req.params as { cid: string }).cid;
    await access.engine().group(r.groupId).dropCheckpoint(id);
    return { id, closed: true };
  });
}

/** The engine, and which principal may see which group. */
export class RolloutAccess {
  private readonly owners = new WeakMap<RolloutGroup, string>();
  constructor(private readonly rollouts: RolloutEngine | undefined) {}

  engine(): RolloutEngine {
    if (!this.rollouts)
      throw new NotImplementedError("this server runs no rollouts: start it with a dataset (serve --dataset FILE)");
    return this.rollouts;
  }

  own(g: RolloutGroup, who: Principal): void {
    this.owners.set(g, who.name);
  }

  /** The principal that started a group. */
  ownerOf(g: RolloutGroup): string | undefined {
    return this.owners.get(g);
  }

  private sees(g: RolloutGroup, who: Principal): boolean {
    return who.admin || this.owners.get(g) === who.name;
  }

  groups(who: Principal): RolloutGroup[] {
    return this.engine()
      .groups()
      .filter((g) => this.sees(g, who));
  }

  group(req: FastifyRequest): RolloutGroup {
    const id = (req.params as { gid: string }).gid;
    const missing = new NotFoundError(`rollout group ${id} not found (closed, forgotten, or never started)`);
    let g: RolloutGroup;
    try {
      g = this.engine().group(id);
    } catch (e) {
      if (e instanceof NotFoundError) throw missing;
      throw e;
    }
    if (!this.sees(g, principalOf(req))) throw missing;
    return g;
  }

  rollout(req: FastifyRequest): Rollout {
    const id = (req.params as { rid: string }).rid;
    const missing = new NotFoundError(`rollout ${id} not found (its group was closed, or it never existed)`);
    let r: Rollout;
    try {
      r = this.engine().rollout(id);
    } catch (e) {
      if (e instanceof NotFoundError) throw missing;
      throw e;
    }
    const g = this.engine()
      .groups()
      .find((x) => x.id === r.groupId);
    if (!g || !this.sees(g, principalOf(req))) throw missing;
    return r;
  }
}
