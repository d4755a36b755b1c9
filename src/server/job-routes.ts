/**
 * One job of work planned elsewhere (a fleet's driver), on this node (admin tokens only): make a dataset row's
 * environment present (`POST /environments`), or evaluate an instance as the harness does and return its files
 * (`POST /evaluations`). The evaluation's sandbox is this server's like any other: counted, labelled, listed,
 * deleted by label, and closed when the client goes away before the answer.
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { canonicalReference } from "../env/images/index.js";
import { NotImplementedError, UnavailableError } from "../errors.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import type { Instance } from "../tasks/index.js";
import { native, type plan } from "../wire/index.js";
import { LIFECYCLE } from "./lifecycle-sandboxes.js";
import type { ProvidedWorkspace } from "./provider.js";
import type { Principal } from "./auth.js";
import { principalOf, type RouteContext } from "./route-context.js";
import { toHttpSource } from "./peers.js";
import { layerDigest, requireAdmin } from "./store-routes.js";

/** The instance of a job, as its plan gave it: normalized already (the wire's `TaskInstance`), taken as it is. */
function jobInstance(body: { instance: plan.TaskInstance }): Instance {
  return body.instance;
}

export function registerJobRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const config = LIFECYCLE;
  // What a killed server left mid-job.
  rmSync(join(ctx.home, "server", "jobs"), { recursive: true, force: true });
  app.post("/environments", { config }, (req) => prepareRoute(ctx, req));
  app.post("/evaluations", { config }, (req, reply) => evaluationRoute(ctx, req, reply));
}

async function prepareRoute(ctx: RouteContext, req: FastifyRequest): Promise<native.PrepareResponse> {
  requireAdmin(req, "POST /environments");
  const body = native.PrepareRequest.parse(req.body);
  const provider = ctx.registry.provider;
  if (!provider?.prepare) throw new NotImplementedError("this server's workspace provider cannot build environments");
  ctx.peers.check(body.sources);
  const instance = jobInstance(body);
  const started = performance.now();
  const image = body.image === undefined ? {} : { image: canonicalReference(body.image) };
  const r = await provider.prepare(instance, { sources: body.sources.map(toHttpSource), build: body.build, ...image });
  return {
    instance_id: instance.instance_id,
    env_key: r.envKey,
    status: r.status,
    ms: Math.round(performance.now() - started),
    error: r.error,
    manifest_sha256: await layerDigest(ctx.home, r.envKey),
  };
}

async function evaluationRoute(
  ctx: RouteContext,
  req: FastifyRequest,
  reply: FastifyReply,
): Promise<native.EvaluationResponse> {
  requireAdmin(req, "POST /evaluations");
  const body = native.EvaluationRequest.parse(req.body);
  const provider = ctx.registry.provider;
  if (!provider?.evaluateJob) throw new NotImplementedError("this server's workspace provider cannot evaluate jobs");
  ctx.peers.check(body.sources);
  const instance = jobInstance(body);
  const sandboxes = new JobSandbox(ctx, reply, principalOf(req), instance.instance_id, body.labels ?? {});
  const { result, files } = await provider.evaluateJob(
    {
      instance,
      ...(body.image === undefined ? {} : { image: canonicalReference(body.image) }),
      patch: body.model_patch,
      model: body.model_name_or_path,
      ...(body.timeout_seconds !== undefined ? { timeoutMs: body.timeout_seconds * 1000 } : {}),
      build: body.build,
      sources: body.sources.map(toHttpSource),
    },
    (workspace) => sandboxes.open(workspace),
  );
  sandboxes.answered = true;
  ctx.metrics.evaluations.inc({ result: result.status === "error" ? "error" : "ok" });
  return {
    instance_id: result.instanceId,
    env_key: result.envKey ?? null,
    status: result.status,
    resolution: result.resolution,
    error: result.error ? { kind: result.error.kind, message: result.error.message } : null,
    layer: result.layer ?? null,
    files: Object.fromEntries(Object.entries(files).map(([name, bytes]) => [name, bytes.toString("base64")])),
    warnings: result.warnings,
    manifest_sha256: await layerDigest(ctx.home, result.envKey),
  };
}

/**
 * The sandbox of one evaluation job: this server's (counted, labelled, busy while the job runs), and gone with
 * its client: one that goes away (its node lost, its task killed) takes the evaluation's sandbox with it.
 */
class JobSandbox {
  answered = false;
  private gone = false;
  private sandbox: Sandbox | undefined;

  constructor(
    private readonly ctx: RouteContext,
    reply: FastifyReply,
    private readonly who: Principal,
    private readonly instanceId: string,
    private readonly labels: Record<string, string>,
  ) {
    reply.raw.once("close", () => {
      if (this.answered) return;
      this.gone = true;
      this.drop();
    });
  }

  private drop(): void {
    const sb = this.sandbox;
    if (sb && !sb.isClosed) void this.ctx.registry.delete(sb.id, "delete").catch(() => undefined);
  }

  async open(provided: ProvidedWorkspace): Promise<Sandbox> {
    const wentAway = (): UnavailableError => new UnavailableError("the client went away; evaluation abandoned");
    if (this.gone) {
      provided.workspace.release();
      throw wentAway();
    }
    const { registry } = this.ctx;
    const req = { instance_id: this.instanceId, labels: this.labels };
    const e = await registry.create(req, this.who, { provided });
    this.sandbox = e.sandbox;
    if (this.gone) {
      this.drop();
      throw wentAway();
    }
    registry.begin(e);
    e.sandbox.onClose(() => registry.end(e));
    return e.sandbox;
  }
}
