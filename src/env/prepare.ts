import type { Instance } from "../tasks/types.js";
import { pool, table } from "../util/progress.js";
import { BuildError } from "../errors.js";
import { ensureBuilt, envFor, type EnvOptions } from "./environments.js";

export type PrepareStatus = "built" | "cached" | "failed";

export interface PrepareResult {
  instanceId: string;
  key: string;
  status: PrepareStatus;
  durationMs: number;
  /** For failures: the failing step and the tail of its log. */
  error?: string;
  logFile?: string;
}

/** Build every instance's environment (each distinct one once), `workers` at a time; already-built ones are skipped. */
export async function prepareInstances(
  instances: Instance[],
  opts: EnvOptions & { workers?: number; onResult?: (r: PrepareResult) => void },
): Promise<PrepareResult[]> {
  return pool(instances, opts.workers ?? 2, async (instance) => {
    const t = performance.now();
    let key = "";
    try {
      const env = envFor(instance, opts);
      key = env.key;
      const status = await ensureBuilt({ ...opts, ...env });
      const r: PrepareResult = { instanceId: instance.instance_id, key, status, durationMs: performance.now() - t };
      opts.onResult?.(r);
      return r;
    } catch (e) {
      const r: PrepareResult = {
        instanceId: instance.instance_id,
        key,
        status: "failed",
        durationMs: performance.now() - t,
        error: (e as Error).message,
        ...(e instanceof BuildError ? { logFile: e.logFile } : {}),
      };
      opts.onResult?.(r);
      return r;
    }
  });
}

/** The instances whose environment is ready (built now or before). */
export function builtInstances(instances: readonly Instance[], results: readonly PrepareResult[]): Instance[] {
  const failed = new Set(results.filter((r) => r.status === "failed").map((r) => r.instanceId));
  return instances.filter((i) => !failed.has(i.instance_id));
}

/** One row per instance, the counts, then each failure in full: what `minisandbox prepare` prints. */
export function renderPrepare(results: readonly PrepareResult[]): string {
  const rows = results.map((r) => [
    r.instanceId,
    r.key.slice(0, 12),
    r.status,
    (r.durationMs / 1000).toFixed(1),
    r.error ? r.error.split("\n")[0]! : "",
  ]);
  const n = (s: PrepareStatus): number => results.filter((r) => r.status === s).length;
  const failures = results.filter((r) => r.status === "failed").map((r) => `\n${r.instanceId}: ${r.error}\n`);
  return [
    table(["instance", "environment", "status", "seconds", "reason"], rows),
    `\n${n("built")} built, ${n("cached")} cached, ${n("failed")} failed\n`,
    ...failures,
  ].join("");
}
