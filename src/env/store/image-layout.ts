/**
 * Where a store keeps what images add to it (beside objects/ and manifests/):
 *   images/refs/<sha256 of ref>.json   a name (docker.io/library/debian:12) -> image id
 *   images/records/<hex>.json          one per image (id = its config's digest): config, layers, rootfs layer key
 *   images/blobs/<hex>                 the manifest and config of each image, as fetched (digest-verified)
 *   images/diffs/<hex>.json            one per unpacked OCI layer (by diff id): its entries, objects, whiteouts
 *   images/downloads/<hex>             blobs being downloaded (kept across a kill, resumed with Range)
 *   images/locks/<hex>.lock            flock: one download and unpack of a layer at a time across processes
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { InvalidInputError } from "../../errors.js";
import type { Store } from "./layout.js";

export interface ImageDirs {
  refs: string;
  records: string;
  blobs: string;
  diffs: string;
  downloads: string;
  locks: string;
}

export const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;

export function imageDirs(store: Store): ImageDirs {
  const root = join(store.root, "images");
  return {
    refs: join(root, "refs"),
    records: join(root, "records"),
    blobs: join(root, "blobs"),
    diffs: join(root, "diffs"),
    downloads: join(root, "downloads"),
    locks: join(root, "locks"),
  };
}

/** The dirs, created (writers call this once before their first write). */
export function ensureImageDirs(store: Store): ImageDirs {
  const dirs = imageDirs(store);
  for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true });
  return dirs;
}

/** The hex part of a sha256 digest, after checking its form. */
export function digestHex(digest: string): string {
  if (!DIGEST_RE.test(digest)) throw new InvalidInputError(`invalid digest ${JSON.stringify(digest.slice(0, 80))}`);
  return digest.slice(7);
}
