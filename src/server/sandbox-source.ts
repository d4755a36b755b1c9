/**
 * Where a new sandbox's workspace comes from: a host directory (only under the allowed roots, mounted through the
 * descriptor that was checked), a dataset instance or an environment key (through the provider), an image in the
 * server's store, or nothing. Each
 * becomes a workspace of the one door (src/env/workspace.ts), under its one rule for `python`.
 */
import { availableParallelism } from "node:os";
import { checkPython, kindOf, resolveWorkspace, type WorkspaceKind } from "../env/workspace.js";
import type { BindMount } from "../sandbox/plan.js";
import type { Limits } from "../sandbox/limits.js";
import { InvalidInputError, NotImplementedError, RequestValidationError } from "../errors.js";
import type { native } from "../wire/index.js";
import type { DirRoots } from "./dir-roots.js";
import type { ProvidedWorkspace, WorkspaceProvider } from "./provider.js";
import { toHttpSource } from "./peers.js";

type CreateSandboxRequest = native.CreateSandboxRequest;

export interface ResolvedSource extends ProvidedWorkspace {
  /** Real path of a `{dir}` sandbox's directory. */
  dir?: string;
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
 * root check.
 */
export async function resolveSource(
  req: CreateSandboxRequest,
  ctx: SourceContext,
  trustedDir?: string,
  trustedBinds?: BindMount[],
): Promise<ResolvedSource> {
  const nothing = (): void => {};
  const kind: WorkspaceKind =
    trustedDir !== undefined
      ? "dir"
      : kindOf({ dir: req.dir, instance: req.instance_id, envKey: req.env_key, image: req.image });
  checkPython(kind, req.python);
  const history = req.history === undefined ? {} : { history: req.history };
  if (kind === "instance" || kind === "env_key") {
    if (req.history !== undefined)
      throw new InvalidInputError("history goes with image: a dataset row's testbed history is its spec's (--specs)");
    return { ...(await provided(req, ctx)), done: nothing };
  }
  if (kind === "image") {
    const workspace = await resolveWorkspace({ home: ctx.home, image: req.image, ...history });
    return { workspace, meta: { image: req.image }, done: nothing };
  }
  const binds = trustedBinds?.length ? { binds: trustedBinds } : {};
  const at = { home: ctx.home, python: req.python, ...binds, ...history };
  if (trustedDir !== undefined)
    return { workspace: await resolveWorkspace({ ...at, dir: trustedDir }), meta: {}, dir: trustedDir, done: nothing };
  if (req.dir === undefined) return { workspace: await resolveWorkspace(at), meta: {}, done: nothing };
  // Checked here (roots, the server's secrets) on the opened directory; the sandbox re-checks the roots on the
  // very object it mounts (`dirRoots`), which is this descriptor's.
  const opened = ctx.roots.open(req.dir);
  try {
    const workspace = await resolveWorkspace({ ...at, dir: opened.mountSource, dirRoots: [...ctx.roots.roots] });
    return { workspace, meta: {}, dir: opened.realPath, done: opened.close };
  } catch (e) {
    opened.close();
    throw e;
  }
}

/** An instance's or an environment key's workspace, from the server's provider. */
async function provided(req: CreateSandboxRequest, ctx: SourceContext): Promise<ProvidedWorkspace> {
  const sources = req.sources?.map(toHttpSource);
  if (req.instance_id !== undefined) {
    if (!ctx.provider)
      throw new NotImplementedError(
        "this server has no workspace provider: start it with a dataset (serve --dataset FILE) " +
          "to create sandboxes from instance ids",
      );
    return ctx.provider.forInstance(req.instance_id, { sources });
  }
  if (!ctx.provider?.forEnvKey)
    throw new NotImplementedError("this server's workspace provider cannot create sandboxes from environment keys");
  return ctx.provider.forEnvKey(req.env_key!, { sources });
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
