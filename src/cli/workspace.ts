import type { Command } from "commander";
import type { Sandbox, SandboxOptions } from "../sandbox/sandbox.js";

/** How exec/shell pick their workspace: a plain directory, a dataset instance's environment, or an image. */
export interface WorkspaceCliOptions {
  dir?: string;
  instance?: string;
  image?: string;
  dataset?: string;
  specs?: string;
  python?: string;
}

export function addWorkspaceOptions(cmd: Command): Command {
  return cmd
    .option("--instance <ID>", "a sandbox on this task's environment (needs --dataset; build it with `prepare`)")
    .option("--image <REF>", "a sandbox on this image's root filesystem (put it in the store with `images pull`)")
    .option("--dataset <FILE>", "dataset holding --instance")
    .option("--specs <FILE>", "environment spec overrides (JSON)");
}

/** Start the sandbox a command asked for: the flags as one request to the door, which checks them. */
export async function sandboxFor(
  o: WorkspaceCliOptions,
  common: Omit<SandboxOptions, "dir" | "overlays">,
): Promise<Sandbox> {
  const { dir, instance, image, dataset, specs, python } = o;
  const { openSandbox } = await import("../env/workspace.js");
  return openSandbox({ ...common, dir, instance, image, dataset, specsFile: specs, python });
}
