/**
 * Native routes for the SDK's E2B-style surface: a command whose output streams as it is written (and which a client
 * stops by disconnecting: background commands), a directory listing, and a new deadline for a sandbox.
 */
import { StringDecoder } from "node:string_decoder";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { errorCode, InvalidInputError } from "../errors.js";
import { native } from "../wire/index.js";
import { execRequestOptions } from "./lifecycle-exec.js";
import { baseUrl, describe, LIFECYCLE } from "./lifecycle-sandboxes.js";
import type { Entry } from "./registry.js";
import { byId, clientGone, onEntry, type RouteContext } from "./route-context.js";

/** Run one command, writing each chunk as an NDJSON line; the client going away kills the command's whole tree. */
async function streamCommand(ctx: RouteContext, e: Entry, req: FastifyRequest, reply: FastifyReply): Promise<void> {
  const r = native.ExecRequest.parse(req.body);
  const opts = execRequestOptions(ctx, r);
  const max = opts.outputLimitBytes ?? ctx.limits.maxReadBytes;
  const started = performance.now();
  const gone = clientGone(reply);
  reply.hijack();
  const out = reply.raw;
  out.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store" });
  out.flushHeaders(); // the client learns at once that the command started, output or not
  const line = (obj: object): void => {
    if (!out.writableEnded && !gone.aborted) out.write(`${JSON.stringify(obj)}\n`);
  };
  // Forwarded as written, up to the output limit over both streams; text split only on whole characters.
  let sent = 0;
  const forward = (key: "stdout" | "stderr") => {
    const dec = new StringDecoder("utf8");
    return (b: Buffer) => {
      const part = b.subarray(0, Math.max(0, max - sent));
      sent += part.length;
      const text = part.length ? dec.write(part) : "";
      if (text) line({ [key]: text });
    };
  };
  const res = await e.sandbox.exec(r.command, {
    ...opts,
    outputLimitBytes: max,
    onStdout: forward("stdout"),
    onStderr: forward("stderr"),
    signal: gone,
  });
  ctx.metrics.commands.observe({ kind: "exec" }, (performance.now() - started) / 1000);
  if (gone.aborted) return;
  const result: native.ExecResponse = {
    exit_code: res.exitCode,
    stdout: "",
    stderr: "",
    timed_out: res.timedOut,
    truncated: res.truncated || sent >= max,
    limit: res.limit ?? null,
    signal: res.signal ?? null,
    duration_ms: res.durationMs,
  };
  line({ result });
  out.end();
}

export function registerSdkRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const config = LIFECYCLE;
  const entry = byId(ctx.registry);
  app.post(
    "/sandboxes/:id/exec/stream",
    { config },
    onEntry(ctx, entry, async (e, req, reply) => {
      try {
        await streamCommand(ctx, e, req, reply);
      } catch (err) {
        if (!reply.sent && !reply.raw.headersSent) throw err;
        const message = err instanceof Error ? err.message : String(err);
        reply.raw.end(`${JSON.stringify({ error: { detail: message, code: errorCode(err) } })}\n`);
      }
      return reply;
    }),
  );
  app.get(
    "/sandboxes/:id/files/list",
    { config },
    onEntry(ctx, entry, async (e, req): Promise<native.FileListResponse> => {
      const path = (req.query as { path?: string }).path;
      if (!path) throw new InvalidInputError("query parameter 'path' is required", { field: "path" });
      return { entries: await e.sandbox.files.list(path) };
    }),
  );
  app.post("/sandboxes/:id/timeout", { config }, async (req) => {
    const e = entry(req);
    const { ttl_seconds } = native.SetTimeoutRequest.parse(req.body);
    e.expiresAt = new Date(Date.now() + ttl_seconds * 1000);
    return describe(e, baseUrl(req, ctx.publicUrl));
  });
}
