/**
 * A remote store is any directory with the store layout (e.g. on NFS or Lustre). Pulling copies a layer's
 * missing objects into the local store, verifying each hash, then writes the manifest last.
 */
import type { LayerKey } from "../types.js";
import { errCode, StoreCorruptError } from "../../errors.js";
import { mapLimit, syncFilesystem, yielder } from "./fsutil.js";
import { type ObjectId, openStore, objectPath, type Store } from "./layout.js";
import { lockFile } from "./lock.js";
import { assertCanWrite, type LayerManifest, readManifest, referencedObjects, writeManifest } from "./manifest.js";
import { copyVerified, hasObjectSync } from "./objects.js";

export interface PullOptions {
  /** Awaited before copying each chunk of bytes (the node cache's I/O budget). */
  throttle?: (bytes: number) => Promise<void>;
  /** Objects copied at once (default 4). */
  concurrency?: number;
  /** Overwrite a local layer of the same key with different content (default: refuse). */
  replace?: boolean;
}

export interface PullResult {
  key: LayerKey;
  objectsFetched: number;
  bytesFetched: number;
  /** Objects the local store already had. */
  objectsPresent: number;
}

/** Copy layer `key` from the store at `remoteDir` into `local`. NotFoundError if the remote lacks the layer. */
export async function pullLayer(
  local: Store,
  remoteDir: string,
  key: LayerKey,
  opts: PullOptions = {},
): Promise<PullResult> {
  const remote = openStore(remoteDir, { create: false });
  const manifest = await readManifest(remote, key);
  return pullMissing(local, manifest, opts.replace ?? false, (missing, result) =>
    mapLimit(missing, opts.concurrency ?? 4, async ([id, size]) => {
      try {
        const corrupt = () =>
          new StoreCorruptError(
            `remote store ${remote.root}: object ${id} is corrupt (content does not match its hash)`,
          );
        const copied = await copyVerified(local, objectPath(remote, id), id, corrupt, opts.throttle);
        if (copied !== size)
          throw new StoreCorruptError(
            `remote store ${remote.root}: object ${id} has ${copied} bytes, manifest of ${key} says ${size}`,
          );
      } catch (e) {
        if (errCode(e) === "ENOENT")
          throw new StoreCorruptError(`remote store ${remote.root}: object ${id} of layer ${key} is missing`);
        throw e;
      }
      result.objectsFetched++;
      result.bytesFetched += size;
    }).then(() => undefined),
  );
}

/**
 * Every pull's frame: under the local store's shared lock, the layer checked writable, `fetch` given the objects the
 * store lacks (it counts what it fetched in `result`), then everything synced and the manifest written last.
 */
export async function pullMissing(
  local: Store,
  manifest: LayerManifest,
  replace: boolean,
  fetch: (missing: [ObjectId, number][], result: PullResult) => Promise<void>,
): Promise<PullResult> {
  const lock = await lockFile(local.lockPath, { shared: true });
  try {
    await assertCanWrite(local, manifest, replace);
    const result: PullResult = { key: manifest.key, objectsFetched: 0, bytesFetched: 0, objectsPresent: 0 };
    const missing: [ObjectId, number][] = [];
    const pause = yielder();
    for (const [id, size] of referencedObjects(manifest)) {
      if (hasObjectSync(local, id, size)) result.objectsPresent++;
      else missing.push([id, size]);
      await pause();
    }
    await fetch(missing, result);
    await syncFilesystem(local.objectsDir);
    await writeManifest(local, manifest);
    return result;
  } finally {
    await lock.release();
  }
}
