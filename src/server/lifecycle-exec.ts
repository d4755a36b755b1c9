/** Native API: one-shot commands with the in-process `ExecResult` shape, and raw file bytes. */
import type { FastifyInstance, FastifyReply } from "fastify";
import { InvalidInputError } from "../errors.js";
import type { ExecOptions, ExecResult } from "../sandbox/exec.js";
import { LIFECYCLE } from "./lifecycle-sandboxes.js";
import { native } from "../wire/index.js";
import { byId, clientGone, onEntry, type RouteContext } from "./route-context.js";
import { readForClient } from "./runtime-files.js";

export function registerExecRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const config = LIFECYCLE;
  const entry = byId(ctx.registry);
  // What the TypeScript SDK's commands.run uses.
  app.post(
    "/sandboxes/:id/exec",
    { config },
    onEntry(ctx, entry, (e, req, reply) => runExecRequest(ctx, () => e.sandbox, req.body, reply)),
  );
  // Raw bytes of a file (binary-safe; /read_file returns text).
  app.get(
    "/sandboxes/:id/files",
    { config },
    onEntry(ctx, entry, async (e, req, reply) => {
      const path = (req.query as { path?: string }).path;
      if (!path) throw new InvalidInputError("query parameter 'path' is required");
      const bytes = await readForClient(ctx, e, path);
      reply.type("application/octet-stream");
      return bytes;
    }),
  );
}

/** A native ExecRequest's options for `exec`; an output limit above this server's maximum is refused. */
export function execRequestOptions(ctx: RouteContext, r: native.ExecRequest): ExecOptions {
  const max = ctx.limits.maxReadBytes;
  if (r.output_limit_bytes !== undefined && r.output_limit_bytes > max)
    throw new InvalidInputError(`output_limit_bytes ${r.output_limit_bytes} is above this server's maximum ${max}`);
  return {
    timeoutMs: r.timeout_ms,
    cwd: r.cwd,
    env: r.env,
    stdin: r.stdin,
    mergeOutput: r.merge_output,
    outputLimitBytes: r.output_limit_bytes,
  };
}

/**
 * One native ExecRequest run where it is asked (a sandbox, a rollout; looked up once the request is valid): killed
 * if the client goes away, timed in the metrics, answered in the native shape.
 */
export async function runExecRequest(
  ctx: RouteContext,
  target: () => { exec(cmd: string | string[], opts: ExecOptions): Promise<ExecResult> },
  body: unknown,
  reply: FastifyReply,
): Promise<native.ExecResponse> {
  const r = native.ExecRequest.parse(body);
  const opts = execRequestOptions(ctx, r);
  const started = performance.now();
  const res = await target().exec(r.command, { ...opts, signal: clientGone(reply) });
  ctx.metrics.commands.observe({ kind: "exec" }, (performance.now() - started) / 1000);
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
}
