/**
 * `pullImage(store, "debian:12")`: resolve the reference on its registry (or a mirror), pick the platform's
 * manifest from an index, check every document against its digest, then store the image (store-image.ts) with
 * its layers downloaded as needed: bounded parallel, resumable, each verified before it is unpacked.
 */
import { createHash } from "node:crypto";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { ImageInvalidError, ImageNotFoundError, RegistryDeniedError, RegistryError } from "../../errors.js";
import { digestHex, ensureImageDirs, type ImagePlatform, type Store, type UnpackBudget } from "../store/index.js";
import { findCredentials } from "./credentials.js";
import { BlobDownload } from "./download.js";
import {
  MANIFEST_ACCEPT,
  MAX_CONFIG_BYTES,
  MAX_MANIFEST_BYTES,
  parseManifestDocument,
  type Descriptor,
  type ImageManifest,
} from "./media.js";
import { DEFAULT_PLATFORM, selectManifest } from "./platform.js";
import { formatReference, parseReference, type ImageRef } from "./reference.js";
import { endpointsFor, httpAllowed, type RegistryConfig } from "./registries.js";
import type { HttpAnswer } from "./http-get.js";
import { RegistryClient, type Endpoint } from "./registry-client.js";
import { storeImage, type ImageEvent, type StoreImageResult } from "./store-image.js";

export interface PullOptions {
  platform?: ImagePlatform;
  registries?: RegistryConfig;
  /** Layers downloaded and unpacked at once (default 3). */
  jobs?: number;
  budget?: UnpackBudget;
  /** Layers of at least this many stored bytes are unpacked on a thread of their own (default 16 MiB). */
  unpackThreadMinBytes?: number;
  /** Attempts per request on 429, 5xx and cut connections (default 5). */
  attempts?: number;
  /** A `Retry-After` longer than this fails at once (default 5 minutes). */
  maxRetryAfterMs?: number;
  /** Where credentials are read from (default process.env: REGISTRY_AUTH_FILE, HOME...). */
  env?: Record<string, string | undefined>;
  onEvent?: (e: ImageEvent) => void;
}

export interface PullResult extends StoreImageResult {
  /** The reference as recorded (`docker.io/library/debian:12`). */
  ref: string;
  /** The registry or mirror that served it. */
  from: string;
}

interface Resolved {
  client: RegistryClient;
  manifest: ImageManifest;
  bytes: Buffer;
  digest: string;
  /** The digest the reference resolved to first (an index's, for a multi-platform image). */
  topDigest: string;
}

export async function pullImage(store: Store, text: string, opts: PullOptions = {}): Promise<PullResult> {
  const ref = parseReference(text);
  const config = opts.registries ?? {};
  const platform = opts.platform ?? DEFAULT_PLATFORM;
  const resolved = await resolveOnEndpoints(ref, config, platform, opts);
  const { client, manifest } = resolved;
  const name = formatReference(ref);
  const configBytes = await fetchSmall(client, manifest.config, MAX_CONFIG_BYTES, `config of ${name}`);
  const downloads = ensureImageDirs(store).downloads;
  const result = await storeImage(
    store,
    {
      source: name,
      manifest,
      manifestBytes: resolved.bytes,
      manifestDigest: resolved.digest,
      configBytes,
      verifyLayerDigests: false,
      openLayer: async (layer, i, onBytes) => {
        const file = join(downloads, digestHex(layer.digest));
        const download = new BlobDownload(client, layer, file, {
          what: `layer ${i + 1}/${manifest.layers.length} of ${name}`,
          onBytes,
          attempts: opts.attempts,
          onResume: (fromByte) => opts.onEvent?.({ type: "resume", what: layer.digest, fromByte }),
        });
        return {
          stream: download.chunks(),
          // Kept while the layer is incomplete (a later pull resumes it); dropped once stored or refused.
          settle: async (outcome) => {
            if (outcome !== "interrupted") await fsp.rm(file, { force: true });
          },
          explain: () => download.explain(),
        };
      },
    },
    {
      platform,
      refs: [...new Set([name, `${ref.registry}/${ref.repository}@${resolved.topDigest}`])],
      budget: opts.budget,
      jobs: opts.jobs,
      unpackThreadMinBytes: opts.unpackThreadMinBytes,
      onEvent: opts.onEvent,
    },
  );
  return { ...result, ref: name, from: client.endpoint.base.origin };
}

/** The manifest from the first endpoint (mirror or registry) that has it; the registry's own error otherwise. */
async function resolveOnEndpoints(
  ref: ImageRef,
  config: RegistryConfig,
  platform: ImagePlatform,
  opts: PullOptions,
): Promise<Resolved> {
  const endpoints = endpointsFor(ref.registry, config);
  let last: unknown;
  for (const endpoint of endpoints) {
    try {
      return await resolveManifest(clientFor(endpoint, ref, config, opts), ref, platform);
    } catch (e) {
      const mirrorMiss =
        e instanceof RegistryError || e instanceof ImageNotFoundError || e instanceof RegistryDeniedError;
      if (!mirrorMiss || endpoint === endpoints[endpoints.length - 1]) throw e;
      last = e;
      opts.onEvent?.({ type: "retry", what: formatReference(ref), attempt: 1, waitMs: 0, reason: String(last) });
    }
  }
  throw last;
}

function clientFor(endpoint: Endpoint, ref: ImageRef, config: RegistryConfig, opts: PullOptions): RegistryClient {
  return new RegistryClient(endpoint, ref.repository, {
    credentials: findCredentials(endpoint.name, ref.repository, opts.env),
    allowHttp: httpAllowed(config),
    attempts: opts.attempts,
    maxRetryAfterMs: opts.maxRetryAfterMs,
    onRetry: (r) => opts.onEvent?.({ type: "retry", ...r }),
  });
}

async function resolveManifest(client: RegistryClient, ref: ImageRef, platform: ImagePlatform): Promise<Resolved> {
  const name = formatReference(ref);
  const top = await fetchManifest(client, ref.digest ?? ref.tag!, `manifest of ${name}`);
  const doc = parseManifestDocument(top.bytes, top.contentType, `manifest of ${name}`);
  if (doc.kind === "manifest") return { client, manifest: doc.manifest, ...top, topDigest: top.digest };
  const chosen = selectManifest(doc.manifests, platform, `image ${name}`);
  const what = `manifest of ${name} for ${[platform.os, platform.architecture].join("/")}`;
  const m = await fetchManifest(client, chosen.digest, what);
  const inner = parseManifestDocument(m.bytes, m.contentType, what);
  if (inner.kind !== "manifest") throw new ImageInvalidError(`${what} is another index (nested indexes unsupported)`);
  return { client, manifest: inner.manifest, ...m, topDigest: top.digest };
}

const sha256 = (b: Buffer): string => `sha256:${createHash("sha256").update(b).digest("hex")}`;

/** A manifest by tag or digest, checked: against the digest asked for, or the one the registry announces. */
async function fetchManifest(
  client: RegistryClient,
  reference: string,
  what: string,
): Promise<{ bytes: Buffer; digest: string; contentType?: string }> {
  const res = await client.get(`manifests/${reference}`, { what, accept: MANIFEST_ACCEPT });
  const bytes = await readBounded(res, MAX_MANIFEST_BYTES, what);
  const digest = sha256(bytes);
  const announced = res.headers.get("docker-content-digest");
  if (reference.startsWith("sha256:") && digest !== reference)
    throw new ImageInvalidError(`${what}: the registry sent a manifest that hashes to ${digest}, not ${reference}`);
  if (announced?.startsWith("sha256:") && announced !== digest)
    throw new ImageInvalidError(
      `${what}: the manifest hashes to ${digest}, not to the ${announced} the registry gives`,
    );
  const contentType = res.headers.get("content-type") ?? undefined;
  return { bytes, digest, ...(contentType ? { contentType } : {}) };
}

/** A small blob (a config), size and digest checked. */
async function fetchSmall(client: RegistryClient, desc: Descriptor, max: number, what: string): Promise<Buffer> {
  if (desc.size > max) throw new ImageInvalidError(`${what}: ${desc.size} bytes is over the ${max}-byte limit`);
  const res = await client.get(`blobs/${desc.digest}`, { what });
  const bytes = await readBounded(res, desc.size, what);
  if (bytes.length !== desc.size || sha256(bytes) !== desc.digest)
    throw new ImageInvalidError(`${what}: the registry sent bytes that do not match its digest and size`);
  return bytes;
}

/** The body, refused as soon as it passes `max` bytes. */
async function readBounded(res: HttpAnswer, max: number, what: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  try {
    for await (const chunk of res.body) {
      n += chunk.length;
      if (n > max) throw new ImageInvalidError(`${what}: the registry sent more than ${max} bytes`);
      parts.push(chunk);
    }
  } catch (e) {
    if (e instanceof ImageInvalidError) throw e;
    throw new RegistryError(`${what}: the connection was cut (${(e as Error).message})`);
  }
  return Buffer.concat(parts);
}
