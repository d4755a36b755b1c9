/**
 * JSON bodies as FastAPI reads them: empty means absent, a missing content type is read as JSON, malformed JSON is a
 * 422 `json_invalid`. The raw body's SHA-256 is kept for the replay key.
 */
import { createHash } from "node:crypto";
import type { FastifyInstance, FastifyRequest } from "fastify";
import "./fastify-types.js";
import { WireValidationError } from "../wire/index.js";

function jsonError(e: Error): WireValidationError {
  const m = /position (\d+)/.exec(e.message);
  return new WireValidationError([
    {
      type: "json_invalid",
      loc: ["body", m ? Number(m[1]) : 0],
      msg: "JSON decode error",
      input: {},
      ctx: { error: e.message },
    },
  ]);
}

export function registerBodyParser(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(
    "*",
    { parseAs: "buffer" },
    (req: FastifyRequest, body: Buffer | string, done: (err: Error | null, body?: unknown) => void) => {
      const raw = typeof body === "string" ? Buffer.from(body) : body;
      req.bodyDigest = createHash("sha256").update(raw).digest("hex");
      if (raw.length === 0) return done(null, undefined);
      const text = raw.toString("utf8");
      const ct = String(req.headers["content-type"] ?? "");
      if (ct !== "" && !/json/i.test(ct)) return done(null, text);
      try {
        return done(null, JSON.parse(text));
      } catch (e) {
        return done(jsonError(e as Error));
      }
    },
  );
}
