/**
 * Where a new sandbox's workspace comes from: a host directory (only under the allowed roots, mounted through the
 * descriptor that was checked), a dataset instance or an environment key (through the provider), or nothing.
 */
import { availableParallelism } from "node:os";
import type { SandboxOptions } from "../sandbox/sandbox.js";
import type { BindMount } from "../sandbox/plan.js";
import { pythonOnPath } from "../env/python-on-path.js";
import type { Limits } from "../sandbox/limits.js";
import { RequestValidationError } from "../errors.js";
import type { DirRoots } from "./dir-roots.js";
import { NotImplementedError } from "../errors.js";
import type { native } from "../wire/index.js";

type CreateSandboxRequest = native.CreateSandboxRequest;
import type { ProvidedWorkspace, WorkspaceProvider } from "./provider.js";
import { toHttpSource } from "./peers.js";

export type SourceKind = "dir" | "instance" | "env_key" | "empty";

export interface ResolvedSource {
  kind: SourceKind;
  options: SandboxOptions;
  /** Real path of a `{dir}` sandbox's directory. */
  dir?: string;
  provided?: ProvidedWorkspace;
  /** Once the sandbox is up (or failed to start): nothing more needs the checked directory open. */
  done(): void;
}

export interface SourceContext {
  provider?: WorkspaceProvider;
  roots: DirRoots;
  /** The server's home (where `python` requests keep their PATH commands). */
  home: string;
}

/**
 * `trustedDir` / `trustedBinds`: the operator's own directory and binds (`serve --dir --bind`), not a client's: no
 * root check. `python` (any source) adds that host interpreter, first on PATH after the workspace's own venv.
 */
export async function resolveSource(
  req: CreateSandboxRequest,
  ctx: SourceContext,
  trustedDir?: string,
  trustedBinds?: BindMount[],
): Promise<ResolvedSource> {
  const src = await resolveWorkspaceSource(req, ctx, trustedDir);
  if (trustedBinds?.length) src.options = { ...src.options, binds: [...(src.options.binds ?? []), ...trustedBinds] };
  if (req.python === undefined) return src;
  try {
    const py = await pythonOnPath(req.python, ctx.home);
    const o = src.options;
    src.options = {
      ...o,
      toolchains: [...(o.toolchains ?? []), ...py.toolchains],
      pathPrepend: [...(o.pathPrepend ?? []), ...py.pathPrepend],
    };
    return src;
  } catch (e) {
    src.done();
    src.provided?.release();
    throw e;
  }
}

async function resolveWorkspaceSource(
  req: CreateSandboxRequest,
  ctx: SourceContext,
  trustedDir?: string,
): Promise<ResolvedSource> {
  const nothing = (): void => {};
  if (trustedDir !== undefined) return { kind: "dir", options: { dir: trustedDir }, dir: trustedDir, done: nothing };
  if (req.dir !== undefined) {
    // Checked here (roots, the server's secrets) on the opened directory; the sandbox re-checks the roots on the
    // very object it mounts (`dirRoots`), which is this descriptor's.
    const opened = ctx.roots.open(req.dir);
    const options = { dir: opened.mountSource, dirRoots: [...ctx.roots.roots] };
    return { kind: "dir", options, dir: opened.realPath, done: opened.close };
  }
  if (req.instance_id !== undefined) {
    if (!ctx.provider)
      throw new NotImplementedError(
        "this server has no workspace provider: start it with a dataset (serve --dataset FILE) " +
          "to create sandboxes from instance ids",
      );
    const provided = await ctx.provider.forInstance(req.instance_id, { sources: req.sources?.map(toHttpSource) });
    return { kind: "instance", options: provided.options, provided, done: nothing };
  }
  if (req.env_key !== undefined) {
    if (!ctx.provider?.forEnvKey)
      throw new NotImplementedError("this server's workspace provider cannot create sandboxes from environment keys");
    const provided = await ctx.provider.forEnvKey(req.env_key, { sources: req.sources?.map(toHttpSource) });
    return { kind: "env_key", options: provided.options, provided, done: nothing };
  }
  return { kind: "empty", options: {}, done: nothing };
}

/** The request's limits under the server's maxima (which are also the defaults): above one, a 422 naming it. */
export function limitsFor(asked: CreateSandboxRequest["limits"], max: Limits = {}): Limits {
  /** `ceiling`: a maximum that is no default (a CPU quota is asked for, never imposed). */
  const pick = (value: number | undefined, cap: number | undefined, name: string, ceiling?: number) => {
    if (value === undefined) return cap;
    cap ??= ceiling;
    if (cap !== undefined && value > cap) {
      const msg = `limits.${name} ${value} is above this server's maximum ${cap}`;
      throw new RequestValidationError(
        [{ type: "less_than_equal", loc: ["body", "limits", name], msg, input: value, ctx: { le: cap } }],
        msg,
      );
    }
    return value;
  };
  return {
    memoryBytes: pick(asked?.memory_bytes, max.memoryBytes, "memory_bytes"),
    pids: pick(asked?.pids, max.pids, "pids"),
    cpuSeconds: pick(asked?.cpu_seconds, max.cpuSeconds, "cpu_seconds"),
    diskBytes: pick(asked?.disk_bytes, max.diskBytes, "disk_bytes"),
    cpus: pick(asked?.cpus, max.cpus, "cpus", availableParallelism()),
  };
}
