import { asTaskInstance } from "../tasks/index.js";
import type { Instance } from "../tasks/types.js";
import type { CamelOf, plan } from "../wire/index.js";
import { pool, table } from "../util/progress.js";
import { BuildError } from "../errors.js";
import { explainBuildFailure } from "./build-diagnosis.js";
import { ensureBuilt, envFor, type EnvOptions } from "./environments.js";

export type PrepareStatus = "built" | "cached" | "failed";

export interface PrepareResult {
  instanceId: string;
  key: string;
  status: PrepareStatus;
  durationMs: number;
  /** For failures: the cause, in one line (the failing step and what the log says went wrong). */
  error?: string;
  /** For failures with a known remedy: what to do, in one line. */
  fix?: string;
  logFile?: string;
}

/** `prepare --plan` (the wire's `PreparePlan`, camelCase): each distinct environment once, the instances without. */
export type PreparePlan = CamelOf<typeof plan.PreparePlan>;

/**
 * The instances grouped by environment, nothing built: each distinct environment once, with the first of its
 * instances (what a node builds it from), and the instances whose spec cannot be made. For running elsewhere (a
 * fleet); `plan.PreparePlan.fromCamel(p)` is what `prepare --plan` prints.
 */
export function planPrepare(instances: readonly Instance[], opts: { specsFile?: string } = {}): PreparePlan {
  const environments = new Map<string, PreparePlan["environments"][number]>();
  const errors: PreparePlan["errors"] = [];
  for (const instance of instances) {
    let key: string;
    try {
      key = envFor(instance, opts).key;
    } catch (e) {
      errors.push({ instanceId: instance.instance_id, error: (e as Error).message });
      continue;
    }
    const env = environments.get(key) ?? { envKey: key, instanceIds: [], instance: asTaskInstance(instance) };
    env.instanceIds.push(instance.instance_id);
    environments.set(key, env);
  }
  return { environments: [...environments.values()], errors };
}

/** Build every instance's environment (each distinct one once), `workers` at a time; already-built ones are skipped. */
export async function prepareInstances(
  instances: Instance[],
  opts: EnvOptions & {
    workers?: number;
    onResult?: (r: PrepareResult) => void;
    /** Each build step as it starts (toolchain, fetch, checkout, venv, dependencies, install, store...). */
    onStep?: (instanceId: string, step: string) => void;
  },
): Promise<PrepareResult[]> {
  return pool(instances, opts.workers ?? 2, async (instance) => {
    const t = performance.now();
    let key = "";
    try {
      const env = envFor(instance, opts);
      key = env.key;
      const onStep = (step: string) => opts.onStep?.(instance.instance_id, step);
      const status = await ensureBuilt({ ...opts, ...env, onStep });
      const r: PrepareResult = { instanceId: instance.instance_id, key, status, durationMs: performance.now() - t };
      opts.onResult?.(r);
      return r;
    } catch (e) {
      const r: PrepareResult = {
        instanceId: instance.instance_id,
        key,
        status: "failed",
        durationMs: performance.now() - t,
        ...explained(e),
        ...(e instanceof BuildError ? { logFile: e.logFile } : {}),
      };
      opts.onResult?.(r);
      return r;
    }
  });
}

function explained(e: unknown): { error: string; fix?: string } {
  const f = explainBuildFailure(e);
  return f.fix ? { error: f.cause, fix: f.fix } : { error: f.cause };
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
  const failures = results
    .filter((r) => r.status === "failed")
    .map((r) => {
      const more = [r.fix ? `  fix: ${r.fix}` : "", r.logFile ? `  log: ${r.logFile}` : ""].filter(Boolean);
      return `\n${r.instanceId}: ${r.error}\n${more.map((l) => `${l}\n`).join("")}`;
    });
  return [
    table(["instance", "environment", "status", "seconds", "reason"], rows),
    `\n${n("built")} built, ${n("cached")} cached, ${n("failed")} failed\n`,
    ...failures,
  ].join("");
}
