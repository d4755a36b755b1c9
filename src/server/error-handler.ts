/**
 * Errors to HTTP answers. Validation errors: 422 `{"detail": [...]}`. SWE-ReX routes: 511 `swerexception` bodies
 * (except for a sandbox that is not there: 404). Native routes: the status of the error's code, `{detail, code}`.
 * Fastify's own 4xx (body too large, bad multipart) keep their status. A wrong method is 405, as in FastAPI.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { errorCode, RequestValidationError } from "../errors.js";
import { retryAfterSeconds, statusFor, swerexception } from "./errors.js";
import { PyError } from "./pycompat.js";
import { SessionError } from "../session/errors.js";

type FastifyLikeError = Error & { statusCode?: number; code?: string };

function isTransportError(err: FastifyLikeError): boolean {
  return (
    typeof err.statusCode === "number" &&
    err.statusCode >= 400 &&
    err.statusCode < 500 &&
    typeof err.code === "string" &&
    err.code.startsWith("FST_")
  );
}

/**
 * Errors of SWE-ReX routes that are about the request, not the runtime: they keep their HTTP status (a missing
 * sandbox 404, an upload over the size limit 413, retry later 429), as SWE-ReX's own server answers them.
 * Errors that carry a Python class (`PyError`, `SessionError`) are always 511 swerexceptions.
 */
const HTTP_LEVEL_CODES = new Set(["sandbox_not_found", "upload_too_large", "limit_reached"]);

function answeredOverHttp(err: Error, code: string): boolean {
  if (err instanceof PyError || err instanceof SessionError) return false;
  return HTTP_LEVEL_CODES.has(code);
}

function answer(err: FastifyLikeError, req: FastifyRequest, reply: FastifyReply) {
  if (err instanceof RequestValidationError) return reply.code(422).send({ detail: err.detail });
  if (isTransportError(err)) return reply.code(err.statusCode!).send({ detail: err.message, code: err.code });
  const retry = retryAfterSeconds(err);
  if (retry !== undefined) reply.header("retry-after", String(retry));
  const code = errorCode(err);
  if (req.routeOptions.config?.kind === "runtime" && !answeredOverHttp(err, code)) {
    req.log.info({ err: { message: err.message, name: err.name } }, "runtime error (511)");
    return reply.code(511).send(swerexception(err));
  }
  const status = statusFor(err);
  if (status >= 500) req.log.error({ err }, "request failed");
  return reply.code(status).send({ detail: err.message, code });
}

/** Registers the error handler and the 404 / 405 answer (`routes` learns every route pattern as it is added). */
export function registerErrorHandling(app: FastifyInstance): void {
  const routes: { method: string[]; re: RegExp }[] = [];
  app.addHook("onRoute", (r) => {
    const re = new RegExp(`^${r.url.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:[A-Za-z_]+/g, "[^/]+")}$`);
    routes.push({ method: ([] as string[]).concat(r.method as string | string[]), re });
  });
  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split("?")[0]!;
    const allowed = routes.filter((r) => r.re.test(path)).flatMap((r) => r.method);
    if (allowed.length) {
      reply.header("allow", [...new Set(allowed)].join(", "));
      return reply.code(405).send({ detail: "Method Not Allowed" });
    }
    return reply.code(404).send({ detail: "Not Found" });
  });
  app.setErrorHandler((err: FastifyLikeError, req: FastifyRequest, reply: FastifyReply) => answer(err, req, reply));
}
