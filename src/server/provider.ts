import type { Sandbox } from "../sandbox/sandbox.js";
import type { HttpSource } from "../env/store/index.js";
import type { Workspace } from "../env/workspace.js";
import type { ImagePolicy } from "../env/instance-image.js";
import type { MadePresent } from "../env/present.js";
import type { EvalJobInput, EvalJobResult } from "../eval/job.js";
import type { Instance } from "../tasks/index.js";

/** What a provider hands the server for one new sandbox. */
export interface ProvidedWorkspace {
  /**
   * The workspace (src/env/workspace.ts: `resolveWorkspace`, or `new Workspace({ kind, options, setup, release })`);
   * the server starts the sandbox on it, adding network, limits, env, cwd and labels, and lets go of it when the
   * sandbox is gone (closed, deleted, reaped) or was never made.
   */
  workspace: Workspace;
  /** Shown by `GET /sandboxes/:id` (e.g. env key, layer keys, build time). Must be JSON-serialisable. */
  meta: Record<string, unknown>;
}

/** Where a missing layer may come from for one request: peers' servers (already checked against the peer policy). */
export interface LayerSources {
  sources?: readonly HttpSource[];
}

/** One environment made present on this node: found here, fetched from a peer, built, pulled, or not (with why). */
export interface PrepareOutcome {
  /** The layer's key; for an image, its root filesystem's. */
  envKey: string | null;
  status: MadePresent["status"];
  error: string | null;
}

/** One job of a run planned elsewhere: an instance and its prediction, as the job runner takes them. */
export type EvaluationJob = Pick<EvalJobInput, "instance" | "image" | "patch" | "model" | "timeoutMs" | "sources"> & {
  /** Build the environment when neither this node nor a source has it. */
  build: boolean;
};

/**
 * How the server turns dataset instances and environment keys into sandboxes, and how it evaluates and diffs them.
 * The server owns none of this: it receives a provider (`env-provider.ts` wires the env store, node cache and eval
 * runner). Every method is optional except `forInstance`; a route whose capability is missing answers 501.
 *
 * Errors: throw `NotFoundError` (unknown instance or key: 404), `InvalidInputError` (400), `LimitError` (429);
 * anything else is a 500 with its message.
 */
export interface WorkspaceProvider {
  /** Sandbox options for a dataset instance (its environment built or materialized on demand). */
  forInstance(instanceId: string, opts?: LayerSources): Promise<ProvidedWorkspace>;
  /** Sandbox options for an environment key (a built layer), without a task. */
  forEnvKey?(key: string, opts?: LayerSources): Promise<ProvidedWorkspace>;
  /** Grade the sandbox's current state against the instance's tests; the result is returned as JSON. */
  evaluate?(sandbox: Sandbox, instanceId: string): Promise<unknown>;
  /** The model patch: what changed in the workspace (e.g. `git diff` of /testbed). */
  diff?(sandbox: Sandbox): Promise<string>;
  /** Instance ids the provider knows (for `GET /instances`); optional. */
  listInstances?(): Promise<string[]>;
  /** Wait for what the provider still does in the background (e.g. giving layers back); called at shutdown. */
  settle?(): Promise<void>;
  /** Make a dataset row's environment present on this node (fetch it, else build it; its `image`: pull it). */
  prepare?(instance: Instance, opts: LayerSources & { build: boolean; image?: string }): Promise<PrepareOutcome>;
  /**
   * Evaluate one job as the harness does, in a fresh sandbox made by `open` (the server's, so it is counted,
   * labelled and closed like any other); returns the outcome and the harness's files.
   */
  evaluateJob?(
    job: EvaluationJob,
    open: (workspace: ProvidedWorkspace) => Promise<Sandbox>,
  ): Promise<{ result: EvalJobResult; files: Record<string, Buffer> }>;
}

/** Builds a provider for `minisandbox serve` from its options (the CLI passes `envProviderFactory`). */
export type ProviderFactory = (o: {
  home: string;
  dataset?: string;
  /** Local clones for builds (`DIR/<owner>/<name>`). */
  reposDir?: string;
  /** Environment spec overrides (`--specs`): the same file the other commands are given. */
  specsFile?: string;
  /** Every row's base image (`--base`), as the other commands are given it. */
  base?: string;
  /** Which rows run on an image of the store (`--images`, `--image-template`; default auto). */
  images?: ImagePolicy;
}) => Promise<WorkspaceProvider>;
