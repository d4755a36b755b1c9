/**
 * OCI and Docker image documents: manifests, indexes (manifest lists) and configs, parsed strictly (they come from
 * registries and archives we do not trust) into the few fields we use. Docker schema 1, artifacts that are not
 * container images and foreign (non-distributable) layers are refused, each with the reason.
 */
import { ImageInvalidError } from "../../errors.js";
import type { ImageConfig, ImagePlatform } from "../store/index.js";

export const MEDIA = {
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  ociIndex: "application/vnd.oci.image.index.v1+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
  dockerList: "application/vnd.docker.distribution.manifest.list.v2+json",
  ociConfig: "application/vnd.oci.image.config.v1+json",
  dockerConfig: "application/vnd.docker.container.image.v1+json",
  ociLayer: "application/vnd.oci.image.layer.v1.tar",
} as const;

/** What a registry is asked for: every manifest and index type we read. */
export const MANIFEST_ACCEPT = [MEDIA.ociIndex, MEDIA.dockerList, MEDIA.ociManifest, MEDIA.dockerManifest].join(", ");

const LAYER_TYPES = new Set([
  "application/vnd.oci.image.layer.v1.tar",
  "application/vnd.oci.image.layer.v1.tar+gzip",
  "application/vnd.oci.image.layer.v1.tar+zstd",
  "application/vnd.docker.image.rootfs.diff.tar.gzip",
  "application/vnd.docker.image.rootfs.diff.tar",
]);
const FOREIGN = /nondistributable|foreign/;

/** Documents are small; anything larger is refused before it is parsed (the distribution spec's own limit). */
export const MAX_MANIFEST_BYTES = 4 << 20;
export const MAX_CONFIG_BYTES = 32 << 20;

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: ImagePlatform;
  annotations?: Record<string, string>;
}

export interface ImageManifest {
  mediaType: string;
  config: Descriptor;
  layers: Descriptor[];
}

export type ManifestDocument =
  | { kind: "manifest"; manifest: ImageManifest }
  | { kind: "index"; manifests: Descriptor[] };

export interface ParsedConfig {
  platform: ImagePlatform;
  config: ImageConfig;
  diffIds: string[];
  created?: string;
}

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const isDigest = (v: unknown): v is string => typeof v === "string" && /^sha256:[0-9a-f]{64}$/.test(v);
const strings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string");

function parseJson(bytes: Buffer, what: string): Json {
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString("utf8"));
  } catch (e) {
    throw new ImageInvalidError(`${what} is not valid JSON: ${(e as Error).message}`);
  }
  if (!isObj(value)) throw new ImageInvalidError(`${what} is not a JSON object`);
  return value;
}

function descriptor(v: unknown, what: string): Descriptor {
  if (!isObj(v) || typeof v.mediaType !== "string" || !isDigest(v.digest)) {
    const digest = isObj(v) && typeof v.digest === "string" ? v.digest : "";
    if (digest && !digest.startsWith("sha256:"))
      throw new ImageInvalidError(`${what}: unsupported digest algorithm ${JSON.stringify(digest.split(":")[0])}`);
    throw new ImageInvalidError(`${what}: malformed descriptor`);
  }
  if (!Number.isSafeInteger(v.size) || (v.size as number) < 0) throw new ImageInvalidError(`${what}: invalid size`);
  const d: Descriptor = { mediaType: v.mediaType, digest: v.digest, size: v.size as number };
  if (isObj(v.platform) && typeof v.platform.os === "string" && typeof v.platform.architecture === "string") {
    const { os, architecture, variant } = v.platform;
    d.platform = { os, architecture, ...(typeof variant === "string" ? { variant } : {}) };
  }
  if (isObj(v.annotations)) d.annotations = stringMap(v.annotations);
  return d;
}

function stringMap(v: Json): Record<string, string> {
  return Object.fromEntries(Object.entries(v).filter((e): e is [string, string] => typeof e[1] === "string"));
}

/** A manifest or an index, by its own `mediaType` (or the Content-Type it was served with). */
export function parseManifestDocument(bytes: Buffer, contentType: string | undefined, what: string): ManifestDocument {
  if (bytes.length > MAX_MANIFEST_BYTES) throw new ImageInvalidError(`${what} is larger than 4 MiB`);
  const doc = parseJson(bytes, what);
  if (doc.schemaVersion === 1) {
    throw new ImageInvalidError(
      `${what} is a Docker schema 1 manifest (deprecated since 2017, unsupported); push the image again with a ` +
        "current tool",
    );
  }
  if (doc.schemaVersion !== 2) throw new ImageInvalidError(`${what}: unsupported schemaVersion ${doc.schemaVersion}`);
  const type = typeof doc.mediaType === "string" ? doc.mediaType : (contentType?.split(";")[0]?.trim() ?? "");
  if (Array.isArray(doc.manifests) && (type === MEDIA.ociIndex || type === MEDIA.dockerList || type === "")) {
    return { kind: "index", manifests: doc.manifests.map((m, i) => descriptor(m, `${what}, manifest ${i + 1}`)) };
  }
  if (!Array.isArray(doc.layers) || (type !== MEDIA.ociManifest && type !== MEDIA.dockerManifest && type !== ""))
    throw new ImageInvalidError(`${what}: unsupported media type ${JSON.stringify(type)} (not an image manifest)`);
  const config = descriptor(doc.config, `${what}, config`);
  if (config.mediaType !== MEDIA.ociConfig && config.mediaType !== MEDIA.dockerConfig) {
    throw new ImageInvalidError(
      `${what} is not a container image (config type ${JSON.stringify(config.mediaType)}): an artifact?`,
    );
  }
  const layers = doc.layers.map((l, i) => descriptor(l, `${what}, layer ${i + 1}`));
  for (const [i, l] of layers.entries()) checkLayerType(l.mediaType, `${what}, layer ${i + 1}`);
  return { kind: "manifest", manifest: { mediaType: type || MEDIA.ociManifest, config, layers } };
}

function checkLayerType(mediaType: string, what: string): void {
  if (LAYER_TYPES.has(mediaType)) return;
  if (FOREIGN.test(mediaType)) {
    throw new ImageInvalidError(
      `${what} is a foreign (non-distributable) layer ${JSON.stringify(mediaType)}: not supported`,
    );
  }
  throw new ImageInvalidError(`${what}: unsupported layer media type ${JSON.stringify(mediaType)}`);
}

/** The image config: platform, the runtime settings a sandbox needs, and the layers' diff ids. */
export function parseImageConfig(bytes: Buffer, what: string): ParsedConfig {
  if (bytes.length > MAX_CONFIG_BYTES) throw new ImageInvalidError(`${what} is larger than 32 MiB`);
  const doc = parseJson(bytes, what);
  if (typeof doc.os !== "string" || typeof doc.architecture !== "string")
    throw new ImageInvalidError(`${what}: no os or architecture`);
  const rootfs = doc.rootfs;
  if (!isObj(rootfs) || rootfs.type !== "layers" || !Array.isArray(rootfs.diff_ids) || !rootfs.diff_ids.every(isDigest))
    throw new ImageInvalidError(`${what}: rootfs.diff_ids missing or not sha256 digests`);
  const c = isObj(doc.config) ? doc.config : {};
  const config: ImageConfig = {
    Env: strings(c.Env) ? c.Env : [],
    WorkingDir: typeof c.WorkingDir === "string" ? c.WorkingDir : "",
    User: typeof c.User === "string" ? c.User : "",
    Entrypoint: strings(c.Entrypoint) ? c.Entrypoint : null,
    Cmd: strings(c.Cmd) ? c.Cmd : null,
    Labels: isObj(c.Labels) ? stringMap(c.Labels) : {},
    ...(typeof c.StopSignal === "string" ? { StopSignal: c.StopSignal } : {}),
  };
  const platform: ImagePlatform = {
    os: doc.os,
    architecture: doc.architecture,
    ...(typeof doc.variant === "string" ? { variant: doc.variant } : {}),
  };
  return {
    platform,
    config,
    diffIds: rootfs.diff_ids as string[],
    ...(typeof doc.created === "string" ? { created: doc.created } : {}),
  };
}
