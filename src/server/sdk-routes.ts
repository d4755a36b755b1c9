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

type StreamKey = "stdout" | "stderr";

/**
 * Output on its way to a streaming client as NDJSON lines. Chunks are gathered and sent every FLUSH_MS (or once
 * 64 KiB wait), in order, and not while the client is behind (until the socket drains): however the command chunks
 * its output, a few lines per second at most, and what waits is the text itself, within the output limit.
 */
class OutputLines {
  private pending: { key: StreamKey; parts: string[]; length: number }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private blocked = false;

  constructor(private readonly write: (line: string) => boolean) {}

  push(key: StreamKey, text: string): void {
    const last = this.pending[this.pending.length - 1];
    if (last?.key === key) {
      last.parts.push(text);
      last.length += text.length;
    } else {
      this.pending.push({ key, parts: [text], length: text.length });
    }
    if (this.pending.reduce((n, p) => n + p.length, 0) >= 64 * 1024) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), FLUSH_MS);
  }

  /** Send what waits (unless the client is behind: then on drain). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.blocked) return;
    const lines = this.pending.map((p) => `${JSON.stringify({ [p.key]: p.parts.join("") })}\n`).join("");
    this.pending = [];
    if (lines && !this.write(lines)) this.blocked = true;
  }

  drained(): void {
    this.blocked = false;
    this.flush();
  }

  get waiting(): boolean {
    return this.pending.length > 0;
  }
}

const FLUSH_MS = 20;

/** Until the socket drains, closes, or the client goes. */
function drainOrGone(out: NodeJS.WritableStream, gone: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      out.off("drain", done);
      out.off("close", done);
      gone.removeEventListener("abort", done);
      resolve();
    };
    out.on("drain", done);
    out.on("close", done);
    gone.addEventListener("abort", done);
  });
}

/** Run one command, streaming its output as NDJSON lines; the client going away kills the command's whole tree. */
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
  const write = (text: string): boolean => (!out.writableEnded && !gone.aborted ? out.write(text) : true);
  const lines = new OutputLines(write);
  out.on("drain", () => lines.drained());
  // Forwarded as written, up to the output limit over both streams; text split only on whole characters.
  let sent = 0;
  const forward = (key: StreamKey) => {
    const dec = new StringDecoder("utf8");
    return (b: Buffer) => {
      const part = b.subarray(0, Math.max(0, max - sent));
      sent += part.length;
      const text = part.length ? dec.write(part) : "";
      if (text) lines.push(key, text);
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
  lines.flush();
  // The last output before the result, once the client has taken what it was behind on (or left).
  while (lines.waiting && !gone.aborted && !out.writableEnded && !out.destroyed) await drainOrGone(out, gone);
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
  write(`${JSON.stringify({ result })}\n`);
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
