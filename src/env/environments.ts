import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { homeLayout } from "../util/home.js";
import { NotFoundError } from "../errors.js";
import type { Instance } from "../tasks/types.js";
import { specForInstance, specKey } from "./spec.js";
import { TESTBED_PATH, VENV_PATH, type EnvSpec, type LayerKey } from "./types.js";
import { buildEnvironment } from "./build.js";
import { findToolchain } from "./toolchains.js";
import { hasLayer, openStore } from "./store/index.js";
import { NodeCache, type CacheLease } from "./cache/index.js";
import type { SandboxOptions } from "../sandbox/sandbox.js";

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

export interface EnvOptions {
  home: string;
  specsFile?: string;
  reposDir?: string;
}

export function envFor(instance: Instance, opts: Pick<EnvOptions, "specsFile">): { spec: EnvSpec; key: LayerKey } {
  const spec = specForInstance(instance, { specsFile: opts.specsFile });
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

const inflight = new Map<string, Promise<"built" | "cached">>();

/** Build the environment unless the store has it; concurrent calls for one key share the work. */
export function ensureBuilt(
  opts: EnvOptions & { spec: EnvSpec; key: LayerKey; onStep?: (s: string) => void },
): Promise<"built" | "cached"> {
  const id = `${opts.home}\0${opts.key}`;
  let p = inflight.get(id);
  if (!p) {
    p = (async () => {
      if (await isBuilt(opts.home, opts.key)) return "cached" as const;
      const r = await buildEnvironment({
        home: opts.home,
        spec: opts.spec,
        key: opts.key,
        reposDir: opts.reposDir,
        onStep: opts.onStep,
      });
      writeEnvRecord(opts.home, {
        ...readEnvRecord(opts.home, opts.key),
        key: opts.key,
        spec: opts.spec,
        builtAt: new Date().toISOString(),
        buildMs: r.durationMs,
      });
      return "built" as const;
    })().finally(() => inflight.delete(id));
    inflight.set(id, p);
  }
  return p;
}

const caches = new Map<string, NodeCache>();

/**
 * Node cache settings from `<home>/config.json` → `cache`: `{ maxBytes, maxConcurrent, bytesPerSec, remotes }`.
 * `MINISANDBOX_REMOTE_STORES` (colon-separated directories on shared storage) adds remote stores to pull from.
 */
export interface CacheConfig {
  maxBytes?: number;
  maxConcurrent?: number;
  bytesPerSec?: number;
  remotes?: string[];
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
      ...readCacheConfig(home),
      store: openStore(homeLayout(home).store),
      dir: homeLayout(home).cache,
    });
    caches.set(home, c);
  }
  return c;
}

const toolchains = new Map<string, ReturnType<typeof findToolchain>>();

/** Interpreter discovery walks pyenv/conda/PATH (hundreds of ms): once per process, home and version. */
function toolchainFor(home: string, version: string): ReturnType<typeof findToolchain> {
  const id = `${home}\0${version}`;
  let t = toolchains.get(id);
  if (!t) {
    t = findToolchain(version, { home });
    toolchains.set(id, t);
    t.catch(() => toolchains.delete(id));
  }
  return t;
}

/** Sandbox options for a built environment: its trees copy-on-write, its interpreter, its venv first on PATH. */
export async function workspaceFor(
  home: string,
  spec: EnvSpec,
  key: LayerKey,
): Promise<{ options: SandboxOptions; lease: CacheLease }> {
  if (!(await isBuilt(home, key)) && !readCacheConfig(home).remotes?.length)
    throw new NotFoundError(
      `environment ${key.slice(0, 12)} (${spec.repo}@${spec.commit.slice(0, 12)}) is not built: run \`minisandbox prepare\` first`,
    );
  const toolchain = await toolchainFor(home, spec.python);
  const lease = await nodeCacheFor(home).acquire(key);
  return {
    lease,
    options: {
      home,
      overlays: [
        { lower: [lease.trees["testbed"]!], target: TESTBED_PATH },
        { lower: [lease.trees["venv"]!], target: VENV_PATH },
      ],
      toolchains: toolchain.mounts,
      pathPrepend: [`${VENV_PATH}/bin`],
      env: { VIRTUAL_ENV: VENV_PATH, ...spec.env },
      cwd: TESTBED_PATH,
      labels: { env: key, repo: spec.repo },
    },
  };
}
