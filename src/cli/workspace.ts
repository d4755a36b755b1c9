import type { Command } from "commander";
import { InvalidInputError } from "../errors.js";
import { Sandbox, type SandboxOptions } from "../index.js";

/** How exec/shell pick their workspace: a plain directory, or a dataset instance's environment. */
export interface WorkspaceCliOptions {
  dir?: string;
  instance?: string;
  dataset?: string;
  specs?: string;
}

export function addWorkspaceOptions(cmd: Command): Command {
  return cmd
    .option("--instance <ID>", "a sandbox on this task's environment (needs --dataset; build it with `prepare`)")
    .option("--dataset <FILE>", "dataset holding --instance")
    .option("--specs <FILE>", "environment spec overrides (JSON)");
}

/** Start the sandbox a command asked for. */
export function sandboxFor(o: WorkspaceCliOptions, common: Omit<SandboxOptions, "dir" | "overlays">): Promise<Sandbox> {
  if (!o.instance) return Sandbox.create({ ...common, dir: o.dir });
  if (o.dir) throw new InvalidInputError("--dir and --instance are exclusive");
  if (!o.dataset) throw new InvalidInputError("--instance needs --dataset FILE");
  return Sandbox.create({ ...common, instance: o.instance, dataset: o.dataset, specsFile: o.specs });
}
