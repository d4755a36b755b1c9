/** Native API: one-shot commands with the in-process `ExecResult` shape, and raw file bytes. */
import type { FastifyInstance } from "fastify";
import { InvalidInputError } from "../errors.js";
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
    onEntry(ctx, entry, async (e, req, reply): Promise<native.ExecResponse> => {
      const r = native.ExecRequest.parse(req.body);
      const max = ctx.limits.maxReadBytes;
      if (r.output_limit_bytes !== undefined && r.output_limit_bytes > max)
        throw new InvalidInputError(`output_limit_bytes ${r.output_limit_bytes} is above this server's maximum ${max}`);
      const started = performance.now();
      const res = await e.sandbox.exec(r.command, {
        timeoutMs: r.timeout_ms,
        cwd: r.cwd,
        env: r.env,
        stdin: r.stdin,
        mergeOutput: r.merge_output,
        outputLimitBytes: r.output_limit_bytes,
        signal: clientGone(reply),
      });
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
    }),
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
