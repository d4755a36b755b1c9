/**
 * The package's root `Sandbox`: the core sandbox's type, whose `create` takes any `SandboxRequest` and goes through
 * the one door (`openSandbox`, workspace.ts). `x instanceof Sandbox` works as for a class.
 */
import { Sandbox as SandboxCore } from "../sandbox/sandbox.js";
import { openSandbox, type SandboxRequest } from "./workspace.js";

/** One running isolated workspace (see src/sandbox). */
export type Sandbox = SandboxCore;

/** `Sandbox.create({ dir })` on a directory, `Sandbox.create({ instance, dataset })` on a task's environment. */
export const Sandbox = {
  create(request: SandboxRequest = {}): Promise<Sandbox> {
    return openSandbox(request);
  },
  [Symbol.hasInstance](value: unknown): value is SandboxCore {
    return value instanceof SandboxCore;
  },
};
