import type { Sandbox } from "../sandbox/sandbox.js";
import { loadDataset, type Instance } from "../tasks/index.js";
import { openWorkspace, resolveWorkspace } from "../env/workspace.js";
import { evaluate } from "../eval/reward-api.js";
import { agentDiff, pristineListing } from "../eval/runner/agent-diff.js";
import { NotFoundError } from "../util/errors.js";
import { withOneLineMessage } from "../env/build-diagnosis.js";
import type { ProvidedWorkspace, ProviderFactory, WorkspaceProvider } from "./provider.js";

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
    async forInstance(id: string): Promise<ProvidedWorkspace> {
      const inst = instance(id);
      const { home, reposDir, specsFile } = opts;
      const ws = await resolveWorkspace({ home, instance: inst, reposDir, specsFile, build: true }).catch((e) => {
        throw withOneLineMessage(e);
      });
      return {
        options: ws.options,
        release: () => void ws.release(),
        setup: ws.setup,
        meta: { instance_id: inst.instance_id, env_key: ws.key, repo: ws.spec.repo, base_commit: inst.base_commit },
      };
    },
    async forEnvKey(key: string): Promise<ProvidedWorkspace> {
      const ws = await resolveWorkspace({ home: opts.home, envKey: key });
      return { options: ws.options, release: () => void ws.release(), meta: { env_key: key, repo: ws.spec.repo } };
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
    async diff(sandbox: Sandbox): Promise<string> {
      // The base is a fresh sandbox of the same task: files its build left untracked are not the agent's changes.
      const id = sandbox.labels["instance"];
      if (!id) throw new NotFoundError(`sandbox ${sandbox.id} was not created from a dataset instance`);
      let listing: Buffer;
      {
        await using fresh = await openWorkspace({
          home: opts.home,
          instance: instance(id),
          specsFile: opts.specsFile,
        });
        listing = await pristineListing(fresh);
      }
      return (await agentDiff(sandbox, listing)).patch;
    },
    listInstances: async () => [...byId.keys()],
  };
}

export const envProviderFactory: ProviderFactory = async ({ home, dataset }) =>
  envProvider({ home, instances: dataset ? await loadDataset(dataset) : [] });
