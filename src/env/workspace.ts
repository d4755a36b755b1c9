import { loadDataset } from "../tasks/index.js";
import type { Instance } from "../tasks/types.js";
import { Sandbox, type SandboxOptions } from "../sandbox/sandbox.js";
import { SandboxError } from "../errors.js";
import { resolveHome } from "../util/home.js";
import { ensureBuilt, envFor, workspaceFor } from "./environments.js";

export interface InstanceSandboxOptions extends Omit<SandboxOptions, "dir" | "overlays"> {
  /** The instance itself, or its id in `dataset`. */
  instance: Instance | string;
  dataset?: string;
  specsFile?: string;
  reposDir?: string;
  /** Build the environment first if the store lacks it (default false: fail with a clear message). */
  build?: boolean;
}

/**
 * A sandbox on an instance's environment: /testbed at the base commit (copy-on-write over the shared layer), the venv
 * at /opt/venv first on PATH. SWE-smith tasks get their bug patch applied and committed, so `git diff` starts clean.
 */
export async function createInstanceSandbox(opts: InstanceSandboxOptions): Promise<Sandbox> {
  const home = resolveHome(opts.home);
  const instance = typeof opts.instance === "string" ? await instanceById(opts.instance, opts.dataset) : opts.instance;
  const { spec, key } = envFor(instance, opts);
  if (opts.build) await ensureBuilt({ home, spec, key, specsFile: opts.specsFile, reposDir: opts.reposDir });
  const { options, lease } = await workspaceFor(home, spec, key);
  const { instance: _i, dataset: _d, specsFile: _s, reposDir: _r, build: _b, ...rest } = opts;
  let sb: Sandbox;
  try {
    sb = await Sandbox.create({
      ...options,
      ...rest,
      home,
      env: { ...options.env, ...rest.env },
      labels: { ...options.labels, instance: instance.instance_id, ...rest.labels },
    });
  } catch (e) {
    await lease.release();
    throw e;
  }
  sb.onClose(() => void lease.release());
  try {
    await applyTaskSetup(sb, instance);
  } catch (e) {
    await sb.close();
    throw e;
  }
  return sb;
}

/** What a task needs once its sandbox is up: SWE-smith's bug patch, applied and committed (so `git diff` is clean). */
export async function applyTaskSetup(sb: Sandbox, instance: Instance): Promise<void> {
  if (!instance.bug_patch) return;
  const r = await sb.exec(
    "git apply --whitespace=nowarn - && git add -A && git -c core.hooksPath=/dev/null commit -q --no-verify -m 'minisandbox: task bug'",
    { stdin: instance.bug_patch },
  );
  if (r.exitCode !== 0)
    throw new SandboxError(`could not apply the bug patch of ${instance.instance_id}: ${r.stderr.trim()}`);
}

export async function instanceById(id: string, dataset: string | undefined): Promise<Instance> {
  if (!dataset) throw new SandboxError(`instance ${id}: a dataset is needed (--dataset FILE)`);
  const [instance] = await loadDataset(dataset, { instanceIds: [id] });
  return instance!;
}
