/** The native JSON API: create / list / inspect / delete sandboxes, evaluate, diff, one-shot exec, raw file reads. */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { InvalidInputError, NotFoundError } from "../util/errors.js";
import { NotImplementedError } from "./errors.js";
import type { ServerMetrics } from "./metrics.js";
import { parseCreateSandbox, parseNativeExec } from "./models.js";
import type { Entry, SandboxRegistry } from "./registry.js";
import { PyError } from "./pycompat.js";
import { readFileCapped } from "./runtime.js";

export interface LifecycleDeps {
  registry: SandboxRegistry;
  metrics: ServerMetrics;
  /** Base URL clients should use (e.g. "http://node1:8080"); derived from the request when absent. */
  publicUrl?: string;
  maxReadBytes: number;
}

export function baseUrl(req: FastifyRequest, publicUrl?: string): string {
  if (publicUrl) return publicUrl.replace(/\/+$/, "");
  return `${req.protocol}://${req.host}`;
}

/** What the API says about a sandbox. */
export function describe(e: Entry, base: string): Record<string, unknown> {
  const l = e.limits;
  return {
    id: e.id,
    runtime_url: e.isDefault ? base : `${base}/sandboxes/${e.id}`,
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
    },
    labels: e.labels,
    sessions: e.sandbox.sessions.names(),
    default: e.isDefault,
    meta: e.meta,
  };
}

export function registerLifecycleRoutes(app: FastifyInstance, deps: LifecycleDeps): void {
  const { registry, metrics } = deps;
  const config = { kind: "lifecycle" } as const;
  const entry = (req: FastifyRequest): Entry => registry.get((req.params as { id: string }).id);

  app.post("/sandboxes", { config }, async (req, reply) => {
    const body = parseCreateSandbox(req.body);
    const e = await registry.create(body);
    reply.code(201);
    return describe(e, baseUrl(req, deps.publicUrl));
  });

  app.get("/sandboxes", { config }, async (req) => ({
    sandboxes: registry.list().map((e) => describe(e, baseUrl(req, deps.publicUrl))),
  }));

  app.get("/sandboxes/:id", { config }, async (req) => describe(entry(req), baseUrl(req, deps.publicUrl)));

  app.delete("/sandboxes/:id", { config }, async (req) => {
    const e = entry(req);
    if (e.isDefault)
      throw new InvalidInputError(
        `sandbox ${e.id} is this server's default sandbox (serve --dir); it lives as long as the server`,
      );
    await registry.delete(e.id, "delete");
    return { id: e.id, deleted: true };
  });

  app.post("/sandboxes/:id/evaluate", { config }, async (req) => {
    const e = entry(req);
    const provider = registry.provider;
    if (!provider?.evaluate)
      throw new NotImplementedError(
        "this server's workspace provider cannot evaluate (start it with a dataset: serve --dataset FILE)",
      );
    if (!e.instanceId)
      throw new InvalidInputError(
        `sandbox ${e.id} was not created from a dataset instance; only instance sandboxes can be evaluated`,
      );
    registry.begin(e);
    try {
      const result = await provider.evaluate(e.sandbox, e.instanceId);
      metrics.evaluations.inc({ result: "ok" });
      return { id: e.id, instance_id: e.instanceId, result };
    } catch (err) {
      metrics.evaluations.inc({ result: "error" });
      throw err;
    } finally {
      registry.end(e);
    }
  });

  app.get("/sandboxes/:id/diff", { config }, async (req) => {
    const e = entry(req);
    const provider = registry.provider;
    if (!provider?.diff) throw new NotImplementedError("this server's workspace provider cannot compute diffs");
    registry.begin(e);
    try {
      return { id: e.id, diff: await provider.diff(e.sandbox) };
    } finally {
      registry.end(e);
    }
  });

  // One-shot command with the in-process ExecResult shape (what the TypeScript SDK's commands.run uses).
  app.post("/sandboxes/:id/exec", { config }, async (req) => {
    const e = entry(req);
    const r = parseNativeExec(req.body);
    registry.begin(e);
    try {
      const started = performance.now();
      const res = await e.sandbox.exec(r.command, {
        timeoutMs: r.timeout_ms,
        cwd: r.cwd,
        env: r.env,
        stdin: r.stdin,
        mergeOutput: r.merge_output,
        outputLimitBytes: r.output_limit_bytes,
      });
      metrics.commands.observe({ kind: "exec" }, (performance.now() - started) / 1000);
      return {
        exit_code: res.exitCode,
        stdout: res.stdout,
        stderr: res.stderr,
        timed_out: res.timedOut,
        truncated: res.truncated,
        limit: res.limit ?? null,
        signal: res.signal ?? null,
        duration_ms: res.durationMs,
      };
    } finally {
      registry.end(e);
    }
  });

  // Raw bytes of a file (binary-safe; /read_file returns text).
  app.get("/sandboxes/:id/files", { config }, async (req, reply) => {
    const e = entry(req);
    const path = (req.query as { path?: string }).path;
    if (!path) throw new InvalidInputError("query parameter 'path' is required");
    registry.begin(e);
    try {
      let bytes: Buffer;
      try {
        bytes = await readFileCapped(e, path, deps.maxReadBytes);
      } catch (err) {
        if (err instanceof PyError && err.classPath === "builtins.FileNotFoundError")
          throw new NotFoundError(err.message);
        if (err instanceof PyError) throw new InvalidInputError(err.message);
        throw err;
      }
      reply.type("application/octet-stream");
      return bytes;
    } finally {
      registry.end(e);
    }
  });

  app.get("/instances", { config }, async () => {
    const provider = registry.provider;
    if (!provider?.listInstances)
      throw new NotImplementedError("this server's workspace provider cannot list instances");
    return { instances: await provider.listInstances() };
  });
}
