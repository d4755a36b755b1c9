import { join } from "node:path";
import type { Sandbox } from "../sandbox/sandbox.js";
import { loadDataset, type Instance } from "../tasks/index.js";
import { openWorkspace, resolveWorkspace } from "../env/workspace.js";
import { ensureBuilt, envFor, isBuilt, nodeCacheFor, readCacheConfig } from "../env/environments.js";
import { evaluate } from "../eval/reward-api.js";
import { runEvalJobToFiles } from "../eval/job.js";
import { evalSandboxSettings } from "../eval/runner/sandbox.js";
import { agentDiff, pristineListing } from "../eval/runner/agent-diff.js";
import { errMessage, LayerUnavailableError, NotFoundError } from "../errors.js";
import { withOneLineMessage } from "../env/build-diagnosis.js";
import { homeLayout } from "../util/home.js";
import type { InstanceEnv } from "../env/workspace.js";
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
}): WorkspaceProvider {
  const byId = new Map(opts.instances.map((i) => [i.instance_id, i]));
  // Layer leases are given back asynchronously; a server shutting down waits for them (no lease file outlives it).
  const releasing = new Pending();
  // Image-based runners lower-case ids (docker image names): a unique case-insensitive match is that instance.
  const byLower = new Map<string, Instance | null>();
  for (const i of opts.instances) {
    const k = i.instance_id.toLowerCase();
    byLower.set(k, byLower.has(k) ? null : i);
  }
  const instance = (id: string): Instance => {
    const found = byId.get(id) ?? byLower.get(id.toLowerCase()) ?? undefined;
    if (!found) throw new NotFoundError(`unknown instance ${id} (the server's dataset has ${byId.size} instances)`);
    return found;
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
      }).catch((e) => {
        throw withOneLineMessage(e);
      });
      return {
        options: ws.options,
        release: () => releasing.track(ws.release()),
        setup: ws.setup,
        meta: { instance_id: inst.instance_id, env_key: ws.key, repo: ws.spec.repo, base_commit: inst.base_commit },
      };
    },
    async forEnvKey(key: string, o: LayerSources = {}): Promise<ProvidedWorkspace> {
      const ws = await resolveWorkspace({ home: opts.home, envKey: key, sources: o.sources });
      return {
        options: ws.options,
        release: () => releasing.track(ws.release()),
        meta: { env_key: key, repo: ws.spec.repo },
      };
    },
    evaluate: (sandbox: Sandbox, id: string) =>
      evaluate(sandbox, {
        instance: instance(id),
        home: opts.home,
        reposDir: opts.reposDir,
        specsFile: opts.specsFile,
      }).then((r) => ({
        instance_id: r.instanceId,
        resolved: r.resolved,
        status: r.status,
        reward: r.reward,
        report: r.report,
        timings: r.timings,
        error: r.error ?? null,
      })),
    diff: (sandbox: Sandbox) => {
      const id = sandbox.labels["instance"];
      if (!id) throw new NotFoundError(`sandbox ${sandbox.id} was not created from a dataset instance`);
      return workspaceDiff(opts, instance(id), sandbox);
    },
    listInstances: async () => [...byId.keys()],
    settle: () => releasing.settle(),
    prepare: (inst, o) => prepareHere(opts, inst, o),
    evaluateJob: (job, open) => evaluateJobHere(opts, releasing, job, open),
  };
}

type ProviderOptions = { home: string; reposDir?: string; specsFile?: string };

/** The agent's changes: the base is a fresh sandbox of the same task (files its build left untracked are not). */
async function workspaceDiff(opts: ProviderOptions, instance: Instance, sandbox: Sandbox): Promise<string> {
  let listing: Buffer;
  {
    await using fresh = await openWorkspace({ home: opts.home, instance, specsFile: opts.specsFile });
    listing = await pristineListing(fresh);
  }
  return (await agentDiff(sandbox, listing)).patch;
}

/** One job of a run planned elsewhere, in a sandbox the server makes (`open`); its files come back. */
function evaluateJobHere(
  opts: ProviderOptions,
  releasing: Pending,
  job: EvaluationJob,
  open: (workspace: ProvidedWorkspace) => Promise<Sandbox>,
) {
  const openSandbox = async (env: InstanceEnv): Promise<Sandbox> => {
    const settings = await evalSandboxSettings(opts.home, env.spec);
    const ws = await resolveWorkspace({ home: opts.home, instance: job.instance, environment: env, ...settings });
    return open({
      options: ws.options,
      release: () => releasing.track(ws.release()),
      setup: ws.setup,
      meta: { instance_id: job.instance.instance_id, env_key: ws.key, repo: ws.spec.repo, purpose: "eval" },
    });
  };
  const { home, specsFile, reposDir } = opts;
  const { instance, patch, model, timeoutMs, build, sources } = job;
  const input = { home, instance, patch, model, timeoutMs, specsFile, reposDir, build, sources, openSandbox };
  return runEvalJobToFiles(input, join(homeLayout(home).root, "server", "jobs"));
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

/** A row's environment made present here: already here, else fetched from a source, else built (with `build`). */
async function prepareHere(
  opts: ProviderOptions,
  instance: Instance,
  o: LayerSources & { build: boolean },
): Promise<PrepareOutcome> {
  let env: ReturnType<typeof envFor>;
  try {
    env = envFor(instance, { specsFile: opts.specsFile });
  } catch (e) {
    return { envKey: null, status: "failed", error: errMessage(e) };
  }
  if (await isBuilt(opts.home, env.key)) return { envKey: env.key, status: "present", error: null };
  if (o.sources?.length || readCacheConfig(opts.home).remotes?.length) {
    try {
      await nodeCacheFor(opts.home).fetch(env.key, { sources: o.sources });
      return { envKey: env.key, status: "fetched", error: null };
    } catch (e) {
      const absent = e instanceof LayerUnavailableError || e instanceof NotFoundError;
      if (!absent || !o.build) throw e;
    }
  }
  if (!o.build) throw new NotFoundError(`environment ${env.key} is not on this node and no source has it`);
  try {
    const status = await ensureBuilt({ home: opts.home, ...env, specsFile: opts.specsFile, reposDir: opts.reposDir });
    return { envKey: env.key, status: status === "built" ? "built" : "present", error: null };
  } catch (e) {
    return { envKey: env.key, status: "failed", error: errMessage(e) };
  }
}

export const envProviderFactory: ProviderFactory = async ({ home, dataset, reposDir, specsFile }) =>
  envProvider({ home, instances: dataset ? await loadDataset(dataset) : [], reposDir, specsFile });
