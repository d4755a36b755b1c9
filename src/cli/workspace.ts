import type { Command } from "commander";
import { InvalidInputError } from "../errors.js";
import type { Sandbox, SandboxOptions } from "../sandbox/sandbox.js";
import { resolveHome } from "../util/home.js";

/** How exec/shell pick their workspace: a plain directory, or a dataset instance's environment. */
export interface WorkspaceCliOptions {
  dir?: string;
  instance?: string;
  dataset?: string;
  specs?: string;
  python?: string;
}

export function addWorkspaceOptions(cmd: Command): Command {
  return cmd
    .option("--instance <ID>", "a sandbox on this task's environment (needs --dataset; build it with `prepare`)")
    .option("--dataset <FILE>", "dataset holding --instance")
    .option("--specs <FILE>", "environment spec overrides (JSON)");
}

/** Start the sandbox a command asked for (a directory sandbox loads none of the environment machinery). */
export async function sandboxFor(
  o: WorkspaceCliOptions,
  common: Omit<SandboxOptions, "dir" | "overlays">,
): Promise<Sandbox> {
  if (!o.instance) {
    const { Sandbox } = await import("../sandbox/sandbox.js");
    if (o.python === undefined) return Sandbox.create({ ...common, dir: o.dir });
    const { pythonOnPath } = await import("../env/python-on-path.js");
    const py = await pythonOnPath(o.python, resolveHome(common.home));
    return Sandbox.create({ ...common, dir: o.dir, toolchains: py.toolchains, pathPrepend: py.pathPrepend });
  }
  if (o.dir) throw new InvalidInputError("--dir and --instance are exclusive");
  if (o.python !== undefined)
    throw new InvalidInputError("--python is for --dir sandboxes: an instance runs its environment's own Python");
  if (!o.dataset) throw new InvalidInputError("--instance needs --dataset FILE");
  const { openWorkspace } = await import("../env/workspace.js");
  return openWorkspace({ ...common, instance: o.instance, dataset: o.dataset, specsFile: o.specs });
}
