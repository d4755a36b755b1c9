/** Native API: what the workspace provider adds — evaluate, diff, the dataset's instances. */
import type { FastifyInstance } from "fastify";
import { InvalidInputError } from "../errors.js";
import { NotImplementedError } from "../errors.js";
import { LIFECYCLE } from "./lifecycle-sandboxes.js";
import { byId, onEntry, type RouteContext } from "./route-context.js";

export function registerTaskRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { registry, metrics } = ctx;
  const config = LIFECYCLE;
  const entry = byId(registry);
  app.post(
    "/sandboxes/:id/evaluate",
    { config },
    onEntry(ctx, entry, async (e) => {
      const provider = registry.provider;
      if (!provider?.evaluate)
        throw new NotImplementedError(
          "this server's workspace provider cannot evaluate (start it with a dataset: serve --dataset FILE)",
        );
      if (!e.instanceId)
        throw new InvalidInputError(
          `sandbox ${e.id} was not created from a dataset instance; only instance sandboxes can be evaluated`,
        );
      try {
        const result = await provider.evaluate(e.sandbox, e.instanceId);
        metrics.evaluations.inc({ result: "ok" });
        return { id: e.id, instance_id: e.instanceId, result };
      } catch (err) {
        metrics.evaluations.inc({ result: "error" });
        throw err;
      }
    }),
  );
  app.get(
    "/sandboxes/:id/diff",
    { config },
    onEntry(ctx, entry, async (e) => {
      if (!registry.provider?.diff)
        throw new NotImplementedError("this server's workspace provider cannot compute diffs");
      return { id: e.id, diff: await registry.provider.diff(e.sandbox) };
    }),
  );
  app.get("/instances", { config }, async () => {
    const provider = registry.provider;
    if (!provider?.listInstances)
      throw new NotImplementedError("this server's workspace provider cannot list instances");
    return { instances: await provider.listInstances() };
  });
}
