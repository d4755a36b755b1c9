/**
 * Images in a store, by the names users type (`debian:12` is `docker.io/library/debian:12`) or by id: what a
 * sandbox on an image needs is here — the record (config: Env, WorkingDir, User, Entrypoint/Cmd, Labels; layers;
 * root filesystem layer key) and its root filesystem, read-only in the node cache (its metadata image or materialized).
 */
import { NotFoundError } from "../../errors.js";
import type { AcquireOptions, CacheLease, NodeCache } from "../cache/index.js";
import {
  findImage,
  listImages,
  removeImage,
  ROOTFS_TREE,
  type ImageListing,
  type ImageRecord,
  type RemoveImageResult,
  type Store,
} from "../store/index.js";
import { canonicalReference } from "./reference.js";

/** The canonical name for what a user typed, when it is a reference (an id or id prefix stays as it is). */
function storedName(text: string): string {
  if (/^(sha256:)?[0-9a-f]{12,64}$/.test(text))
    return text.startsWith("sha256:") || text.length < 64 ? text : `sha256:${text}`;
  return canonicalReference(text);
}

export async function findStoredImage(store: Store, text: string): Promise<ImageRecord | undefined> {
  return findImage(store, storedName(text));
}

/** The image, or NotFoundError saying how to get it. */
export async function getImage(store: Store, text: string): Promise<ImageRecord> {
  const image = await findStoredImage(store, text);
  if (!image) throw new NotFoundError(`image ${text} is not in the store; run: minisandbox images pull ${text}`);
  return image;
}

export async function listStoredImages(store: Store): Promise<ImageListing[]> {
  return listImages(store);
}

export async function removeStoredImage(store: Store, text: string): Promise<RemoveImageResult> {
  return removeImage(store, storedName(text));
}

export interface ImageRootfs {
  image: ImageRecord;
  /**
   * The root filesystem as an overlay's lower (`lease.form`): a directory (materialized; owners in the store's id
   * range), or a layer image lower (owners the image's own ids). Read-only: mount it copy-on-write.
   */
  root: string;
  lease: CacheLease;
}

/** The image's root filesystem, placed once per node (in `opts.form`) and leased until `lease.release()`. */
export async function acquireImageRootfs(
  cache: NodeCache,
  text: string,
  opts: Pick<AcquireOptions, "form"> = {},
): Promise<ImageRootfs> {
  const image = await getImage(cache.store, text);
  const lease = await cache.acquire(image.rootfs, opts);
  const root = lease.trees[ROOTFS_TREE];
  if (!root) {
    await lease.release();
    throw new NotFoundError(`layer ${image.rootfs} of image ${text} has no ${ROOTFS_TREE} tree`);
  }
  return { image, root, lease };
}
