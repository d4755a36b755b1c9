/**
 * The one place a task becomes a workspace: instance → spec → built layer → node-cache lease → sandbox options
 * (testbed and venv copy-on-write over the layer, the interpreter read-only, the venv first on PATH) → sandbox, with
 * the task's own setup (SWE-smith: its bug patch, applied and committed). A built environment's key works too.
 */
import { InvalidInputError, NotFoundError, SandboxError } from "../errors.js";
import { Sandbox, type SandboxOptions } from "../sandbox/sandbox.js";
import { loadDataset } from "../tasks/index.js";
import type { Instance } from "../tasks/types.js";
import { homeLayout, resolveHome } from "../util/home.js";
import type { CacheLease } from "./cache/index.js";
import {
  ensureBuilt,
  envFor,
  isBuilt,
  nodeCacheFor,
  readCacheConfig,
  readEnvRecord,
  writeEnvRecord,
} from "./environments.js";
import { isLayerKey, openStore, readManifest, type HttpSource } from "./store/index.js";
import { specKey } from "./spec.js";
import { findToolchain, type Toolchain } from "./toolchains.js";
import { BUG_COMMIT_SCRIPT, BUG_ON_TOP_SCRIPT, SETUP_ENV } from "./task-setup.js";
import { TESTBED_PATH, VENV_PATH, type EnvSpec, type LayerKey } from "./types.js";

/** An instance's environment: its spec and the key of the layer that building the spec gives. */
export interface InstanceEnv {
  spec: EnvSpec;
  key: LayerKey;
}

/** A workspace on a task's environment; every sandbox option but `dir` and `overlays` applies on top of it. */
export interface WorkspaceRequest extends Omit<SandboxOptions, "dir" | "overlays"> {
  /** The task: the instance itself, or its id in `dataset`. */
  instance?: Instance | string;
  /** Or a built environment by its key, without a task. */
  envKey?: LayerKey;
  dataset?: string;
  specsFile?: string;
  reposDir?: string;
  /** Build the environment first if the store lacks it (default false: fail with a clear message). */
  build?: boolean;
  /** The instance's environment when the caller has it already (default: computed from `specsFile`). */
  environment?: InstanceEnv;
  /** Peers' servers to fetch the layer from when the local store lacks it (before building it). */
  sources?: readonly HttpSource[];
}

/** A resolved workspace: what `Sandbox.create` needs, and what to do once the sandbox is up and once it is gone. */
export interface Workspace extends InstanceEnv {
  instance?: Instance;
  /** The environment's mounts, interpreter, variables and labels, under the request's own options. */
  options: SandboxOptions;
  /** Runs once the sandbox is up, before anyone uses it. */
  setup: (sandbox: Sandbox) => Promise<void>;
  /** Gives the layer back to the node cache: once the sandbox is gone, or was never made. */
  release: () => Promise<void>;
}

/** Resolve a request into sandbox options on a leased layer (building it first with `build`). */
export async function resolveWorkspace(req: WorkspaceRequest): Promise<Workspace> {
  const { instance: ref, envKey, dataset, specsFile, reposDir, build, environment, sources, ...own } = req;
  if ((ref === undefined) === (envKey === undefined))
    throw new InvalidInputError("a workspace needs an instance or an environment key (one of them)");
  const home = resolveHome(req.home);
  const instance = typeof ref === "string" ? await instanceById(ref, dataset) : ref;
  const wanted = instance ? (environment ?? envFor(instance, { specsFile })).key : envKey!;
  if (sources?.length && isLayerKey(wanted) && !(await isBuilt(home, wanted)))
    await nodeCacheFor(home).fetch(wanted, { sources });
  const { spec, key } = instance ? (environment ?? envFor(instance, { specsFile })) : await builtEnv(home, envKey!);
  if (build && instance) await ensureBuilt({ home, spec, key, specsFile, reposDir });
  const { options, lease } = await layerWorkspace(home, spec, key);
  const taskLabel: Record<string, string> = instance ? { instance: instance.instance_id } : {};
  return {
    instance,
    spec,
    key,
    options: {
      ...options,
      ...own,
      home,
      env: { ...options.env, ...own.env },
      labels: { ...options.labels, ...taskLabel, ...own.labels },
    },
    setup: (sb) => (instance ? applyTaskSetup(sb, instance, spec) : Promise.resolve()),
    release: () => lease.release(),
  };
}

/** A sandbox on a task's environment, set up; closing it releases the layer. */
export async function openWorkspace(req: WorkspaceRequest): Promise<Sandbox> {
  const ws = await resolveWorkspace(req);
  let sb: Sandbox;
  try {
    sb = await Sandbox.create(ws.options);
  } catch (e) {
    await ws.release();
    throw e;
  }
  sb.onClose(() => void ws.release());
  try {
    await ws.setup(sb);
  } catch (e) {
    await sb.close();
    throw e;
  }
  return sb;
}

/** What a task needs once its sandbox is up: SWE-smith's bug patch, the testbed's only commit (`task-setup.ts`). */
async function applyTaskSetup(sb: Sandbox, instance: Instance, spec: EnvSpec): Promise<void> {
  if (!instance.bug_patch) return;
  const script = spec.history === "full" ? BUG_ON_TOP_SCRIPT : BUG_COMMIT_SCRIPT;
  const r = await sb.exec(script, { stdin: instance.bug_patch, env: SETUP_ENV, cwd: TESTBED_PATH });
  if (r.exitCode !== 0)
    throw new SandboxError(`could not apply the bug patch of ${instance.instance_id}: ${r.stderr.trim()}`);
}

async function instanceById(id: string, dataset: string | undefined): Promise<Instance> {
  if (!dataset) throw new SandboxError(`instance ${id}: a dataset is needed (--dataset FILE)`);
  const [instance] = await loadDataset(dataset, { instanceIds: [id] });
  return instance!;
}

/**
 * A built environment by key: its spec comes from the record written when it was built, or, for a layer that came
 * from elsewhere, from its manifest (kept only if it hashes to the key; the record is then written here).
 */
async function builtEnv(home: string, key: string): Promise<InstanceEnv> {
  if (!isLayerKey(key)) throw new NotFoundError(`unknown environment ${key}`);
  const record = readEnvRecord(home, key);
  if (record) return { spec: record.spec, key };
  const manifest = await readManifest(openStore(homeLayout(home).store), key).catch(() => undefined);
  const spec = (manifest?.meta as { spec?: EnvSpec } | undefined)?.spec;
  if (!spec || specKey(spec) !== key) throw new NotFoundError(`unknown environment ${key}`);
  writeEnvRecord(home, { key, spec });
  return { spec, key };
}

/** Sandbox options for a built layer: its trees copy-on-write, its interpreter, its venv first on PATH. */
async function layerWorkspace(
  home: string,
  spec: EnvSpec,
  key: LayerKey,
): Promise<{ options: SandboxOptions; lease: CacheLease }> {
  if (!(await isBuilt(home, key)) && !readCacheConfig(home).remotes?.length)
    throw new NotFoundError(
      `environment ${key.slice(0, 12)} (${spec.repo}@${spec.commit.slice(0, 12)}) is not built: ` +
        "run `minisandbox prepare` first",
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

const toolchains = new Map<string, Promise<Toolchain>>();

/** Interpreter discovery walks pyenv/conda/PATH (hundreds of ms): once per process, home and version. */
function toolchainFor(home: string, version: string): Promise<Toolchain> {
  const id = `${home}\0${version}`;
  let t = toolchains.get(id);
  if (!t) {
    t = findToolchain(version, { home });
    toolchains.set(id, t);
    t.catch(() => toolchains.delete(id));
  }
  return t;
}
