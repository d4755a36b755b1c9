/**
 * Images between servers (admin tokens only), beside the layers of store-routes.ts: what this node's store keeps of
 * an image (its record, its manifest and config blobs, its layers' diff records; its objects go by
 * `POST /store/objects`), and taking an image from allowed peers into this node's store.
 */
import * as fsp from "node:fs/promises";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { errCode, InvalidInputError, NotFoundError } from "../errors.js";
import { findStoredImage, listStoredImages } from "../env/images/index.js";
import { fetchImageHere } from "../env/present.js";
import { blobPath, diffPath, DIGEST_RE, hasLayer, openStore, type Store } from "../env/store/index.js";
import { homeLayout } from "../util/home.js";
import { native } from "../wire/index.js";
import { LIFECYCLE } from "./lifecycle-sandboxes.js";
import { toHttpSource } from "./peers.js";
import type { RouteContext } from "./route-context.js";
import { requireAdmin } from "./store-routes.js";

const config = LIFECYCLE;

const digestOf = (req: FastifyRequest): string => {
  const digest = (req.params as { digest: string }).digest;
  if (!DIGEST_RE.test(digest))
    throw new InvalidInputError(`not a sha256 digest: ${JSON.stringify(digest.slice(0, 80))}`);
  return digest;
};

/** A file of the store's images, or 404 naming what is missing. */
async function storeFile(path: string, what: string): Promise<Buffer> {
  try {
    return await fsp.readFile(path);
  } catch (e) {
    if (errCode(e) === "ENOENT") throw new NotFoundError(`${what} is not in this node's store`);
    throw e;
  }
}

/** An image present here: its record, and its root filesystem's layer in the store. */
async function heldImage(s: Store, name: string) {
  const image = await findStoredImage(s, name).catch(() => undefined);
  return image && (await hasLayer(s, image.rootfs)) ? image : undefined;
}

export function registerImageRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const store = (): Store => openStore(homeLayout(ctx.home).store);

  app.get("/store/images/record", { config }, async (req) => {
    requireAdmin(req, "GET /store/images/record");
    const name = (req.query as { name?: unknown }).name;
    if (typeof name !== "string" || name === "") throw new InvalidInputError("name: an image reference is required");
    const s = store();
    const image = await heldImage(s, name);
    if (!image) throw new NotFoundError(`image ${name} is not in this node's store`);
    const refs = (await listStoredImages(s)).find((l) => l.record.id === image.id)?.refs ?? [];
    return { record: image, refs };
  });

  app.get("/store/images/blobs/:digest", { config }, async (req, reply) => {
    requireAdmin(req, "GET /store/images/blobs/:digest");
    const digest = digestOf(req);
    reply.type("application/octet-stream");
    return storeFile(blobPath(store(), digest), `blob ${digest}`);
  });

  app.get("/store/images/diffs/:digest", { config }, async (req, reply) => {
    requireAdmin(req, "GET /store/images/diffs/:digest");
    const digest = digestOf(req);
    reply.type("application/json");
    return storeFile(diffPath(store(), digest), `layer ${digest}`);
  });

  const inflight = new Map<string, Promise<native.FetchImageResponse>>();
  app.post("/cache/images", { config }, async (req) => {
    requireAdmin(req, "POST /cache/images");
    const { name, sources } = native.FetchImageRequest.parse(req.body);
    ctx.peers.check(sources);
    let p = inflight.get(name);
    if (!p) {
      p = fetchImage(ctx.home, name, sources).finally(() => inflight.delete(name));
      inflight.set(name, p);
    }
    return p;
  });
}

async function fetchImage(
  home: string,
  name: string,
  sources: readonly native.PeerSource[],
): Promise<native.FetchImageResponse> {
  const started = performance.now();
  const ms = (): number => Math.round(performance.now() - started);
  const have = await heldImage(openStore(homeLayout(home).store), name);
  const none = { diffs_fetched: 0, objects_fetched: 0, bytes_fetched: 0 };
  if (have) return { name, id: have.id, rootfs: have.rootfs, fetched: false, source: null, ...none, ms: ms() };
  const r = await fetchImageHere(home, sources.map(toHttpSource), name);
  return {
    name: r.ref,
    id: r.image.id,
    rootfs: r.image.rootfs,
    fetched: !r.cached,
    source: r.from,
    diffs_fetched: r.diffsFetched,
    objects_fetched: r.objectsFetched,
    bytes_fetched: r.bytesFetched,
    ms: ms(),
  };
}
