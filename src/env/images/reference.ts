/**
 * Image references as Docker and podman read them: `[registry[:port]/]path[:tag][@sha256:…]`. A first component
 * with a "." or a ":" (or `localhost`) is a registry; otherwise the image is on Docker Hub (`docker.io`, official
 * images under `library/`). The canonical form (`docker.io/library/debian:12`) is what the store records.
 */
import { InvalidInputError } from "../../errors.js";

export interface ImageRef {
  /** As users write it: `docker.io`, `ghcr.io`, `127.0.0.1:5000`. */
  registry: string;
  repository: string;
  tag?: string;
  digest?: string;
}

export const DOCKER_HUB = "docker.io";
const HUB_ALIASES = new Set(["docker.io", "index.docker.io", "registry-1.docker.io"]);
const COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
const HOST_RE = /^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*)(?::\d{1,5})?$/;

function bad(text: string, why: string): never {
  throw new InvalidInputError(`invalid image reference ${JSON.stringify(text)}: ${why}`, { field: "image" });
}

export function parseReference(text: string): ImageRef {
  const input = text.trim();
  if (input === "" || input.length > 1024) bad(text, "empty or too long");
  let rest = input;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST_RE.test(digest)) bad(text, "a digest is sha256: and 64 lowercase hex digits");
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(":");
  if (colon > rest.lastIndexOf("/")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG_RE.test(tag)) bad(text, `invalid tag ${JSON.stringify(tag)}`);
  }
  const parts = rest.split("/");
  let registry = DOCKER_HUB;
  const first = parts[0]!;
  if (parts.length > 1 && (first.includes(".") || first.includes(":") || first === "localhost")) {
    if (!HOST_RE.test(first)) bad(text, `invalid registry ${JSON.stringify(first)}`);
    registry = HUB_ALIASES.has(first) ? DOCKER_HUB : first;
    parts.shift();
  }
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift("library");
  for (const p of parts) {
    if (!COMPONENT_RE.test(p)) {
      const why =
        p.toLowerCase() !== p ? "repository names are lowercase" : `invalid path component ${JSON.stringify(p)}`;
      bad(text, why);
    }
  }
  const repository = parts.join("/");
  if (repository.length > 255) bad(text, "repository name over 255 characters");
  if (tag === undefined && digest === undefined) tag = "latest";
  return { registry, repository, ...(tag !== undefined ? { tag } : {}), ...(digest ? { digest } : {}) };
}

/** `registry/repository@digest` when pinned by digest, else `registry/repository:tag`. */
export function formatReference(ref: ImageRef): string {
  const name = `${ref.registry}/${ref.repository}`;
  return ref.digest ? `${name}@${ref.digest}` : `${name}:${ref.tag ?? "latest"}`;
}

/** What the store records for a name typed by a user (`debian` -> `docker.io/library/debian:latest`). */
export function canonicalReference(text: string): string {
  return formatReference(parseReference(text));
}

/** The host that answers the v2 API for a registry name (Docker Hub's is not docker.io itself). */
export function registryApiHost(registry: string): string {
  return registry === DOCKER_HUB ? "registry-1.docker.io" : registry;
}
