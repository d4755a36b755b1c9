/**
 * What a dataset row runs on, made present on this node: its image (in the store, else pulled with the home's
 * mirrors, and its testbed's chronological history derived unless the row keeps the full one), or its environment's
 * layer (its base image first, then `ensurePresent`: here, else fetched, else built).
 * Evaluation jobs and a server's `prepare` come through here and add only what is theirs (their records, their
 * answers).
 */
import { errMessage, LayerUnavailableError, NotFoundError } from "../errors.js";
import { homeLayout } from "../util/home.js";
import { ensurePresent, nodeCacheFor, type Presence, type PresenceOptions } from "./environments.js";
import { prepareTestbedHistory } from "./image-history.js";
import {
  fetchImageFromPeers,
  findStoredImage,
  getImage,
  loadRegistryConfig,
  pullImage,
  type PeerImageResult,
  type RegistryConfig,
} from "./images/index.js";
import { hasLayer, openStore, type HttpSource, type Store } from "./store/index.js";
import type { EnvSpec, HistoryPolicy, LayerKey } from "./types.js";

/**
 * What a row runs on: an image of the store (by reference; `history`: the row's, absent is chronological), or its
 * environment's layer (the spec known).
 */
export type RowTarget =
  | { image: string; history?: HistoryPolicy | undefined }
  | { env: { key: LayerKey; spec: EnvSpec } };

/** How it came to be here: a layer was here, fetched or built; an image was here, fetched from a peer or pulled. */
export type RowPresence = Presence | "pulled";

/**
 * Present, with its layer key (an image's: its root filesystem's); or making it failed, with why: a pull (the
 * image's, or the base image's: the message names which), the build (the message is the build's own) or the
 * derivation of an image's chronological testbed history.
 */
export type MadePresent =
  | { status: RowPresence; key: LayerKey }
  | { status: "failed"; key: LayerKey | null; failed: "pull" | "build" | "history"; error: string };

/**
 * Make a row's image or layer present here (`build`: pull or build what is missing; `sources`: peers to fetch a
 * layer or an image from, an image's before its registry). A failure to make it is the result (`failed`); only what
 * is not the row's doing throws: `NotFoundError` when nothing has it and it may not be made, `LayerUnavailableError`
 * when no source had the layer (or image) and it may not be built or pulled (another node may have it).
 */
export async function makePresent(target: RowTarget, o: PresenceOptions): Promise<MadePresent> {
  if ("image" in target) {
    const made = await imagePresent(o.home, target.image, o.build ?? false, o.sources ?? []);
    return o.build && made.status !== "failed" ? withHistory(o.home, target, made) : made;
  }
  const { env } = target;
  const base = env.spec.base;
  if (o.build && base !== undefined) {
    try {
      await ensureImage(openStore(homeLayout(o.home).store), base, loadRegistryConfig(o.home));
    } catch (e) {
      const error = `base image ${base} could not be pulled: ${errMessage(e)}`;
      return { status: "failed", key: env.key, failed: "pull", error };
    }
  }
  try {
    return { status: await ensurePresent(env, o), key: env.key };
  } catch (e) {
    if (e instanceof LayerUnavailableError || e instanceof NotFoundError) throw e;
    return { status: "failed", key: env.key, failed: "build", error: errMessage(e) };
  }
}

/** An image made present by a job that may make what is missing: its testbed's chronological history derived now. */
async function withHistory(
  home: string,
  target: { image: string; history?: HistoryPolicy | undefined },
  made: { status: RowPresence; key: LayerKey },
): Promise<MadePresent> {
  try {
    await imageHistoryNow(home, target.image, target.history);
    return made;
  } catch (e) {
    return { status: "failed", key: made.key, failed: "history", error: errMessage(e) };
  }
}

/** An image's testbed given its chronological history now rather than at its first sandbox (nothing for `full`). */
export async function imageHistoryNow(home: string, ref: string, history: HistoryPolicy | undefined): Promise<void> {
  if (history !== "full") await prepareTestbedHistory(home, nodeCacheFor(home), ref);
}

/**
 * An image in the store, else taken from a peer that holds it (`sources`), else pulled when it may be (else
 * `NotFoundError` saying `images pull`, or `LayerUnavailableError` when the peers given could not supply it).
 */
async function imagePresent(
  home: string,
  ref: string,
  pull: boolean,
  sources: readonly HttpSource[],
): Promise<MadePresent> {
  const store = openStore(homeLayout(home).store);
  const have = await findStoredImage(store, ref);
  if (have && (await hasLayer(store, have.rootfs))) return { status: "present", key: have.rootfs };
  let peers = "";
  if (sources.length > 0) {
    try {
      const key = (await fetchImageHere(home, sources, ref)).image.rootfs;
      await nodeCacheFor(home).prepareImage(key);
      return { status: "fetched", key };
    } catch (e) {
      if (!pull) throw e;
      peers = ` (and ${errMessage(e)})`; // the registry is the fallback: its failure says both
    }
  }
  if (!pull) return { status: "present", key: (await getImage(store, ref)).rootfs };
  try {
    const r = await ensureImage(store, ref, loadRegistryConfig(home));
    if (r.status === "pulled") await nodeCacheFor(home).prepareImage(r.key);
    return { status: r.status === "pulled" ? "pulled" : "present", key: r.key };
  } catch (e) {
    const error = `image ${ref} could not be pulled: ${errMessage(e)}${peers}`;
    return { status: "failed", key: null, failed: "pull", error };
  }
}

/** An image taken from peers into this home's store, within the node cache's I/O budget (as a layer's fetch is). */
export async function fetchImageHere(
  home: string,
  sources: readonly HttpSource[],
  ref: string,
): Promise<PeerImageResult> {
  const cache = nodeCacheFor(home);
  const { budget } = cache;
  return budget.withSlot(() => fetchImageFromPeers(cache.store, sources, ref, { throttle: budget.consume }));
}

/**
 * An image in the store: `cached` when it was there, else pulled now (`registries`: mirrors, insecure and blocked
 * hosts, as in the home's registries.json). `key` is its root filesystem's layer key.
 */
export async function ensureImage(
  store: Store,
  ref: string,
  registries: RegistryConfig,
): Promise<{ key: string; status: "cached" | "pulled" }> {
  const have = await findStoredImage(store, ref);
  if (have) return { key: have.rootfs, status: "cached" };
  const r = await pullImage(store, ref, { registries });
  return { key: r.image.rootfs, status: "pulled" };
}
