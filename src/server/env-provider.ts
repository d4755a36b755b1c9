import { join } from "node:path";
import type { Sandbox } from "../sandbox/sandbox.js";
import { loadDataset, type Instance } from "../tasks/index.js";
import { openSandbox, resolveWorkspace, type InstanceEnv, type Workspace } from "../env/workspace.js";
import { ensurePresent, envFor, nodeCacheFor } from "../env/environments.js";
import { prepareTestbedHistory } from "../env/image-history.js";
import { historyForInstance } from "../env/spec.js";
import { evaluate } from "../eval/reward-api.js";
import { runEvalJobToFiles } from "../eval/job.js";
import { evalSandboxRequest } from "../eval/runner/sandbox.js";
import { agentDiff, pristineListing } from "../eval/runner/agent-diff.js";
import { BuildError, errMessage, NotFoundError } from "../errors.js";
import { withOneLineMessage } from "../env/build-diagnosis.js";
import { homeLayout } from "../util/home.js";
import { getImage, loadRegistryConfig } from "../env/images/index.js";
import { ensureBaseImage, ensureImage } from "../env/prepare.js";
import { openStore } from "../env/store/index.js";
import type { ImagePolicy } from "../env/instance-image.js";
import type {
  EvaluationJob,
  LayerSources,
  PrepareOutcome,
  ProvidedWorkspace,
  ProviderFactory,
  WorkspaceProvider,
} from "./provider.js";

/**
 * The real provider behind `serve --dataset`: instance sandboxes on prepared (or built on demand) environments,
 * evaluation in a fresh sandbox (rewards), and the workspace diff.
 */
export function envProvider(opts: {
  home: string;
  instances: readonly Instance[];
  reposDir?: string;
  specsFile?: string;
  images?: ImagePolicy;
}): WorkspaceProvider {
  const instance = instanceLookup(opts.instances);
  // Layer leases are given back asynchronously; a server shutting down waits for them (no lease file outlives it).
  const releasing = new Pending();
  /** A workspace whose release the server's shutdown waits for (no lease file outlives it). */
  const tracked = (workspace: Workspace, meta: Record<string, unknown>): ProvidedWorkspace => {
    workspace.onReleased((done) => releasing.track(done));
    return { workspace, meta };
  };
  return {
    async forInstance(id: string, o: LayerSources = {}): Promise<ProvidedWorkspace> {
      const inst = instance(id);
      const { home, reposDir, specsFile } = opts;
      const ws = await resolveWorkspace({
        home,
        instance: inst,
        reposDir,
        specsFile,
        build: true,
        sources: o.sources,
        ...(opts.images ? { images: opts.images } : {}),
      }).catch((e) => {
        throw withOneLineMessage(e);
      });
      const env = ws.env ? { env_key: ws.env.key, repo: ws.env.spec.repo } : { image: ws.options.labels?.["image"] };
      return tracked(ws, { instance_id: inst.instance_id, ...env, base_commit: inst.base_commit });
    },
    async forEnvKey(key: string, o: LayerSources = {}): Promise<ProvidedWorkspace> {
      const ws = await resolveWorkspace({ home: opts.home, envKey: key, sources: o.sources });
      return tracked(ws, { env_key: key, repo: ws.env!.spec.repo });
    },
    evaluate: (sandbox: Sandbox, id: string) => evaluateSandbox(opts, instance(id), sandbox),
    diff: (sandbox: Sandbox) => {
      const id = sandbox.labels["instance"];
      if (!id) throw new NotFoundError(`sandbox ${sandbox.id} was not created from a dataset instance`);
      return workspaceDiff(opts, instance(id), sandbox);
    },
    listInstances: async () => opts.instances.map((i) => i.instance_id),
    settle: () => releasing.settle(),
    prepare: (inst, o) => prepareHere(opts, inst, o),
    evaluateJob: (job, open) =>
      evaluateJobHere(opts, job, async (env) => {
        const image = job.image === undefined ? {} : { image: job.image };
        const ws = await resolveWorkspace(
          await evalSandboxRequest({ home: opts.home, instance: job.instance, env, ...image }),
        );
        const meta = { instance_id: job.instance.instance_id, env_key: env.key, repo: env.spec.repo, ...image };
        return open(tracked(ws, { ...meta, purpose: "eval" }));
      }),
  };
}

type ProviderOptions = { home: string; reposDir?: string; specsFile?: string; images?: ImagePolicy };

/** An instance by id; image-based runners lower-case ids (docker image names): a unique case-insensitive match too. */
function instanceLookup(instances: readonly Instance[]): (id: string) => Instance {
  const byId = new Map(instances.map((i) => [i.instance_id, i]));
  const byLower = new Map<string, Instance | null>();
  for (const i of instances) {
    const k = i.instance_id.toLowerCase();
    byLower.set(k, byLower.has(k) ? null : i);
  }
  return (id) => {
    const found = byId.get(id) ?? byLower.get(id.toLowerCase()) ?? undefined;
    if (!found) throw new NotFoundError(`unknown instance ${id} (the server's dataset has ${byId.size} instances)`);
    return found;
  };
}

/** A live sandbox graded in a fresh one of its task (the rewards API), as the evaluate route answers it. */
async function evaluateSandbox(opts: ProviderOptions, instance: Instance, sandbox: Sandbox) {
  const { home, reposDir, specsFile } = opts;
  const r = await evaluate(sandbox, { instance, home, reposDir, specsFile });
  const { instanceId, resolved, status, reward, report, timings } = r;
  return { instance_id: instanceId, resolved, status, reward, report, timings, error: r.error ?? null };
}

/** The agent's changes: the base is a fresh sandbox of the same task (files its build left untracked are not). */
async function workspaceDiff(opts: ProviderOptions, instance: Instance, sandbox: Sandbox): Promise<string> {
  let listing: Buffer;
  {
    const images = opts.images ? { images: opts.images } : {};
    await using fresh = await openSandbox({ home: opts.home, instance, specsFile: opts.specsFile, ...images });
    listing = await pristineListing(fresh);
  }
  return (await agentDiff(sandbox, listing)).patch;
}

/** One job of a run planned elsewhere, in a sandbox the server makes (`openSandbox`); its files come back. */
function evaluateJobHere(
  opts: ProviderOptions,
  job: EvaluationJob,
  openSandbox: (env: InstanceEnv) => Promise<Sandbox>,
) {
  const { home, specsFile, reposDir } = opts;
  return runEvalJobToFiles(
    { home, specsFile, reposDir, ...job, openSandbox },
    join(homeLayout(home).root, "server", "jobs"),
  );
}

/** Promises still running, awaited together at the end. */
class Pending {
  private readonly running = new Set<Promise<unknown>>();

  track(p: Promise<unknown>): void {
    const settled = p.catch(() => undefined).finally(() => this.running.delete(settled));
    this.running.add(settled);
  }

  async settle(): Promise<void> {
    while (this.running.size > 0) await Promise.all([...this.running]);
  }
}

/** A row's environment made present here (`ensurePresent`); a spec that cannot be made or a failed build is the
 * row's failure, an environment no source has (and that may not be built) the node's error. */
async function prepareHere(
  opts: ProviderOptions,
  instance: Instance,
  o: LayerSources & { build: boolean; image?: string },
): Promise<PrepareOutcome> {
  if (o.image !== undefined) return prepareImageHere(opts, instance, o.image, o.build);
  let env: InstanceEnv;
  try {
    env = envFor(instance, { specsFile: opts.specsFile });
  } catch (e) {
    return { envKey: null, status: "failed", error: errMessage(e) };
  }
  try {
    if (o.build) await ensureBaseImage(opts.home, env.spec);
  } catch (e) {
    return {
      envKey: env.key,
      status: "failed",
      error: `base image ${env.spec.base} could not be pulled: ${errMessage(e)}`,
    };
  }
  try {
    const status = await ensurePresent(env, { ...opts, sources: o.sources, build: o.build });
    return { envKey: env.key, status, error: null };
  } catch (e) {
    if (e instanceof BuildError) return { envKey: env.key, status: "failed", error: errMessage(e) };
    throw e;
  }
}

/**
 * A row's image present here: in the store already, else pulled (with the home's mirrors) when the job may make
 * what is missing, and its testbed's chronological history derived; a pull or a derivation that fails is the row's
 * failure.
 */
async function prepareImageHere(
  opts: ProviderOptions,
  instance: Instance,
  image: string,
  build: boolean,
): Promise<PrepareOutcome> {
  const { home } = opts;
  const store = openStore(homeLayout(home).store);
  if (!build) {
    const have = await getImage(store, image);
    return { envKey: have.rootfs, status: "present", error: null };
  }
  let r: Awaited<ReturnType<typeof ensureImage>>;
  try {
    r = await ensureImage(store, image, loadRegistryConfig(home));
  } catch (e) {
    return { envKey: null, status: "failed", error: `image ${image} could not be pulled: ${errMessage(e)}` };
  }
  try {
    if (historyForInstance(instance, { specsFile: opts.specsFile }) !== "full")
      await prepareTestbedHistory(home, nodeCacheFor(home), image);
  } catch (e) {
    return { envKey: r.key, status: "failed", error: errMessage(e) };
  }
  return { envKey: r.key, status: r.status === "pulled" ? "pulled" : "present", error: null };
}

export const envProviderFactory: ProviderFactory = async ({ home, dataset, reposDir, specsFile, images }) =>
  envProvider({ home, instances: dataset ? await loadDataset(dataset) : [], reposDir, specsFile, images });
