/**
 * Fresh evaluation sandboxes: an instance's environment, no network, and the host's pip configuration (local
 * indexes bound read-only) so that eval.sh's re-run of the spec's `install` command works offline as it did at
 * build time, without network retries.
 */
import type { Instance } from "../../tasks/types.js";
import type { Sandbox } from "../../sandbox/sandbox.js";
import type { Limits } from "../../sandbox/limits.js";
import type { EnvSpec } from "../../env/types.js";
import { createInstanceSandbox } from "../../env/workspace.js";
import { findToolchain } from "../../env/toolchains.js";
import { pipSettings, type PipSettings } from "../../env/pip-config.js";

const pipByPython = new Map<string, Promise<PipSettings>>();

/** pip settings as the spec's interpreter sees them (asked once per python version and process). */
export function evalPipSettings(home: string, python: string): Promise<PipSettings> {
  let p = pipByPython.get(python);
  if (!p) {
    p = (async () => {
      try {
        const tc = await findToolchain(python, { home });
        return await pipSettings(tc.python);
      } catch {
        return { env: {}, mounts: [] };
      }
    })();
    pipByPython.set(python, p);
  }
  return p;
}

export interface EvalSandboxOptions {
  home: string;
  instance: Instance;
  spec: EnvSpec;
  specsFile?: string;
  reposDir?: string;
  limits?: Limits;
  /** Default false: evaluation runs offline, as the harness's verdicts must not depend on the network. */
  network?: boolean;
  labels?: Record<string, string>;
}

/** A fresh sandbox of the instance's (already built) environment, ready for evaluation. */
export async function openEvalSandbox(opts: EvalSandboxOptions): Promise<Sandbox> {
  const pip = await evalPipSettings(opts.home, opts.spec.python);
  const network = opts.network ?? false;
  return createInstanceSandbox({
    home: opts.home,
    instance: opts.instance,
    specsFile: opts.specsFile,
    reposDir: opts.reposDir,
    network,
    limits: opts.limits,
    binds: pip.mounts.map((p) => ({ source: p, target: p, readOnly: true })),
    env: {
      ...pip.env,
      PIP_NO_INPUT: "1",
      PIP_PROGRESS_BAR: "off",
      // Offline, a retry can only wait: fail at once on the default index and use the local ones.
      ...(network ? {} : { PIP_RETRIES: "0" }),
      ...opts.spec.env,
    },
    labels: { purpose: "eval", ...opts.labels },
  });
}
