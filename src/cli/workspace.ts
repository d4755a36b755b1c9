import type { Command } from "commander";
import type { ImagePolicy } from "../env/instance-image.js";
import type { SandboxRequest } from "../env/workspace.js";
import type { Sandbox, SandboxOptions } from "../sandbox/sandbox.js";
import { errMessage, InvalidInputError } from "../errors.js";

/** `--images` / `--image-template`: which dataset rows run on an image (prepare, exec, shell, evaluate, serve). */
export interface ImageFlags {
  images?: string;
  imageTemplate?: string;
}

export function addImagePolicyOptions(cmd: Command): Command {
  return cmd
    .option(
      "--images <auto|row|swebench|none>",
      "rows on Docker/OCI images: auto (default: a row's image_name/docker_image if in the store), row (that image, " +
        "always), swebench (the harness's instance image name), none (build from the spec)",
    )
    .option("--image-template <TEMPLATE>", "each row's image from a template, e.g. 'ghcr.io/org/env.{instance_id}'");
}

/** The policy the flags give (undefined: none given, each command's default); bad flags are bad input. */
export async function imagePolicyFrom(o: ImageFlags): Promise<ImagePolicy | undefined> {
  if (o.images === undefined && o.imageTemplate === undefined) return undefined;
  return (await import("../env/instance-image.js")).parseImagePolicy(o.images, o.imageTemplate);
}

/** `--base IMAGE`: the base image of every instance's spec-built environment (prepare, evaluate, exec, shell, serve) */
export interface BaseFlag {
  base?: string;
}

export function addBaseOption(cmd: Command): Command {
  return cmd.option(
    "--base <IMAGE>",
    "every instance's environment built and run on this image's root, not the host's (spec field base; in the key)",
  );
}

/** `--base`, checked before anything is loaded: a malformed reference is bad input (its canonical name otherwise). */
export async function baseFrom(o: BaseFlag): Promise<string | undefined> {
  if (o.base === undefined) return undefined;
  const { canonicalReference } = await import("../env/images/reference.js");
  try {
    return canonicalReference(o.base);
  } catch (e) {
    throw new InvalidInputError(`--base: ${errMessage(e)}`, { field: "--base" });
  }
}

/** How exec/shell pick their workspace: a plain directory, a dataset instance's environment, or an image. */
export interface WorkspaceCliOptions extends ImageFlags, BaseFlag {
  dir?: string;
  instance?: string;
  image?: string;
  dataset?: string;
  specs?: string;
  python?: string;
  history?: string;
}

export function addWorkspaceOptions(cmd: Command): Command {
  cmd
    .option("--instance <ID>", "a sandbox on this task's environment (needs --dataset; build it with `prepare`)")
    .option("--image <REF>", "a sandbox on this image's root filesystem (with --instance: that task on it)")
    .option("--dataset <FILE>", "dataset holding --instance")
    .option("--specs <FILE>", "environment spec overrides (JSON)")
    .option(
      "--history <chronological|full>",
      "on an image: its /testbed's git history, chronological (default: HEAD's commit only) or full " +
        "(the image's own .git; gameable); a row's default is its spec's history",
    );
  return addImagePolicyOptions(addBaseOption(cmd));
}

/** Start the sandbox a command asked for: the flags as one request to the door, which checks them. */
export async function sandboxFor(
  o: WorkspaceCliOptions,
  common: Omit<SandboxOptions, "dir" | "overlays">,
): Promise<Sandbox> {
  const { dir, instance, image, dataset, specs, python } = o;
  const images = await imagePolicyFrom(o);
  const base = await baseFrom(o);
  // The door checks the value (one line, exit 2).
  const history = o.history as SandboxRequest["history"];
  const { openSandbox } = await import("../env/workspace.js");
  return openSandbox({ ...common, dir, instance, image, dataset, specsFile: specs, base, python, images, history });
}
