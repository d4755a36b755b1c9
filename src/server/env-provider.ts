import { join } from "node:path";
import type { Sandbox } from "../sandbox/sandbox.js";
import { loadDataset, type Instance } from "../tasks/index.js";
import { openSandbox, resolveWorkspace, type InstanceEnv, type Workspace } from "../env/workspace.js";
import { envFor, type SpecSource } from "../env/environments.js";
import { makePresent, type RowTarget } from "../env/present.js";
import { historyForInstance } from "../env/spec.js";
import { evaluate } from "../eval/reward-api.js";
import { runEvalJobToFiles } from "../eval/job.js";
import { evalSandboxRequest } from "../eval/runner/sandbox.js";
import { agentDiff, pristineListing } from "../eval/runner/agent-diff.js";
import { errMessage, NotFoundError } from "../errors.js";
import { withOneLineMessage } from "../env/build-diagnosis.js";
import { homeLayout } from "../util/home.js";
import { Slots } from "../util/slots.js";
import { defaultBesideSandboxes } from "../sandbox/capacity.js";
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
  base?: string;
  images?: ImagePolicy;
}): WorkspaceProvider {
  const instance = instanceLookup(opts.instances);
  // Grading and diffing each start a sandbox beside the one asked about: they take turns, as a rollout engine's
  // fresh rewards do, and the server counts them in its maxima.
  const beside = new Slots(defaultBesideSandboxes());
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
      const { home, reposDir, specsFile, base } = opts;
      const ws = await resolveWorkspace({
        home,
        instance: inst,
        reposDir,
        specsFile,
        base,
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
    evaluate: (sandbox: Sandbox, id: string) => beside.run(() => evaluateSandbox(opts, instance(id), sandbox)),
    diff: (sandbox: Sandbox) => {
      const id = sandbox.labels["instance"];
      if (!id) throw new NotFoundError(`sandbox ${sandbox.id} was not created from a dataset instance`);
      return beside.run(() => workspaceDiff(opts, instance(id), sandbox));
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

type ProviderOptions = SpecSource & { home: string; reposDir?: string; images?: ImagePolicy };

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
  const { home, reposDir, specsFile, base } = opts;
  const r = await evaluate(sandbox, { instance, home, reposDir, specsFile, base });
  const { instanceId, resolved, status, reward, report, timings } = r;
  return { instance_id: instanceId, resolved, status, reward, report, timings, error: r.error ?? null };
}

/** The agent's changes: the base is a fresh sandbox of the same task (files its build left untracked are not). */
async function workspaceDiff(opts: ProviderOptions, instance: Instance, sandbox: Sandbox): Promise<string> {
  let listing: Buffer;
  {
    const images = opts.images ? { images: opts.images } : {};
    const specs = { specsFile: opts.specsFile, base: opts.base };
    await using fresh = await openSandbox({ home: opts.home, instance, ...specs, ...images });
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
  const { home, specsFile, base, reposDir } = opts;
  return runEvalJobToFiles(
    { home, specsFile, base, reposDir, ...job, openSandbox },
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

/**
 * A row's image or environment made present here (`makePresent`); a spec that cannot be made, a failed pull or a
 * failed build is the row's failure, an environment no source has (and that may not be made) the node's error.
 */
async function prepareHere(
  opts: ProviderOptions,
  instance: Instance,
  o: LayerSources & { build: boolean; image?: string },
): Promise<PrepareOutcome> {
  let target: RowTarget;
  try {
    target =
      o.image !== undefined
        ? { image: o.image, history: historyForInstance(instance, opts) }
        : { env: envFor(instance, opts) };
  } catch (e) {
    return { envKey: null, status: "failed", error: errMessage(e) };
  }
  const made = await makePresent(target, { ...opts, sources: o.sources, build: o.build });
  return { envKey: made.key, status: made.status, error: made.status === "failed" ? made.error : null };
}

export const envProviderFactory: ProviderFactory = async ({ dataset, ...o }) =>
  envProvider({ ...o, instances: dataset ? await loadDataset(dataset) : [] });
