/**
 * Which image a dataset row's environment is, when it is one: the row's own `image_name` (SWE-smith, SWE-Gym,
 * R2E-Gym), `docker_image` (the field mini-swe-agent's SWE-bench runner also reads) or `dockerhub_tag` (SWE-bench
 * Pro: a tag of its one image repository), SWE-bench's harness name for the instance, or a template. `auto` (the
 * default) takes the row's image only when the store already holds it, so that a row naming an image nobody pulled
 * still gets its environment built from its spec as before.
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

/** Where SWE-bench Pro publishes its images: a row's `dockerhub_tag` is a tag of this repository. */
export const SWEBENCH_PRO_REPOSITORY = "docker.io/jefzda/sweap-images";

/** An image tag (the distribution spec's grammar). */
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

/** The image a row names itself, if any: `image_name`, `docker_image`, or SWE-bench Pro's `dockerhub_tag`. */
export function rowImage(instance: Instance): string | undefined {
  for (const field of ["image_name", "docker_image"] as const) {
    const v = instance[field];
    if (typeof v === "string" && v.trim() !== "") return v.trim();
  }
  const tag = instance.dockerhub_tag;
  if (typeof tag !== "string" || tag.trim() === "") return undefined;
  if (!TAG_RE.test(tag.trim()))
    throw new InvalidInputError(`instance ${instance.instance_id}: dockerhub_tag ${JSON.stringify(tag)} is not a tag`);
  return `${SWEBENCH_PRO_REPOSITORY}:${tag.trim()}`;
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
      if (!ref)
        throw new InvalidInputError(`instance ${id} names no image (image_name, docker_image or dockerhub_tag)`);
      return { ref, required: true };
    }
    case "auto": {
      const ref = rowImage(instance);
      return ref ? { ref, required: false } : undefined;
    }
  }
}
