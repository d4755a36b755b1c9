/** SWE-ReX `/read_file` and `/write_file`, and the bounded read both APIs use. */
import type { FastifyInstance } from "fastify";
import { pythonReadError, readBounded, writeBounded } from "./bounded-io.js";
import { LimitError } from "../errors.js";
import { swerex } from "../wire/index.js";
import { pyReadText } from "./pycompat.js";
import { fileError, RUNTIME } from "./runtime-common.js";
import { onEntry, type EntryResolver, type RouteContext } from "./route-context.js";
import type { Entry } from "./registry.js";

/**
 * A file's bytes within the server's read limits, counted against its budget of concurrent reads. Errors are the
 * sandbox's typed ones (not found 404, not a regular file 400, over the cap 429, deadline 504).
 */
export async function readForClient(ctx: RouteContext, e: Entry, path: string): Promise<Buffer> {
  const release = await ctx.reads.acquire(15_000);
  if (!release)
    throw new LimitError(
      `${ctx.reads.capacity} file reads are in progress on this server (none came free within 15 s); retry`,
      {
        retryAfterMs: 1000,
      },
    );
  try {
    return await readBounded(e.sandbox, path, {
      maxBytes: ctx.limits.maxReadBytes,
      timeoutMs: ctx.limits.fileTimeoutMs,
    });
  } finally {
    release();
  }
}

export function registerFileRoutes(app: FastifyInstance, prefix: string, resolve: EntryResolver, ctx: RouteContext) {
  app.post(
    `${prefix}/read_file`,
    { config: RUNTIME },
    onEntry(ctx, resolve, async (e, req) => {
      const r = swerex.ReadFileRequest.parse(req.body);
      let bytes: Buffer;
      try {
        bytes = await readForClient(ctx, e, r.path);
      } catch (err) {
        const bounds = { maxBytes: ctx.limits.maxReadBytes, timeoutMs: ctx.limits.fileTimeoutMs };
        throw await pythonReadError(e.sandbox, err, r.path, bounds);
      }
      return { content: pyReadText(bytes, r.encoding, r.errors) };
    }),
  );
  app.post(
    `${prefix}/write_file`,
    { config: RUNTIME },
    onEntry(ctx, resolve, async (e, req) => {
      const r = swerex.WriteFileRequest.parse(req.body);
      try {
        await writeBounded(e.sandbox, r.path, r.content, ctx.limits.fileTimeoutMs);
      } catch (err) {
        throw fileError(err, r.path);
      }
      return {};
    }),
  );
}
