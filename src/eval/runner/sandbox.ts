/**
 * What every evaluation sandbox adds to its workspace: no network, and the host's pip configuration (local indexes
 * bound read-only) so that eval.sh's re-run of the spec's `install` command works offline as it did at build time,
 * without network retries.
 */
import { pipSettings, withoutCredentials, type PipSettings } from "../../env/pip-config.js";
import { findToolchain } from "../../env/toolchains.js";
import type { EnvSpec } from "../../env/types.js";
import type { InstanceEnv, SandboxRequest } from "../../env/workspace.js";
import type { Limits } from "../../sandbox/limits.js";
import type { Instance } from "../../tasks/types.js";

const pipByPython = new Map<string, Promise<PipSettings>>();

/**
 * pip settings as the spec's interpreter sees them, credentials stripped (asked once per python version and
 * process): what every agent, rollout and evaluation sandbox gets.
 */
export function evalPipSettings(home: string, python: string): Promise<PipSettings> {
  let p = pipByPython.get(python);
  if (!p) {
    p = (async () => {
      try {
        const tc = await findToolchain(python, { home });
        return withoutCredentials(await pipSettings(tc.python));
      } catch {
        return { env: {}, mounts: [] };
      }
    })();
    pipByPython.set(python, p);
  }
  return p;
}

export type EvalSandboxSettings = Required<Pick<SandboxRequest, "network" | "binds" | "env" | "labels">>;

/**
 * The part of an evaluation's sandbox request that makes it one (`evalSandboxRequest` adds the instance).
 * `network` defaults to false: the harness's verdicts must not depend on the network.
 */
export async function evalSandboxSettings(
  home: string,
  spec: EnvSpec,
  opts: { network?: boolean } = {},
): Promise<EvalSandboxSettings> {
  const pip = await evalPipSettings(home, spec.python);
  const network = opts.network ?? false;
  return {
    network,
    binds: pip.mounts.map((p) => ({ source: p, target: p, readOnly: true })),
    env: {
      ...pip.env,
      PIP_NO_INPUT: "1",
      PIP_PROGRESS_BAR: "off",
      // Offline, a retry can only wait: fail at once on the default index and use the local ones.
      ...(network ? {} : { PIP_RETRIES: "0" }),
      ...spec.env,
    },
    labels: { purpose: "eval" },
  };
}

/** What a fresh evaluation sandbox is asked with: the instance on its environment, under the evaluation's limits. */
export interface EvalSandboxInput {
  home: string;
  instance: Instance;
  env: InstanceEnv;
  /** The image the instance runs on instead of `env`'s layer (`env` still gives the eval script). */
  image?: string;
  limits?: Limits;
  network?: boolean;
}

/** The one request of a fresh evaluation sandbox, for the door (`openSandbox`, `resolveWorkspace`). */
export async function evalSandboxRequest(e: EvalSandboxInput): Promise<SandboxRequest> {
  return {
    home: e.home,
    instance: e.instance,
    environment: e.env,
    ...(e.image ? { image: e.image } : {}),
    ...(e.limits ? { limits: e.limits } : {}),
    ...(await evalSandboxSettings(e.home, e.env.spec, { network: e.network })),
  };
}
