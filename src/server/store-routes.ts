/**
 * Layers between servers (admin tokens only): what this node holds, a layer's manifest, objects in batches, a layer
 * as one pack, fetching a layer from allowed peers into this node's cache, and the registered peers.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ForbiddenError, NotFoundError, InvalidInputError } from "../errors.js";
import { nodeCacheFor } from "../env/environments.js";
import { listStoredImages } from "../env/images/index.js";
import {
  assertLayerKey,
  exportPack,
  hasLayer,
  listLayers,
  manifestPath,
  MAX_OBJECTS_PER_REQUEST,
  OBJECT_ID_RE,
  objectsAnswer,
  openStore,
  type Store,
} from "../env/store/index.js";
import { homeLayout } from "../util/home.js";
import { native } from "../wire/index.js";
import { LIFECYCLE } from "./lifecycle-sandboxes.js";
import { toHttpSource } from "./peers.js";
import { principalOf, type RouteContext } from "./route-context.js";

/** Moving layers hands out whole environments and makes this server fetch from others: admins only. */
export function requireAdmin(req: FastifyRequest, what: string): void {
  if (!principalOf(req).admin) throw new ForbiddenError(`${what} needs an admin token`);
}

/** sha256 of each manifest, remembered by file identity (manifests are written once, by rename). */
class ManifestDigests {
  private readonly known = new Map<string, { stamp: string; digest: string }>();

  async of(store: Store, key: string): Promise<string> {
    const path = manifestPath(store, key);
    const st = await fsp.stat(path);
    const stamp = `${st.ino}:${st.size}:${st.mtimeMs}`;
    const hit = this.known.get(key);
    if (hit?.stamp === stamp) return hit.digest;
    const digest = createHash("sha256")
      .update(await fsp.readFile(path))
      .digest("hex");
    this.known.set(key, { stamp, digest });
    return digest;
  }
}

const digests = new ManifestDigests();

/** sha256 of layer `key`'s manifest in `home`'s store; null when the store lacks it. */
export function layerDigest(home: string, key: string | null | undefined): Promise<string | null> {
  if (!key) return Promise.resolve(null);
  return digests.of(openStore(homeLayout(home).store), key).catch(() => null);
}

const config = LIFECYCLE;

const keyOf = (req: FastifyRequest): string => {
  const key = (req.params as { key: string }).key;
  assertLayerKey(key);
  return key;
};

export function registerStoreRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const store = (): Store => openStore(homeLayout(ctx.home).store);
  registerLayerRoutes(app, ctx, store);
  registerObjectRoutes(app, store);
  registerFetchRoutes(app, ctx);
}

/** What this node holds, and a layer's manifest. */
function registerLayerRoutes(app: FastifyInstance, ctx: RouteContext, store: () => Store): void {
  app.get("/store/layers", { config }, async (req) => {
    requireAdmin(req, "GET /store/layers");
    const s = store();
    const cached = new Set((await nodeCacheFor(ctx.home).list()).map((l) => l.key));
    const layers = [];
    for (const key of await listLayers(s)) {
      const digest = await digests.of(s, key).catch(() => undefined);
      if (digest) layers.push({ key, manifest_sha256: digest, materialized: cached.has(key) });
    }
    const images = (await listStoredImages(s)).flatMap((i) =>
      i.refs.map((name) => ({ name, rootfs: i.record.rootfs })),
    );
    return { layers, images };
  });

  app.get("/store/layers/:key/manifest", { config }, async (req, reply) => {
    requireAdmin(req, "GET /store/layers/:key/manifest");
    const key = keyOf(req);
    const s = store();
    if (!(await hasLayer(s, key))) throw new NotFoundError(`layer ${key} is not in this node's store`);
    reply.type("application/json");
    return fsp.readFile(manifestPath(s, key));
  });
}

/** Objects in batches, and a layer as one pack. */
function registerObjectRoutes(app: FastifyInstance, store: () => Store): void {
  app.post("/store/objects", { config }, async (req, reply) => {
    requireAdmin(req, "POST /store/objects");
    const { ids } = native.ObjectsRequest.parse(req.body);
    if (ids.length > MAX_OBJECTS_PER_REQUEST)
      throw new InvalidInputError(`at most ${MAX_OBJECTS_PER_REQUEST} objects per request, got ${ids.length}`);
    for (const id of ids)
      if (!OBJECT_ID_RE.test(id)) throw new InvalidInputError(`not an object id: ${JSON.stringify(id.slice(0, 80))}`);
    const answer = objectsAnswer(store(), ids);
    reply.type("application/octet-stream").header("content-length", String(answer.bytes));
    return reply.send(answer.stream);
  });

  app.get("/store/layers/:key/pack", { config }, async (req, reply) => {
    requireAdmin(req, "GET /store/layers/:key/pack");
    const key = keyOf(req);
    const s = store();
    if (!(await hasLayer(s, key))) throw new NotFoundError(`layer ${key} is not in this node's store`);
    const dir = await fsp.mkdtemp(join(s.tmpDir, "serve-pack-"));
    const cleanup = (): void => void fsp.rm(dir, { recursive: true, force: true });
    try {
      const pack = await exportPack(s, [key], join(dir, `${key}.msbpack`));
      const stream = createReadStream(pack.file);
      stream.once("close", cleanup);
      reply.type("application/zstd").header("content-length", String(pack.packBytes));
      return reply.send(stream);
    } catch (e) {
      cleanup();
      throw e;
    }
  });
}

/** A layer fetched from peers into this node's cache, and the peers it may come from. */
function registerFetchRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post("/cache/layers/:key", { config }, async (req) => {
    requireAdmin(req, "POST /cache/layers/:key");
    const key = keyOf(req);
    const { sources } = native.FetchLayerRequest.parse(req.body);
    ctx.peers.check(sources);
    const cache = nodeCacheFor(ctx.home);
    const started = performance.now();
    const before = (await cache.pulls()).length;
    const lease = await cache.acquire(key, { sources: sources.map(toHttpSource) });
    await lease.release();
    const pulled = (await cache.pulls()).slice(before).find((p) => p.key === key);
    return {
      key,
      fetched: pulled !== undefined,
      source: pulled?.source ?? null,
      objects_fetched: pulled?.objects ?? 0,
      bytes_fetched: pulled?.bytes ?? 0,
      ms: Math.round(performance.now() - started),
    };
  });

  app.get("/peers", { config }, async (req) => {
    requireAdmin(req, "GET /peers");
    return { peers: ctx.peers.peers(), allow: [...ctx.peers.allow] };
  });
  app.put("/peers", { config }, async (req) => {
    requireAdmin(req, "PUT /peers");
    const { urls } = native.PeersRequest.parse(req.body);
    return { peers: ctx.peers.register(urls), allow: [...ctx.peers.allow] };
  });
}
