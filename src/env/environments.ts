import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { homeLayout } from "../util/home.js";
import type { Instance } from "../tasks/types.js";
import { specForInstance, specKey } from "./spec.js";
import type { EnvSpec, LayerKey } from "./types.js";
import { buildEnvironment, type BuildStep } from "./build.js";
import { hasLayer, openStore, type HttpSource } from "./store/index.js";
import { LayerUnavailableError, NotFoundError } from "../errors.js";
import { NodeCache } from "./cache/index.js";

/** What we remember about a built environment (next to its layer): the spec and the validation verdict. */
export interface EnvRecord {
  key: LayerKey;
  spec: EnvSpec;
  builtAt?: string;
  buildMs?: number;
  validation?: ValidationVerdict;
}

export interface ValidationVerdict {
  valid: boolean;
  checkedAt: string;
  instanceId: string;
  /** Why not valid: which tests, which direction. */
  problems: string[];
}

/**
 * What instances' specs come from besides the built-in table and the rows: every caller that computes an instance's
 * environment passes both, so that every command finds the key `prepare` built.
 */
export interface SpecSource {
  /** The `--specs` override file. */
  specsFile?: string;
  /** Every instance's base image (`--base`): the spec field `base`, as `{"*": {"base": …}}` after the file's. */
  base?: string;
}

export interface EnvOptions extends SpecSource {
  home: string;
  reposDir?: string;
}

export function envFor(instance: Instance, opts: SpecSource): { spec: EnvSpec; key: LayerKey } {
  const spec = specForInstance(instance, { specsFile: opts.specsFile, base: opts.base });
  return { spec, key: specKey(spec) };
}

function recordPath(home: string, key: LayerKey): string {
  return join(homeLayout(home).envs, `${key}.json`);
}

export function readEnvRecord(home: string, key: LayerKey): EnvRecord | undefined {
  try {
    return JSON.parse(readFileSync(recordPath(home, key), "utf8")) as EnvRecord;
  } catch {
    return undefined;
  }
}

export function writeEnvRecord(home: string, record: EnvRecord): void {
  const p = recordPath(home, record.key);
  mkdirSync(homeLayout(home).envs, { recursive: true });
  writeFileSync(`${p}.tmp`, JSON.stringify(record, null, 2));
  renameSync(`${p}.tmp`, p);
}

export async function isBuilt(home: string, key: LayerKey): Promise<boolean> {
  return existsSync(homeLayout(home).store) && hasLayer(openStore(homeLayout(home).store), key);
}

/** An environment made sure of: built now (with where its build's time went, step by step), or already there. */
export type Ensured = { status: "built"; steps: BuildStep[] } | { status: "cached" };

const inflight = new Map<string, Promise<Ensured>>();

/** Build the environment unless the store has it; concurrent calls for one key share the work. */
export async function ensureBuilt(
  opts: EnvOptions & { spec: EnvSpec; key: LayerKey; onStep?: (s: string) => void },
): Promise<"built" | "cached"> {
  return (await ensureBuiltSteps(opts)).status;
}

/** `ensureBuilt`, with the build's steps when it built. */
export function ensureBuiltSteps(
  opts: EnvOptions & { spec: EnvSpec; key: LayerKey; onStep?: (s: string) => void },
): Promise<Ensured> {
  const id = `${opts.home}\0${opts.key}`;
  let p = inflight.get(id);
  if (!p) {
    p = (async (): Promise<Ensured> => {
      if (await isBuilt(opts.home, opts.key)) return { status: "cached" };
      const r = await buildEnvironment({
        home: opts.home,
        spec: opts.spec,
        key: opts.key,
        reposDir: opts.reposDir,
        cache: nodeCacheFor(opts.home),
        onStep: opts.onStep,
      });
      writeEnvRecord(opts.home, {
        ...readEnvRecord(opts.home, opts.key),
        key: opts.key,
        spec: opts.spec,
        builtAt: new Date().toISOString(),
        buildMs: r.durationMs,
      });
      return { status: "built", steps: r.steps };
    })().finally(() => inflight.delete(id));
    inflight.set(id, p);
  }
  return p;
}

/** How an environment came to be present: it was here, it was fetched, or it was built now. */
export type Presence = "present" | "fetched" | "built";

export interface PresenceOptions extends EnvOptions {
  /** Peers' servers to fetch the layer from (after the remote stores of the home's configuration). */
  sources?: readonly HttpSource[];
  /** Build it when no store or source has it (default false). Needs the spec. */
  build?: boolean;
  onStep?: (step: string) => void;
}

/**
 * An environment made present in this home's store: already here, else fetched (the configured remote stores, then
 * `sources`), else built (`build`, with the spec known). Throws `LayerUnavailableError` when sources were given,
 * none had it and it may not be built (another node may have it), `NotFoundError` when nothing has it and it may not
 * be built, the build's `BuildError`; any other failure of a source (a corrupt remote store) as it is.
 */
export async function ensurePresent(env: { key: LayerKey; spec?: EnvSpec }, o: PresenceOptions): Promise<Presence> {
  if (await isBuilt(o.home, env.key)) return "present";
  const sources = o.sources ?? [];
  const build = (o.build ?? false) && env.spec !== undefined;
  if (sources.length > 0 || readCacheConfig(o.home).remotes?.length) {
    try {
      const cache = nodeCacheFor(o.home);
      await cache.fetch(env.key, { sources });
      await cache.prepareImage(env.key);
      return "fetched";
    } catch (e) {
      const absent = e instanceof LayerUnavailableError || e instanceof NotFoundError;
      if (!absent || !build) throw e;
    }
  }
  if (!build) throw notPresent(env);
  const done = await ensureBuilt({ ...o, spec: env.spec!, key: env.key });
  return done === "built" ? "built" : "present";
}

function notPresent(env: { key: LayerKey; spec?: EnvSpec }): NotFoundError {
  if (!env.spec) return new NotFoundError(`unknown environment ${env.key} (not here, and no source has it)`);
  return new NotFoundError(
    `environment ${env.key.slice(0, 12)} (${env.spec.repo}@${env.spec.commit.slice(0, 12)}) is not built: ` +
      "run `minisandbox prepare` first",
  );
}

const caches = new Map<string, NodeCache>();

/**
 * Node cache settings from `<home>/config.json` → `cache`: `{ maxBytes, maxConcurrent, bytesPerSec, remotes, form }`.
 * `MINISANDBOX_REMOTE_STORES` (colon-separated directories on shared storage) adds remote stores to pull from.
 */
export interface CacheConfig {
  maxBytes?: number;
  maxConcurrent?: number;
  bytesPerSec?: number;
  remotes?: string[];
  /** How workspaces get layers: "auto" (default: an image mounted where possible, else materialized), or one form. */
  form?: "tree" | "image" | "auto";
}

export function readCacheConfig(home: string): CacheConfig {
  let config: CacheConfig = {};
  try {
    config = (JSON.parse(readFileSync(join(home, "config.json"), "utf8")) as { cache?: CacheConfig }).cache ?? {};
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT")
      throw new Error(`${join(home, "config.json")}: ${(e as Error).message}`);
  }
  const extra = (process.env.MINISANDBOX_REMOTE_STORES ?? "").split(":").filter(Boolean);
  return { ...config, remotes: [...(config.remotes ?? []), ...extra] };
}

export function nodeCacheFor(home: string): NodeCache {
  let c = caches.get(home);
  if (!c) {
    c = new NodeCache({
      form: "auto",
      ...readCacheConfig(home),
      store: openStore(homeLayout(home).store),
      dir: homeLayout(home).cache,
    });
    caches.set(home, c);
  }
  return c;
}
