import type { Sandbox } from "../sandbox/sandbox.js";
import { loadDataset, type Instance } from "../tasks/index.js";
import { ensureBuilt, envFor, workspaceFor } from "../env/environments.js";
import { isLayerKey } from "../env/store/index.js";
import { readEnvRecord } from "../env/environments.js";
import { applyTaskSetup } from "../env/workspace.js";
import { evaluate } from "../eval/reward-api.js";
import { agentDiff, pristineListing } from "../eval/runner/agent-diff.js";
import { createInstanceSandbox } from "../env/workspace.js";
import { NotFoundError } from "../util/errors.js";
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
  const instance = (id: string): Instance => {
    const found = byId.get(id);
    if (!found) throw new NotFoundError(`unknown instance ${id} (the server's dataset has ${byId.size} instances)`);
    return found;
  };
  return {
    async forInstance(id: string): Promise<ProvidedWorkspace> {
      const inst = instance(id);
      const { spec, key } = envFor(inst, opts);
      await ensureBuilt({ ...opts, spec, key });
      const { options, lease } = await workspaceFor(opts.home, spec, key);
      return {
        options: { ...options, labels: { ...options.labels, instance: id } },
        release: () => void lease.release(),
        setup: (sb: Sandbox) => applyTaskSetup(sb, inst),
        meta: { instance_id: id, env_key: key, repo: spec.repo, base_commit: inst.base_commit },
      };
    },
    async forEnvKey(key: string): Promise<ProvidedWorkspace> {
      const record = isLayerKey(key) ? readEnvRecord(opts.home, key) : undefined;
      if (!record) throw new NotFoundError(`unknown environment ${key}`);
      const { options, lease } = await workspaceFor(opts.home, record.spec, key);
      return { options, release: () => void lease.release(), meta: { env_key: key, repo: record.spec.repo } };
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
        await using fresh = await createInstanceSandbox({
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
