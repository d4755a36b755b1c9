/**
 * Which image a dataset row's environment is, when it is one: the row's own `image_name` (SWE-smith, SWE-Gym,
 * R2E-Gym) or `docker_image` (the field mini-swe-agent's SWE-bench runner also reads), SWE-bench's harness name for
 * the instance, or a template. `auto` (the default) takes the row's image only when the store already holds it, so
 * that a row naming an image nobody pulled still gets its environment built from its spec as before.
 */
import { InvalidInputError } from "../errors.js";
import type { Instance } from "../tasks/types.js";

/** How rows map to images (`--images` / `--image-template`). */
export type ImagePolicy =
  | { kind: "auto" }
  | { kind: "row" }
  | { kind: "swebench" }
  | { kind: "template"; template: string }
  | { kind: "none" };

const POLICIES = ["auto", "row", "swebench", "none"] as const;

/** `--images auto|row|swebench|none` and `--image-template T` as one policy (bad input: one line). */
export function parseImagePolicy(images: string | undefined, template: string | undefined): ImagePolicy {
  if (template !== undefined) {
    if (images !== undefined && images !== "template")
      throw new InvalidInputError("--image-template goes without --images (or with --images template)");
    if (!template.includes("{instance_id}"))
      throw new InvalidInputError(`--image-template ${template}: it must contain {instance_id}`);
    return { kind: "template", template };
  }
  const kind = images ?? "auto";
  if (!(POLICIES as readonly string[]).includes(kind))
    throw new InvalidInputError(`--images ${kind}: expected one of ${POLICIES.join(", ")} (or --image-template)`);
  return { kind } as ImagePolicy;
}

/** SWE-bench's instance image: "__" written "_1776_", lower-cased (the harness's `instance_image_key`). */
export function swebenchImage(instanceId: string): string {
  return `docker.io/swebench/sweb.eval.x86_64.${instanceId.replace(/__/g, "_1776_").toLowerCase()}:latest`;
}

/** The image a row names itself, if any. */
export function rowImage(instance: Instance): string | undefined {
  for (const field of ["image_name", "docker_image"] as const) {
    const v = instance[field];
    if (typeof v === "string" && v.trim() !== "") return v.trim();
  }
  return undefined;
}

/**
 * The image `policy` gives this row, and whether it is required (`auto`: only a candidate, taken if present).
 * Templates get the instance id lower-cased, with "__" as "_1776_" (image names are lower case, no "__" runs).
 */
export function imageFor(instance: Instance, policy: ImagePolicy): { ref: string; required: boolean } | undefined {
  const id = instance.instance_id;
  switch (policy.kind) {
    case "none":
      return undefined;
    case "swebench":
      return { ref: swebenchImage(id), required: true };
    case "template":
      return {
        ref: policy.template.replaceAll("{instance_id}", id.replace(/__/g, "_1776_").toLowerCase()),
        required: true,
      };
    case "row": {
      const ref = rowImage(instance);
      if (!ref) throw new InvalidInputError(`instance ${id} names no image (image_name or docker_image)`);
      return { ref, required: true };
    }
    case "auto": {
      const ref = rowImage(instance);
      return ref ? { ref, required: false } : undefined;
    }
  }
}
