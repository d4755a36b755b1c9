/**
 * An image inside an archive's files (archive-files.ts) as an ImageInput: an OCI layout (`oci-layout`, `index.json`,
 * `blobs/sha256/…`: what `skopeo copy oci:`, `podman save --format oci-archive` and newer `docker save` write) or a
 * Docker archive (`manifest.json` with `Config`, `RepoTags`, `Layers`: `docker save`, `podman save`). Every blob is
 * checked against its digest; a Docker archive's layers against the config's diff ids.
 */
import { createHash } from "node:crypto";
import { ImageInvalidError } from "../../errors.js";
import type { ImagePlatform } from "../store/index.js";
import type { ArchiveFiles } from "./archive-files.js";
import {
  MAX_CONFIG_BYTES,
  MAX_MANIFEST_BYTES,
  MEDIA,
  parseImageConfig,
  parseManifestDocument,
  type Descriptor,
  type ImageManifest,
} from "./media.js";
import { selectManifest } from "./platform.js";
import { canonicalReference } from "./reference.js";
import type { ImageInput } from "./store-image.js";

export interface ArchiveImage {
  input: ImageInput;
  /** Names the archive gives the image (canonical), e.g. from `RepoTags`. */
  names: string[];
}

const sha256 = (b: Buffer): string => `sha256:${createHash("sha256").update(b).digest("hex")}`;

/** The image `name` (or the archive's only image) for `platform`. */
export async function archiveImage(files: ArchiveFiles, platform: ImagePlatform, name?: string): Promise<ArchiveImage> {
  if (files.has("oci-layout") && files.has("index.json")) return ociImage(files, platform, name);
  if (files.has("manifest.json")) return dockerImage(files, name);
  throw new ImageInvalidError(
    `${files.describe} is not an image archive (no oci-layout + index.json, no manifest.json)`,
  );
}

function blobName(digest: string): string {
  return `blobs/sha256/${digest.slice(7)}`;
}

async function readBlob(files: ArchiveFiles, d: Descriptor, max: number, what: string): Promise<Buffer> {
  const bytes = await files.read(blobName(d.digest), Math.min(max, d.size));
  if (bytes.length !== d.size || sha256(bytes) !== d.digest)
    throw new ImageInvalidError(`${files.describe}: ${what} does not match its digest and size`);
  return bytes;
}

function safeCanonical(text: string | undefined): string | undefined {
  if (!text) return undefined;
  try {
    return canonicalReference(text);
  } catch {
    return undefined;
  }
}

/** Names an index entry carries: containerd's full name, or a ref.name that is a full reference (not a bare tag). */
function namesOf(d: Descriptor): string[] {
  const full = d.annotations?.["io.containerd.image.name"];
  const ref = d.annotations?.["org.opencontainers.image.ref.name"];
  const names = [safeCanonical(full), ref && /[/:]/.test(ref) ? safeCanonical(ref) : undefined];
  return [...new Set(names.filter((n): n is string => n !== undefined))];
}

async function ociImage(files: ArchiveFiles, platform: ImagePlatform, name?: string): Promise<ArchiveImage> {
  const what = `${files.describe}: index.json`;
  const index = parseManifestDocument(await files.read("index.json", MAX_MANIFEST_BYTES), undefined, what);
  if (index.kind !== "index") throw new ImageInvalidError(`${what} is not an OCI index`);
  const chosen = pickEntry(index.manifests, files.describe, name);
  let desc = chosen;
  let bytes = await readBlob(files, desc, MAX_MANIFEST_BYTES, "a manifest");
  let doc = parseManifestDocument(bytes, desc.mediaType, what);
  if (doc.kind === "index") {
    desc = selectManifest(doc.manifests, platform, `${files.describe}: image`);
    bytes = await readBlob(files, desc, MAX_MANIFEST_BYTES, "a manifest");
    doc = parseManifestDocument(bytes, desc.mediaType, what);
    if (doc.kind !== "manifest") throw new ImageInvalidError(`${what}: nested indexes are not supported`);
  }
  const manifest = doc.manifest;
  return {
    names: namesOf(chosen),
    input: {
      source: files.describe,
      manifest,
      manifestBytes: bytes,
      manifestDigest: desc.digest,
      configBytes: await readBlob(files, manifest.config, MAX_CONFIG_BYTES, "the config"),
      verifyLayerDigests: true,
      openLayer: async (layer, _i, onBytes) => ({ stream: counted(files.stream(blobName(layer.digest)), onBytes) }),
    },
  };
}

function pickEntry(entries: Descriptor[], describe: string, name?: string): Descriptor {
  if (name !== undefined) {
    const want = safeCanonical(name);
    const hit = entries.find(
      (d) => namesOf(d).includes(want ?? "") || d.annotations?.["org.opencontainers.image.ref.name"] === name,
    );
    if (!hit) throw new ImageInvalidError(`${describe} has no image named ${name} (it has: ${listNames(entries)})`);
    return hit;
  }
  if (entries.length === 1) return entries[0]!;
  throw new ImageInvalidError(
    `${describe} holds ${entries.length} images (${listNames(entries)}): say which with --name`,
  );
}

function listNames(entries: Descriptor[]): string {
  const names = entries.map((d) => d.annotations?.["org.opencontainers.image.ref.name"] ?? d.digest.slice(0, 19));
  return names.join(", ");
}

interface DockerEntry {
  Config: string;
  RepoTags: string[] | null;
  Layers: string[];
}

async function dockerImage(files: ArchiveFiles, name?: string): Promise<ArchiveImage> {
  const what = `${files.describe}: manifest.json`;
  let list: unknown;
  try {
    list = JSON.parse((await files.read("manifest.json", MAX_MANIFEST_BYTES)).toString("utf8"));
  } catch (e) {
    throw new ImageInvalidError(`${what} is not valid JSON: ${(e as Error).message}`);
  }
  const entries = (Array.isArray(list) ? list : []).filter(
    (e): e is DockerEntry =>
      typeof e?.Config === "string" && Array.isArray(e.Layers) && e.Layers.every((l: unknown) => typeof l === "string"),
  );
  if (entries.length === 0) throw new ImageInvalidError(`${what} lists no image`);
  const entry = pickDocker(entries, files.describe, name);
  const configBytes = await files.read(entry.Config, MAX_CONFIG_BYTES);
  const config = parseImageConfig(configBytes, `${files.describe}: config`);
  if (config.diffIds.length !== entry.Layers.length)
    throw new ImageInvalidError(`${what}: ${entry.Layers.length} layers but the config has ${config.diffIds.length}`);
  // No manifest in a Docker archive: one is made from its parts (layers named by diff id, as they are stored).
  const manifest: ImageManifest = {
    mediaType: MEDIA.ociManifest,
    config: { mediaType: MEDIA.dockerConfig, digest: sha256(configBytes), size: configBytes.length },
    layers: entry.Layers.map((l, i) => ({
      mediaType: MEDIA.ociLayer,
      digest: config.diffIds[i]!,
      size: files.size(l),
    })),
  };
  const manifestBytes = Buffer.from(JSON.stringify({ schemaVersion: 2, ...manifest }));
  return {
    names: (entry.RepoTags ?? []).map(safeCanonical).filter((n): n is string => n !== undefined),
    input: {
      source: files.describe,
      manifest,
      manifestBytes,
      manifestDigest: sha256(manifestBytes),
      configBytes,
      verifyLayerDigests: false,
      openLayer: async (_layer, i, onBytes) => ({ stream: counted(files.stream(entry.Layers[i]!), onBytes) }),
    },
  };
}

function pickDocker(entries: DockerEntry[], describe: string, name?: string): DockerEntry {
  if (name === undefined) {
    if (entries.length === 1) return entries[0]!;
    const names = entries.flatMap((e) => e.RepoTags ?? []).join(", ");
    throw new ImageInvalidError(`${describe} holds ${entries.length} images (${names}): say which with --name`);
  }
  const want = safeCanonical(name);
  const hit = entries.find((e) => (e.RepoTags ?? []).some((t) => safeCanonical(t) === want));
  if (!hit) throw new ImageInvalidError(`${describe} has no image named ${name}`);
  return hit;
}

async function* counted(source: AsyncIterable<Buffer>, onBytes: (n: number) => void): AsyncGenerator<Buffer> {
  for await (const chunk of source) {
    onBytes(chunk.length);
    yield chunk;
  }
}
