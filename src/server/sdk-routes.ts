/**
 * Native routes for the SDK's E2B-style surface: a command whose output streams as it is written (and which a client
 * stops by disconnecting: background commands), a directory listing, and a new deadline for a sandbox.
 */
import { StringDecoder } from "node:string_decoder";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { errorCode, InvalidInputError } from "../errors.js";
import type { StreamedCommand } from "../sandbox/files.js";
import { native } from "../wire/index.js";
import { baseUrl, describe, LIFECYCLE } from "./lifecycle-sandboxes.js";
import type { Entry } from "./registry.js";
import { byId, onEntry, type RouteContext } from "./route-context.js";

/** argv that enters `cwd`, merges stderr when asked, then becomes the command (no shell parsing of the command). */
function wrapped(command: string | string[], cwd: string, merge: boolean): string[] {
  const argv = typeof command === "string" ? ["/bin/bash", "-c", command] : command;
  const script = 'cd -- "$1" || exit 1; [ "$2" = 1 ] && exec 2>&1; shift 2; exec "$@"';
  return ["/bin/bash", "-c", script, "exec", cwd, merge ? "1" : "0", ...argv];
}

interface Streamed {
  exitCode: number;
  timedOut: boolean;
  truncated: boolean;
  signal: string | null;
}

/** Run one command, writing each chunk as an NDJSON line; the client going away kills the command's whole tree. */
async function streamCommand(ctx: RouteContext, e: Entry, req: FastifyRequest, reply: FastifyReply): Promise<void> {
  const r = native.ExecRequest.parse(req.body);
  const max = r.output_limit_bytes ?? ctx.limits.maxReadBytes;
  if (max > ctx.limits.maxReadBytes)
    throw new InvalidInputError(`output_limit_bytes ${max} is above this server's maximum ${ctx.limits.maxReadBytes}`);
  const started = performance.now();
  const cmd: StreamedCommand = e.sandbox.stream(
    wrapped(r.command, r.cwd ?? e.sandbox.cwd, r.merge_output ?? false),
    r.env ?? {},
  );
  reply.hijack();
  const out = reply.raw;
  out.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store" });
  out.flushHeaders(); // the client learns at once that the command started, output or not
  const line = (obj: object): void => {
    if (!out.writableEnded) out.write(`${JSON.stringify(obj)}\n`);
  };
  let sent = 0;
  let truncated = false;
  const forward = (key: "stdout" | "stderr") => {
    const dec = new StringDecoder("utf8");
    cmd.child[key]!.on("data", (b: Buffer) => {
      if (sent >= max) {
        truncated = true;
        return;
      }
      const part = b.subarray(0, max - sent);
      sent += part.length;
      truncated ||= part.length < b.length;
      const text = dec.write(part);
      if (text) line({ [key]: text });
    });
  };
  forward("stdout");
  forward("stderr");
  cmd.child.stdin!.on("error", () => {});
  cmd.child.stdin!.end(r.stdin ?? "");
  let timedOut = false;
  let gone = false;
  const timer =
    r.timeout_ms === undefined
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          void cmd.kill();
        }, r.timeout_ms);
  out.once("close", () => {
    if (!out.writableFinished) {
      gone = true;
      void cmd.kill();
    }
  });
  const done = await new Promise<Streamed>((resolve) => {
    cmd.child.once("close", (code, signal) =>
      resolve({ exitCode: timedOut ? 124 : (code ?? 128 + 9), timedOut, truncated, signal: signal ?? null }),
    );
  });
  if (timer) clearTimeout(timer);
  cmd.cleanup();
  ctx.metrics.commands.observe({ kind: "exec" }, (performance.now() - started) / 1000);
  if (gone) return;
  line({
    result: {
      exit_code: done.exitCode,
      stdout: "",
      stderr: "",
      timed_out: done.timedOut,
      truncated: done.truncated,
      limit: done.timedOut ? "timeout" : null,
      signal: done.signal,
      duration_ms: performance.now() - started,
    },
  });
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
