/**
 * The SWE-ReX remote runtime, served for one sandbox under a prefix (`/sandboxes/<id>` or the root). Field names,
 * defaults, response shapes, messages and exception class paths follow swe-rex 1.4; failures other than
 * validation errors are HTTP 511 `swerexception` bodies.
 */
import type { FastifyInstance } from "fastify";
import { RUNTIME } from "./runtime-common.js";
import { registerExecuteRoute } from "./runtime-execute.js";
import { registerFileRoutes } from "./runtime-files.js";
import { registerSessionRoutes } from "./runtime-sessions.js";
import { registerUploadRoute } from "./runtime-upload.js";
import type { EntryResolver, RouteContext } from "./route-context.js";

export function registerRuntimeRoutes(
  app: FastifyInstance,
  prefix: string,
  resolve: EntryResolver,
  ctx: RouteContext,
): void {
  if (prefix !== "")
    app.get(`${prefix}/`, { config: RUNTIME }, async (req) => {
      resolve(req);
      return { message: "hello world" };
    });
  app.get(`${prefix}/is_alive`, { config: RUNTIME }, async (req) => {
    resolve(req).lastActive = Date.now();
    return { is_alive: true, message: "" };
  });
  registerSessionRoutes(app, prefix, resolve, ctx);
  registerExecuteRoute(app, prefix, resolve, ctx);
  registerFileRoutes(app, prefix, resolve, ctx);
  registerUploadRoute(app, prefix, resolve, ctx);
}
