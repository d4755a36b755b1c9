import { asTaskInstance } from "../tasks/index.js";
import type { Instance } from "../tasks/types.js";
import type { CamelOf, plan } from "../wire/index.js";
import { pool, table } from "../util/progress.js";
import { BuildError } from "../errors.js";
import { explainBuildFailure } from "./build-diagnosis.js";
import { ensureBuiltSteps, envFor, nodeCacheFor, type EnvOptions, type SpecSource } from "./environments.js";
import { historyForInstance } from "./spec.js";
import type { BuildStep } from "./build.js";
import { canonicalReference, loadRegistryConfig, type RegistryConfig } from "./images/index.js";
import type { ImagePolicy } from "./instance-image.js";
import { openStore, type Store } from "./store/index.js";
import { homeLayout } from "../util/home.js";
import { rowImageRef } from "./workspace.js";
import { ensureImage, imageHistoryNow } from "./present.js";

/** `pulled`: the row runs on an image, fetched now (`cached`: it was in the store, or the environment was built). */
export type PrepareStatus = "built" | "cached" | "pulled" | "failed";

export interface PrepareResult {
  instanceId: string;
  /** The environment's layer key; for a row on an image, its root filesystem's. */
  key: string;
  /** The image the row runs on (`images` policy), when it runs on one. */
  image?: string;
  status: PrepareStatus;
  durationMs: number;
  /**
   * Built now: where the time went, step by step (toolchain, fetch, history, checkout, requirements, sandbox,
   * dependencies, install N, bytecode, normalize, compile, finalize, store, other, and `prepare`: the rest); they
   * add up to `durationMs`.
   */
  steps?: BuildStep[];
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
 * instances (what a node builds it from), and the instances whose spec cannot be made. A row the image policy puts on
 * an image (`images`, default `auto`: a row's own image when `home`'s store has it) is grouped by that image, named
 * canonically (a node pulls it, or gets it from a peer); a row whose image reference is invalid is an error. For
 * running elsewhere (a fleet); `plan.PreparePlan.fromCamel(p)` is what `prepare --plan` prints.
 */
export async function planPrepare(
  instances: readonly Instance[],
  opts: SpecSource & { home?: string; images?: ImagePolicy } = {},
): Promise<PreparePlan> {
  const environments = new Map<string, PreparePlan["environments"][number]>();
  const errors: PreparePlan["errors"] = [];
  for (const instance of instances) {
    let key: string;
    let image: string | undefined;
    try {
      key = envFor(instance, opts).key;
      image = await plannedImage(instance, opts);
    } catch (e) {
      errors.push({ instanceId: instance.instance_id, error: (e as Error).message });
      continue;
    }
    const id = image ?? key;
    const env = environments.get(id) ?? {
      envKey: key,
      ...(image ? { image } : {}),
      instanceIds: [],
      instance: asTaskInstance(instance),
    };
    env.instanceIds.push(instance.instance_id);
    environments.set(id, env);
  }
  return { environments: [...environments.values()], errors };
}

/** The image a planned row runs on, by its canonical name (the one nodes list); refused when not a reference. */
export async function plannedImage(
  instance: Instance,
  opts: { home?: string; images?: ImagePolicy },
): Promise<string | undefined> {
  const policy = opts.images ?? { kind: "auto" };
  if (policy.kind === "none" || (policy.kind === "auto" && opts.home === undefined)) return undefined;
  const ref = await rowImageRef(opts.home ?? "", instance, policy);
  return ref === undefined ? undefined : canonicalReference(ref);
}

/** Build every instance's environment (each distinct one once), `workers` at a time; already-built ones are skipped. */
export async function prepareInstances(
  instances: Instance[],
  opts: EnvOptions & {
    workers?: number;
    onResult?: (r: PrepareResult) => void;
    /** Each build step as it starts (toolchain, fetch, checkout, venv, dependencies, install, store...). */
    onStep?: (instanceId: string, step: string) => void;
    /** Which rows run on an image (default `auto`: a row's own image when the store has it); those are pulled. */
    images?: ImagePolicy;
    /** Mirrors and plain-http hosts for pulls (default: the home's registries.json). */
    registries?: RegistryConfig;
  },
): Promise<PrepareResult[]> {
  const pulls = new ImagePulls(opts.home, opts.registries);
  return pool(instances, opts.workers ?? 2, async (instance) => {
    const t = performance.now();
    let key = "";
    let image: string | undefined;
    try {
      image = await plannedImage(instance, opts);
      const onStep = (step: string) => opts.onStep?.(instance.instance_id, step);
      let status: PrepareStatus;
      let steps: BuildStep[] | undefined;
      if (image !== undefined) {
        onStep(`image ${image}`);
        ({ key, status } = await pulls.ensure(image));
        await imageHistoryNow(opts.home, image, historyForInstance(instance, opts));
      } else {
        const env = envFor(instance, opts);
        key = env.key;
        // A spec built on a base image needs that image here first (pulled once however many specs name it).
        if (env.spec.base !== undefined) await pulls.ensure(env.spec.base);
        const ensured = await ensureBuiltSteps({ ...opts, ...env, onStep });
        status = ensured.status;
        if (ensured.status === "built") steps = ensured.steps;
      }
      const r: PrepareResult = { instanceId: instance.instance_id, key, status, durationMs: performance.now() - t };
      if (image !== undefined) r.image = image;
      if (steps) r.steps = withRest(steps, r.durationMs);
      opts.onResult?.(r);
      return r;
    } catch (e) {
      const r: PrepareResult = {
        instanceId: instance.instance_id,
        key,
        ...(image !== undefined ? { image } : {}),
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

/** The build's steps, then `prepare`: the rest of the row's time (its spec, its image policy, the record). */
function withRest(steps: readonly BuildStep[], durationMs: number): BuildStep[] {
  const built = steps.reduce((n, s) => n + s.durationMs, 0);
  return [...steps, { name: "prepare", durationMs: Math.max(0, durationMs - built) }];
}

/** Images the rows run on, each pulled once however many rows name it (unless the store has it already). */
class ImagePulls {
  private readonly store: Store;
  private readonly pulls = new Map<string, Promise<{ key: string; status: PrepareStatus }>>();

  constructor(
    private readonly home: string,
    private registries: RegistryConfig | undefined,
  ) {
    this.store = openStore(homeLayout(home).store);
  }

  ensure(ref: string): Promise<{ key: string; status: PrepareStatus }> {
    let p = this.pulls.get(ref);
    if (!p) {
      p = this.pull(ref);
      this.pulls.set(ref, p);
    }
    return p;
  }

  private async pull(ref: string): Promise<{ key: string; status: PrepareStatus }> {
    this.registries ??= loadRegistryConfig(this.home);
    const r = await ensureImage(this.store, ref, this.registries);
    if (r.status === "pulled") await nodeCacheFor(this.home).prepareImage(r.key);
    return r;
  }
}

function explained(e: unknown): { error: string; fix?: string } {
  const f = explainBuildFailure(e);
  return f.fix ? { error: f.cause, fix: f.fix } : { error: f.cause };
}

/** The instances whose environment is built and ready (now or before); rows on images are not built. */
export function builtInstances(instances: readonly Instance[], results: readonly PrepareResult[]): Instance[] {
  const notBuilt = new Set(
    results.filter((r) => r.status === "failed" || r.image !== undefined).map((r) => r.instanceId),
  );
  return instances.filter((i) => !notBuilt.has(i.instance_id));
}

/** One row per instance, the counts, then each failure in full: what `minisandbox prepare` prints. */
export function renderPrepare(results: readonly PrepareResult[]): string {
  const rows = results.map((r) => [
    r.instanceId,
    r.key.slice(0, 12),
    r.status,
    (r.durationMs / 1000).toFixed(1),
    r.error ? r.error.split("\n")[0]! : r.image ? `on ${r.image}` : "",
  ]);
  const n = (s: PrepareStatus): number => results.filter((r) => r.status === s).length;
  const pulled = n("pulled") > 0 ? `${n("pulled")} pulled, ` : "";
  const failures = results
    .filter((r) => r.status === "failed")
    .map((r) => {
      const more = [r.fix ? `  fix: ${r.fix}` : "", r.logFile ? `  log: ${r.logFile}` : ""].filter(Boolean);
      return `\n${r.instanceId}: ${r.error}\n${more.map((l) => `${l}\n`).join("")}`;
    });
  return [
    table(["instance", "environment", "status", "seconds", "reason"], rows),
    `\n${n("built")} built, ${pulled}${n("cached")} cached, ${n("failed")} failed\n`,
    ...failures,
  ].join("");
}
