/**
 * The one door to a sandbox: every way of asking for one (a directory, a dataset instance, a built environment's
 * key, an empty one; an OCI image once images are in the store) becomes a `Workspace` here, and only a workspace
 * starts sandboxes (`Workspace.start`). An instance goes spec → environment made present (here, else fetched, else
 * built: `ensurePresent`) → node-cache lease → sandbox options (testbed and venv copy-on-write over the layer, the
 * interpreter read-only, the venv first on PATH), with the task's own setup (SWE-smith: its bug patch, applied and
 * committed). The SDK's `Sandbox.create`, the CLI, the server, rollouts and evaluation all come through here and add
 * only what is theirs (limits, labels, registry entries).
 */
import { InvalidInputError, NotFoundError, SandboxError } from "../errors.js";
import { Sandbox, type SandboxOptions } from "../sandbox/sandbox.js";
import type { Instance } from "../tasks/types.js";
import { homeLayout, resolveHome } from "../util/home.js";
import type { CacheLease } from "./cache/index.js";
import type { HttpSource } from "./store/index.js";
import type { Toolchain } from "./toolchains.js";
import type { TestbedHistory } from "./image-history.js";
import { imageFor, type ImagePolicy } from "./instance-image.js";
import { BUG_COMMIT_SCRIPT, BUG_ON_TOP_SCRIPT, SETUP_ENV } from "./task-setup.js";
import {
  HISTORY_CHOICES,
  isHistoryPolicy,
  TESTBED_PATH,
  VENV_PATH,
  type EnvSpec,
  type HistoryPolicy,
  type LayerKey,
} from "./types.js";

// What instances, environment keys and images need (datasets, environments, the store, images, interpreters) is
// imported where it is used: a directory sandbox, the most frequent and the one that must start fastest, never
// loads it.

/** An instance's environment: its spec and the key of the layer that building the spec gives. */
export interface InstanceEnv {
  spec: EnvSpec;
  key: LayerKey;
}

/** Where a workspace comes from (the server's `source`). */
export type WorkspaceKind = "dir" | "instance" | "env_key" | "image" | "empty";

/**
 * Every way of asking for a sandbox: at most one of `dir`, `instance`, `envKey`, `image` (none: an empty sandbox),
 * or an instance on a given image (`instance` and `image`), and the sandbox's own options (limits, env, labels...),
 * applied over what the environment brings.
 */
export interface SandboxRequest extends SandboxOptions {
  /** The task: the instance itself, or its id in `dataset`. */
  instance?: Instance | string;
  /** Or a built environment by its key, without a task. */
  envKey?: LayerKey;
  /**
   * Or an OCI image by reference (e.g. "docker.io/swebench/sweb.eval.x86_64.sympy_1776_sympy-20590:latest"), run
   * from the store without a container runtime; with `instance`, the image that instance runs on.
   */
  image?: string;
  /**
   * A host Python (e.g. "3.11") first on PATH as python, python3, pip: for a directory or an empty sandbox only.
   * An instance, an environment key or an image runs its own interpreter: `python` there is refused, not ignored.
   */
  python?: string;
  dataset?: string;
  /**
   * Which rows run on an image instead of an environment built from their spec (`instance-image.ts`; default
   * `auto`: the row's own image_name / docker_image when the store holds it; `none` when `environment` is given).
   */
  images?: ImagePolicy;
  specsFile?: string;
  /**
   * The base image of every instance's spec-built environment (the CLI's `--base`): the spec field `base`, as
   * `{"*": {"base": …}}` after the specs file's; part of the environment's key. For instances only.
   */
  base?: string;
  reposDir?: string;
  /** Build the environment when neither this home nor a source has it (default false: a clear error). */
  build?: boolean;
  /** The instance's environment when the caller has it already (default: computed from `specsFile` and `base`). */
  environment?: InstanceEnv;
  /** Peers' servers to fetch the layer from when the local store lacks it (before building it). */
  sources?: readonly HttpSource[];
  /**
   * On an image: its testbed's git history. `"chronological"` (the default): HEAD's commit alone, nothing before
   * or after; `"full"`: the image's own `.git` (every ref it has, the fix perhaps among them; gameable). Default
   * for a task: its spec's `history`, as on a built environment, whose history only its spec decides.
   */
  history?: HistoryPolicy;
}

/** What a workspace is made of; a provider of the server may compose one itself. */
export interface WorkspaceParts {
  kind: WorkspaceKind;
  /** Options of every sandbox started on it (`start` adds the caller's own over them). */
  options: SandboxOptions;
  instance?: Instance;
  env?: InstanceEnv;
  /** Runs once each sandbox is up, before anyone uses it (SWE-smith: the task's bug patch). */
  setup?: (sandbox: Sandbox) => Promise<void>;
  /** Gives what the workspace holds back (its node-cache lease): once, when nothing holds the workspace any more. */
  release?: () => void | Promise<void>;
}

/** The sandbox options a caller adds to a workspace's own when it starts one (never where its files come from). */
export type StartOptions = Omit<SandboxOptions, "dir" | "overlays" | "dirRoots">;

/**
 * Sandbox options on an environment, shared by every sandbox started on it (a group's rollouts, their forks, a warm
 * pool). Whoever holds it (`hold`) keeps it; each sandbox holds it until it closes; when the last holder lets go the
 * environment is given back. A workspace nobody ever started must be let go with `release()`.
 */
export class Workspace {
  readonly kind: WorkspaceKind;
  readonly options: SandboxOptions;
  readonly instance?: Instance;
  readonly env?: InstanceEnv;
  private readonly parts: WorkspaceParts;
  private holders = 0;
  private released = false;
  private readonly onRelease: ((done: Promise<void>) => void)[] = [];

  constructor(parts: WorkspaceParts) {
    this.parts = parts;
    this.kind = parts.kind;
    this.options = parts.options;
    if (parts.instance) this.instance = parts.instance;
    if (parts.env) this.env = parts.env;
  }

  get isReleased(): boolean {
    return this.released;
  }

  /** One more holder; the returned function lets go (once, however often it is called). */
  hold(): () => void {
    if (this.released) throw new SandboxError("workspace used after it was released");
    this.holders++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (--this.holders === 0) this.giveBack();
    };
  }

  /** Let go of a workspace that no sandbox holds (one never started, or done with): it is given back now. */
  release(): void {
    if (this.holders === 0 && !this.released) this.giveBack();
  }

  /** Called with the release's promise when the workspace is given back (e.g. to await it at shutdown). */
  onReleased(fn: (done: Promise<void>) => void): void {
    this.onRelease.push(fn);
  }

  /**
   * A sandbox on the workspace, set up for its task; it holds the workspace until it closes. `own` (limits,
   * network, env, labels...) goes over the workspace's options. A sandbox that fails to start or to be set up is
   * closed, and lets go of the workspace.
   */
  async start(own: StartOptions = {}): Promise<Sandbox> {
    const letGo = this.hold();
    let sb: Sandbox;
    try {
      sb = await Sandbox.create(withOwn(this.options, own));
    } catch (e) {
      letGo();
      throw e;
    }
    sb.onClose(letGo);
    try {
      await this.parts.setup?.(sb);
    } catch (e) {
      await sb.close();
      throw e;
    }
    return sb;
  }

  /** A sandbox made from one of this workspace's (a fork) holds it too, until it closes. */
  adopt(sandbox: Sandbox): void {
    sandbox.onClose(this.hold());
  }

  /** Called at once (a lease's release starts now); its promise goes to whoever waits for it. */
  private giveBack(): void {
    this.released = true;
    let done: Promise<void>;
    try {
      done = Promise.resolve(this.parts.release?.()).then(() => undefined);
    } catch (e) {
      done = Promise.reject(e);
    }
    done.catch(() => undefined);
    for (const fn of this.onRelease) fn(done);
  }
}

/**
 * The one merge of options, wherever a workspace meets a request: what the caller gives wins field by field (what it
 * leaves undefined does not count, here or inside env, labels and limits, which merge key by key); mounts,
 * toolchains and PATH entries add up, the environment's first.
 */
export function withOwn(base: SandboxOptions, own: SandboxOptions): SandboxOptions {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(own)) if (v !== undefined) out[k] = v;
  const merged: SandboxOptions = {
    env: keyByKey(base.env, own.env),
    labels: keyByKey(base.labels, own.labels),
    limits: keyByKey(base.limits, own.limits),
    overlays: addUp(base.overlays, own.overlays),
    binds: addUp(base.binds, own.binds),
    toolchains: addUp(base.toolchains, own.toolchains),
    pathPrepend: addUp(base.pathPrepend, own.pathPrepend),
  };
  for (const [k, v] of Object.entries(merged)) if (v !== undefined) out[k] = v;
  return out as SandboxOptions;
}

const addUp = <T>(a: T[] | undefined, b: T[] | undefined): T[] | undefined =>
  a === undefined ? b : b === undefined ? a : [...a, ...b];

function keyByKey<T extends object>(a: T | undefined, b: T | undefined): T | undefined {
  if (a === undefined || b === undefined) return a ?? b;
  const given = Object.entries(b).filter(([, v]) => v !== undefined);
  return { ...a, ...Object.fromEntries(given) };
}

/** The kind of workspace a request asks for; more than one source is bad input. */
export function kindOf(req: SandboxRequest): WorkspaceKind {
  const given = (["dir", "instance", "envKey", "image"] as const).filter((k) => req[k] !== undefined);
  if (given.length === 2 && req.instance !== undefined && req.image !== undefined) return "instance";
  if (given.length > 1)
    throw new InvalidInputError(
      `a sandbox comes from at most one of dir, instance, envKey, image (got ${given.join(", ")})`,
    );
  const kinds = { dir: "dir", instance: "instance", envKey: "env_key", image: "image" } as const;
  return given[0] ? kinds[given[0]] : "empty";
}

/**
 * The one rule for `python`: a host interpreter first on PATH, for sandboxes that have no environment of their own
 * (a directory, an empty one). An instance, an environment key or an image runs its own interpreter, which a host
 * Python on PATH would silently shadow or be shadowed by: refused, as bad input.
 */
export function checkPython(kind: WorkspaceKind, python: string | undefined): void {
  if (python === undefined || kind === "dir" || kind === "empty") return;
  throw new InvalidInputError(
    "python is for a sandbox on a directory or an empty one: an instance, an environment key or an image runs " +
      "its own environment's interpreter; leave python out",
  );
}

/** Resolve any request into its workspace (the environment present and leased); `start()` it, then `release()`. */
export async function resolveWorkspace(req: SandboxRequest): Promise<Workspace> {
  const kind = kindOf(req);
  checkPython(kind, req.python);
  if (req.images && kind !== "instance")
    throw new InvalidInputError("an image policy (images, --images, --image-template) is for dataset instances only");
  if (req.base !== undefined && kind !== "instance")
    throw new InvalidInputError("a base image (base, --base) is for the environments of dataset instances only");
  checkHistory(req.history);
  if (kind === "image") return imageWorkspace(req, req.image!);
  if (kind !== "instance") notOnImage(req);
  if (kind === "env_key") return taskWorkspace({ ...req, instance: undefined });
  if (kind === "dir" || kind === "empty") return dirWorkspace(req);
  const instance = typeof req.instance === "string" ? await instanceById(req.instance, req.dataset) : req.instance!;
  const policy = req.images ?? { kind: req.environment ? "none" : "auto" };
  const image = req.image ?? (await rowImageRef(resolveHome(req.home), instance, policy));
  if (image) return imageWorkspace({ ...req, instance }, image);
  notOnImage(req);
  return taskWorkspace({ ...req, instance });
}

function checkHistory(history: unknown): void {
  if (history !== undefined && !isHistoryPolicy(history))
    throw new InvalidInputError(`history ${JSON.stringify(history)}: expected ${HISTORY_CHOICES}`);
}

/**
 * A request's `history` is for an image's testbed: a built one's is its spec's (part of its key), a directory's its
 * own.
 */
function notOnImage(req: SandboxRequest): void {
  if (req.history === undefined) return;
  throw new InvalidInputError(
    "history (--history) is for a sandbox on an image; a built environment's history is its spec's " +
      '(`{"*": {"history": "full"}}` in the specs file), a directory\'s is its own',
  );
}

/**
 * The image a row's environment is under the policy, if any: the one the policy names (whether or not the store has
 * it yet), or under `auto` the row's own when the store holds it.
 */
export async function rowImageRef(home: string, instance: Instance, policy: ImagePolicy): Promise<string | undefined> {
  const pick = imageFor(instance, policy);
  if (!pick || pick.required) return pick?.ref;
  const [{ openStore }, { findStoredImage }] = await Promise.all([
    import("./store/index.js"),
    import("./images/index.js"),
  ]);
  const store = openStore(homeLayout(home).store);
  return (await findStoredImage(store, pick.ref).catch(() => undefined)) ? pick.ref : undefined;
}

/** A sandbox for any request, set up; closing it gives its environment back. */
export async function openSandbox(req: SandboxRequest = {}): Promise<Sandbox> {
  const ws = await resolveWorkspace(req);
  try {
    return await ws.start();
  } finally {
    ws.release();
  }
}

/** The request's own sandbox options: everything but how the workspace is found. */
function ownOptions(req: SandboxRequest): SandboxOptions {
  const {
    instance,
    envKey,
    image,
    images,
    python,
    dataset,
    specsFile,
    base,
    reposDir,
    build,
    environment,
    sources,
    history,
    ...own
  } = req;
  return own;
}

/** A directory (or nothing) with, on request, a host Python first on PATH. */
async function dirWorkspace(req: SandboxRequest): Promise<Workspace> {
  const own = ownOptions(req);
  const kind = own.dir === undefined ? "empty" : "dir";
  if (req.python === undefined) return new Workspace({ kind, options: own });
  const { pythonOnPath } = await import("./python-on-path.js");
  const py = await pythonOnPath(req.python, resolveHome(own.home));
  return new Workspace({ kind, options: withOwn({ toolchains: py.toolchains, pathPrepend: py.pathPrepend }, own) });
}

/**
 * An OCI image from the store: its root filesystem (placed once per node in the cache's form, leased) becomes the
 * sandbox's `/`, copy-on-write, with the image config's Env, WorkingDir and User (`images/runtime.ts`); the caller's
 * options go over them. Its files keep the image's owners inside (`image-root.ts`). Its testbed's
 * history is chronological unless asked otherwise (`image-history.ts`): a `.git` of HEAD's commit alone, over the
 * image's own.
 */
async function imageWorkspace(req: SandboxRequest, ref: string): Promise<Workspace> {
  const home = resolveHome(req.home);
  const [{ imageRoot }, { nodeCacheFor }] = await Promise.all([import("./image-root.js"), import("./environments.js")]);
  const instance = typeof req.instance === "object" ? req.instance : undefined;
  const history = await imageHistory(req, instance);
  const cache = nodeCacheFor(home);
  const { image, options: onImage, release } = await imageRoot(cache, ref);
  let git: TestbedHistory | undefined;
  try {
    if (history === "chronological") {
      const { testbedHistory } = await import("./image-history.js");
      git = await testbedHistory(home, cache, image, ref);
    }
  } catch (e) {
    await release();
    throw e;
  }
  const labels = { image: ref, env: image.rootfs, ...(instance ? { instance: instance.instance_id } : {}) };
  const overlays = git ? { overlays: [git.overlay] } : {};
  const options = withOwn({ ...onImage, ...overlays, home, labels }, ownOptions({ ...req, home }));
  // The bug becomes the only commit of a chronological testbed, as on a built one; over the image's history, on top.
  const bug = git ? BUG_COMMIT_SCRIPT : BUG_ON_TOP_SCRIPT;
  return new Workspace({
    kind: instance ? "instance" : "image",
    options,
    ...(instance ? { instance, setup: (sb: Sandbox) => applyBugPatch(sb, instance, bug) } : {}),
    release: async () => {
      await git?.release();
      await release();
    },
  });
}

/**
 * The history an image's testbed gets: the request's (`history`), else a task's spec's (as a built testbed's:
 * `{"*": {"history": "full"}}` in the specs file, or the row's `spec`), else chronological.
 */
async function imageHistory(req: SandboxRequest, instance: Instance | undefined): Promise<HistoryPolicy> {
  if (req.history !== undefined) return req.history;
  if (instance === undefined) return "chronological";
  if (req.environment) return req.environment.spec.history ?? "chronological";
  const { historyForInstance } = await import("./spec.js");
  return historyForInstance(instance, { specsFile: req.specsFile });
}

/** An instance's (or a built environment's) workspace: the layer made present, leased, mounted copy-on-write. */
async function taskWorkspace(req: SandboxRequest & { instance?: Instance }): Promise<Workspace> {
  const home = resolveHome(req.home);
  const [{ isLayerKey }, { ensurePresent, envFor, nodeCacheFor }] = await Promise.all([
    import("./store/index.js"),
    import("./environments.js"),
  ]);
  if (req.envKey !== undefined && !isLayerKey(req.envKey)) throw new NotFoundError(`unknown environment ${req.envKey}`);
  const instance = req.instance;
  const env = instance ? (req.environment ?? envFor(instance, req)) : undefined;
  const present = { home, sources: req.sources, specsFile: req.specsFile, base: req.base, reposDir: req.reposDir };
  await ensurePresent(env ?? { key: req.envKey! }, { ...present, build: (req.build ?? false) && env !== undefined });
  const { spec, key } = env ?? (await builtEnv(home, req.envKey!));
  const toolchain = await toolchainFor(home, spec.python);
  const lease = await nodeCacheFor(home).acquire(key);
  const base = await baseRoot(home, spec).catch(async (e) => {
    await lease.release();
    throw e;
  });
  const layer = layerOptions(home, spec, key, lease, toolchain, instance);
  const options = withOwn(base ? withOwn(base.options, layer) : layer, ownOptions({ ...req, home }));
  return new Workspace({
    kind: instance ? "instance" : "env_key",
    options,
    env: { spec, key },
    ...(instance ? { instance } : {}),
    setup: (sb) => (instance ? applyTaskSetup(sb, instance, spec) : Promise.resolve()),
    release: async () => {
      await lease.release();
      await base?.release();
    },
  });
}

/** A spec-built environment on a base image runs on that image's root (and its Env), as it was built. */
async function baseRoot(
  home: string,
  spec: EnvSpec,
): Promise<{ options: SandboxOptions; release: () => Promise<void> } | undefined> {
  if (spec.base === undefined) return undefined;
  const [{ imageRoot }, { nodeCacheFor }] = await Promise.all([import("./image-root.js"), import("./environments.js")]);
  const { options, release } = await imageRoot(nodeCacheFor(home), spec.base);
  // The image's own PATH with the venv first (pathPrepend prefixes only the default PATH, not a given one).
  const path = options.env?.["PATH"];
  const env = path === undefined ? options.env : { ...options.env, PATH: `${VENV_PATH}/bin:${path}` };
  return { options: { rootfs: options.rootfs, env, labels: { base: spec.base } }, release };
}

/** Sandbox options for a built layer: its trees copy-on-write, its interpreter, its venv first on PATH. */
function layerOptions(
  home: string,
  spec: EnvSpec,
  key: LayerKey,
  lease: CacheLease,
  toolchain: Toolchain,
  instance: Instance | undefined,
): SandboxOptions {
  return {
    home,
    overlays: [
      { lower: [lease.trees["testbed"]!], target: TESTBED_PATH },
      { lower: [lease.trees["venv"]!], target: VENV_PATH },
    ],
    toolchains: toolchain.mounts,
    pathPrepend: [`${VENV_PATH}/bin`],
    env: { VIRTUAL_ENV: VENV_PATH, ...spec.env },
    cwd: TESTBED_PATH,
    labels: { env: key, repo: spec.repo, ...(instance ? { instance: instance.instance_id } : {}) },
  };
}

/** What a task needs once its sandbox is up: SWE-smith's bug patch, the testbed's only commit (`task-setup.ts`). */
async function applyTaskSetup(sb: Sandbox, instance: Instance, spec: EnvSpec): Promise<void> {
  return applyBugPatch(sb, instance, spec.history === "full" ? BUG_ON_TOP_SCRIPT : BUG_COMMIT_SCRIPT);
}

async function applyBugPatch(sb: Sandbox, instance: Instance, script: string): Promise<void> {
  if (!instance.bug_patch) return;
  const r = await sb.exec(script, { stdin: instance.bug_patch, env: SETUP_ENV, cwd: TESTBED_PATH });
  if (r.exitCode !== 0)
    throw new SandboxError(`could not apply the bug patch of ${instance.instance_id}: ${r.stderr.trim()}`);
}

async function instanceById(id: string, dataset: string | undefined): Promise<Instance> {
  if (!dataset) throw new InvalidInputError(`instance ${id} given by id: a dataset is needed (--dataset FILE)`);
  const { loadDataset } = await import("../tasks/index.js");
  const [instance] = await loadDataset(dataset, { instanceIds: [id] });
  return instance!;
}

/**
 * A built environment by key: its spec comes from the record written when it was built, or, for a layer that came
 * from elsewhere, from its manifest (kept only if it hashes to the key; the record is then written here).
 */
async function builtEnv(home: string, key: string): Promise<InstanceEnv> {
  const [{ isLayerKey, openStore, readManifest }, { readEnvRecord, writeEnvRecord }, { specKey }] = await Promise.all([
    import("./store/index.js"),
    import("./environments.js"),
    import("./spec.js"),
  ]);
  if (!isLayerKey(key)) throw new NotFoundError(`unknown environment ${key}`);
  const record = readEnvRecord(home, key);
  if (record) return { spec: record.spec, key };
  const manifest = await readManifest(openStore(homeLayout(home).store), key).catch(() => undefined);
  const spec = (manifest?.meta as { spec?: EnvSpec } | undefined)?.spec;
  if (!spec || specKey(spec) !== key) throw new NotFoundError(`unknown environment ${key}`);
  writeEnvRecord(home, { key, spec });
  return { spec, key };
}

const toolchains = new Map<string, Promise<Toolchain>>();

/** Interpreter discovery walks pyenv/conda/PATH (hundreds of ms): once per process, home and version. */
function toolchainFor(home: string, version: string): Promise<Toolchain> {
  const id = `${home}\0${version}`;
  let t = toolchains.get(id);
  if (!t) {
    t = import("./toolchains.js").then(({ findToolchain }) => findToolchain(version, { home }));
    toolchains.set(id, t);
    t.catch(() => toolchains.delete(id));
  }
  return t;
}
