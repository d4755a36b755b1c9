import type { Sandbox, SandboxOptions } from "../sandbox/sandbox.js";

/** What a provider hands the server for one new sandbox. */
export interface ProvidedWorkspace {
  /** Options for `Sandbox.create` (overlays, toolchains, env, cwd); the server adds home, network, limits, labels. */
  options: SandboxOptions;
  /** Called once when the sandbox is gone (closed, deleted, reaped, or its creation failed). */
  release: () => void;
  /** Runs once the sandbox is up, before anyone sees it (e.g. a SWE-smith task's bug patch). */
  setup?: (sandbox: Sandbox) => Promise<void>;
  /** Shown by `GET /sandboxes/:id` (e.g. env key, layer keys, build time). Must be JSON-serialisable. */
  meta: Record<string, unknown>;
}

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
  forInstance(instanceId: string): Promise<ProvidedWorkspace>;
  /** Sandbox options for an environment key (a built layer), without a task. */
  forEnvKey?(key: string): Promise<ProvidedWorkspace>;
  /** Grade the sandbox's current state against the instance's tests; the result is returned as JSON. */
  evaluate?(sandbox: Sandbox, instanceId: string): Promise<unknown>;
  /** The model patch: what changed in the workspace (e.g. `git diff` of /testbed). */
  diff?(sandbox: Sandbox): Promise<string>;
  /** Instance ids the provider knows (for `GET /instances`); optional. */
  listInstances?(): Promise<string[]>;
}

/** Builds a provider for `minisandbox serve` from its options (the CLI passes `envProviderFactory`). */
export type ProviderFactory = (o: { home: string; dataset?: string }) => Promise<WorkspaceProvider>;
