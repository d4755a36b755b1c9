/**
 * The host ids that own a store's image files. An image's file owned by uid N (gid M) inside the image is owned on
 * the host by `base + N` (`base + M`): a reserved range no host user has, so no host user owns (or can write) a
 * store object, and a sandbox maps the range back to 0..count-1 with an id-mapped mount. The range is recorded in
 * the store's `store.json` when the store first holds image files, so it never changes under existing objects;
 * from then on `objects/` is 0700 (image objects keep their modes, a world-writable one included).
 */
import { chmodSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { InvalidInputError, StoreCorruptError } from "../../errors.js";
import { configuredIdRange } from "../../util/subid.js";
import { scratchName } from "./fsutil.js";
import type { Store } from "./layout.js";

export interface StoreIds {
  base: number;
  count: number;
}

/** Ids inside an image, 0..IMAGE_ID_COUNT-1; larger ones are recorded as nobody (65534), as the kernel shows them. */
export const IMAGE_ID_COUNT = 65_536;
export const NOBODY_ID = 65_534;
/** Just below the sandboxes' default range (1879048192 + 65536·n), far above what `useradd` hands out. */
export const DEFAULT_STORE_IDS: StoreIds = { base: 1_878_982_656, count: IMAGE_ID_COUNT };
/** The /etc/subuid and /etc/subgid name that reserves the range (the system-deps script adds it). */
export const STORE_SUBID_USER = "minisandbox-store";

const cache = new Map<string, StoreIds>();

function checkIds(ids: StoreIds, source: string): StoreIds {
  const ok = Number.isSafeInteger(ids.base) && ids.base > 0 && ids.count >= IMAGE_ID_COUNT;
  if (!ok || ids.base + ids.count > 0xffff_ffff) {
    throw new InvalidInputError(`${source}: invalid store id range ${ids.base}:${ids.count} (need BASE:65536 or more)`);
  }
  return { base: ids.base, count: ids.count };
}

/** The range a new store takes: `MINISANDBOX_STORE_IDS=BASE:COUNT`, else /etc/subuid's entry, else the default. */
export function configuredStoreIds(): StoreIds {
  const r = configuredIdRange("MINISANDBOX_STORE_IDS", STORE_SUBID_USER);
  return r ? checkIds(r, r.source) : DEFAULT_STORE_IDS;
}

interface StoreMarker {
  format: string;
  version: number;
  ids?: StoreIds;
}

function markerPath(store: Store): string {
  return join(store.root, "store.json");
}

function readMarker(store: Store): StoreMarker {
  try {
    return JSON.parse(readFileSync(markerPath(store), "utf8")) as StoreMarker;
  } catch (e) {
    throw new StoreCorruptError(`store ${store.root}: store.json is unreadable: ${(e as Error).message}`);
  }
}

/**
 * The store's id range, recorded in store.json on first use (an older store gets the configured one then).
 * Synchronous: object placement needs it between two renames.
 */
export function storeIds(store: Store): StoreIds {
  const known = cache.get(store.root);
  if (known) return known;
  const marker = readMarker(store);
  let ids = marker.ids;
  if (ids === undefined) {
    ids = configuredStoreIds();
    const tmp = join(store.tmpDir, scratchName("marker"));
    writeFileSync(tmp, `${JSON.stringify({ ...marker, ids })}\n`, { mode: 0o644 });
    renameSync(tmp, markerPath(store));
  } else ids = checkIds(ids, markerPath(store));
  // Image objects keep their modes (some are world-writable): only the store's owner may reach objects/.
  if ((statSync(store.objectsDir).mode & 0o077) !== 0) chmodSync(store.objectsDir, 0o700);
  cache.set(store.root, ids);
  return ids;
}

/** Only root can give files to other ids; otherwise image files belong to the user running minisandbox. */
export function canChown(): boolean {
  return process.getuid?.() === 0;
}
