/**
 * Images between nodes like any layer, over real HTTP between two real `minisandbox serve` processes on 127.0.0.1:
 * one holds SWE-bench-style instance images (imported from the fixture images), the other takes them from it by
 * file (the record, manifest and config, the diff records and objects it lacks; its registry blocked, so nothing
 * comes from there), runs a sandbox and evaluates on one with the holder's result, and a later pull of another image
 * of the same base skips the layers it took. A peer that lies (an object's bytes, a record that disagrees with its
 * config, a diff record climbing out of the image) is refused in one line with nothing recorded; a peer not allowed
 * is never contacted.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { join } from "node:path";
import { getImage, importImage } from "../src/env/images/index.js";
import { openStore, verifyStore } from "../src/env/store/index.js";
import { fixtureImages } from "../src/fixtures/images.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { asTaskInstance } from "../src/tasks/index.js";
import { homeLayout } from "../src/util/home.js";
import { tempDir } from "./helpers.js";
import { call, startServe, type Json } from "./serve-process.js";

const KEY = "admin-token";
const dir = tempDir("msb-img-peers-");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
const ds = await makeFixtureDataset(join(dir, "ds"), { instances: 2 });
const refOf = (name: string): string => `registry.example/fixture/${name.replace(/^msb-fixture\//, "")}`;
const named = (kind: string, id?: string) =>
  set.images.find((i) => i.kind === kind && (id === undefined || i.instanceId === id))!;
const [inst1, inst2] = ds.instances as [(typeof ds.instances)[0], (typeof ds.instances)[0]];
const img1 = named("instance", inst1.instance_id);
const img2 = named("instance", inst2.instance_id);
const imgC = named("c-instance");
const [ref1, ref2, refC] = [img1, img2, imgC].map((i) => refOf(i.name)) as [string, string, string];

const holderHome = join(dir, "holder");
const fetcherHome = join(dir, "fetcher");
const holderStore = openStore(homeLayout(holderHome).store);
for (const [image, ref] of [
  [img1, ref1],
  [img2, ref2],
  [imgC, refC],
] as const)
  await importImage(holderStore, set.layout, { name: image.name, tags: [ref] });
const fetcherStore = openStore(homeLayout(fetcherHome).store);
// The fetcher's registry is blocked: an image it holds came from its peer.
writeFileSync(join(fetcherHome, "registries.json"), JSON.stringify({ blocked: ["registry.example"] }));
const holder = await startServe(holderHome, ["--auth-token", KEY]);
const fetcher = await startServe(fetcherHome, ["--auth-token", KEY, "--peer-allow", "127.0.0.1"]);
const source = { url: holder.url, token: KEY };
const fakes: Server[] = [];
after(() => {
  for (const f of fakes) f.close();
});

/** Every file the store keeps about images and layers (objects aside), relative to the store. */
function storeFiles(): string[] {
  const root = homeLayout(fetcherHome).store;
  const list = (sub: string): string[] => {
    try {
      return readdirSync(join(root, sub)).map((n) => `${sub}/${n}`);
    } catch {
      return [];
    }
  };
  return ["manifests", "images/refs", "images/records", "images/blobs", "images/diffs", "tmp"].flatMap(list).sort();
}

const diffCount = (): number => storeFiles().filter((f) => f.startsWith("images/diffs/")).length;
const fetchImage = (name: string, sources: Json[]) =>
  call(fetcher.url, "POST", "/cache/images", { key: KEY, body: { name, sources } });

test("a node takes an image from its peer by file: verified, once, and a later pull skips its layers", async () => {
  const want = await getImage(holderStore, ref1);
  const first = await fetchImage(ref1, [source]);
  assert.equal(first.status, 200, first.text);
  assert.equal(first.json.fetched, true);
  assert.deepEqual([first.json.id, first.json.rootfs, first.json.name], [want.id, want.rootfs, ref1]);
  assert.equal(first.json.source, new URL(holder.url).origin, "the peer's origin, never its token");
  assert.equal(first.json.diffs_fetched, new Set(want.layers.map((l) => l.diffId)).size);
  assert.ok(first.json.objects_fetched > 100 && first.json.bytes_fetched > 1e6, first.text);
  const again = await fetchImage(ref1, [source]);
  assert.deepEqual([again.json.fetched, again.json.objects_fetched], [false, 0], again.text);

  const got = await getImage(fetcherStore, ref1);
  assert.equal(got.peer, new URL(holder.url).origin, "the record says where it came from");
  const { storedAt: _a, peer: _p, ...mine } = got;
  const { storedAt: _b, ...theirs } = want;
  assert.deepEqual(mine, theirs, "the same record, rebuilt from the verified config and manifest");
  const listing = async (url: string) =>
    (await call(url, "GET", "/store/layers", { key: KEY })).json.layers.find((l: Json) => l.key === want.rootfs);
  assert.equal((await listing(fetcher.url)).manifest_sha256, (await listing(holder.url)).manifest_sha256);
  const verified = await verifyStore(fetcherStore);
  assert.equal(verified.ok, true, JSON.stringify(verified).slice(0, 500));

  // Another image of the same base: only the layers the fetcher lacks move (their records and objects).
  const before = diffCount();
  const second = await call(fetcher.url, "POST", "/environments", {
    key: KEY,
    body: { instance: asTaskInstance({ ...inst2, image_name: ref2 }), image: ref2, sources: [source] },
  });
  assert.equal(second.json.status, "fetched", second.text);
  const layers2 = (await getImage(holderStore, ref2)).layers.map((l) => l.diffId);
  const shared = layers2.filter((d) => want.layers.some((l) => l.diffId === d)).length;
  assert.ok(shared > 0, "the two instance images share their base");
  assert.equal(diffCount() - before, new Set(layers2).size - shared);

  // A pull of their base image (from any source; here its archive) skips every layer taken from the peer.
  const base = await importImage(fetcherStore, set.layout, { name: named("base").name, tags: [refOf("base")] });
  assert.equal(base.cached, false);
  assert.deepEqual(
    base.layers.map((l) => l.stored),
    base.layers.map(() => false),
    "its layers' records came with the images taken from the peer",
  );
});

test("a sandbox and an evaluation on the image taken from the peer: the holder's result", async () => {
  const made = await call(fetcher.url, "POST", "/sandboxes", { key: KEY, body: { image: ref1 } });
  assert.equal(made.status, 201, made.text);
  const r = await call(fetcher.url, "POST", `/sandboxes/${made.json.id}/exec`, {
    key: KEY,
    body: { command: "git -C /testbed rev-parse HEAD; cat /etc/debian_version" },
  });
  assert.match(r.json.stdout, new RegExp(`^${inst1.base_commit}\\n12\\.`), r.text);
  await call(fetcher.url, "DELETE", `/sandboxes/${made.json.id}`, { key: KEY });
  const evaluate = (url: string) =>
    call(url, "POST", "/evaluations", {
      key: KEY,
      body: {
        instance: asTaskInstance({ ...inst1, image_name: ref1 }),
        image: ref1,
        model_patch: inst1.patch,
        model_name_or_path: "gold",
      },
    });
  const [there, here] = [await evaluate(holder.url), await evaluate(fetcher.url)];
  assert.equal(here.json.status, "resolved", here.text);
  assert.deepEqual([here.json.status, here.json.resolution], [there.json.status, there.json.resolution]);
  const report = (res: Json) => JSON.parse(Buffer.from(res.json.files["report.json"], "base64").toString());
  assert.deepEqual(report(here), report(there), "the same report, test by test");
});

/** A peer on 127.0.0.1 that forwards to the holder and rewrites what `lie` changes. */
async function lyingPeer(lie: (path: string, body: Buffer) => Buffer) {
  const seen: string[] = [];
  const srv = createServer(async (req: IncomingMessage, res) => {
    seen.push(req.url ?? "");
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const up = await fetch(holder.url + req.url, {
      method: req.method,
      headers: { "X-API-Key": KEY, ...(body ? { "content-type": "application/json" } : {}) },
      body,
    });
    const out = lie(req.url ?? "", Buffer.from(await up.arrayBuffer()));
    res.writeHead(up.status, { "content-type": up.headers.get("content-type") ?? "application/octet-stream" });
    res.end(out);
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  fakes.push(srv);
  return { url: `http://127.0.0.1:${(srv.address() as { port: number }).port}`, seen };
}

function editJson(body: Buffer, edit: (doc: Json) => void): Buffer {
  const doc = JSON.parse(body.toString());
  edit(doc);
  return Buffer.from(JSON.stringify(doc));
}

test("a peer that lies is refused in one line, and nothing of the image is recorded", async () => {
  const lies: [string, (path: string, body: Buffer) => Buffer, RegExp][] = [
    [
      "a record that disagrees with its config",
      (path, body) =>
        path.startsWith("/store/images/record") ? editJson(body, (d) => d.record.config.Env.push("X=1")) : body,
      /its record disagrees with its config and manifest \(config\)/,
    ],
    [
      "a layer record climbing out of the image",
      (path, body) =>
        path.startsWith("/store/images/diffs/")
          ? editJson(body, (d) => d.entries.push({ path: "../etc/evil", type: "whiteout" }))
          : body,
      /climbs out of the image/,
    ],
    [
      "an object's bytes",
      (path, body) => {
        if (path === "/store/objects" && body.length > 0) body[0] ^= 0xff;
        return body;
      },
      /object [0-9a-f]{64}\S* of image .* does not match its hash/,
    ],
  ];
  for (const [what, lie, message] of lies) {
    const before = storeFiles();
    const peer = await lyingPeer(lie);
    const r = await fetchImage(refC, [{ url: peer.url, token: "its-own-token" }]);
    assert.equal(r.json.code ?? r.json.error?.code, "layer_unavailable", `${what}: ${r.text}`);
    const detail: string = r.json.detail ?? r.json.message ?? r.text;
    assert.match(detail, message, what);
    assert.doesNotMatch(detail, /\n/, `${what}: one line`);
    assert.ok(peer.seen.length > 0, `${what}: the peer was asked`);
    assert.deepEqual(storeFiles(), before, `${what}: no record, name, layer record, blob or scratch file left`);
  }
  const verified = await verifyStore(fetcherStore);
  assert.equal(verified.ok, true, "what did land are verified objects (gc removes them)");
  assert.equal(verified.corrupt.length, 0);
});

test("a peer that is not allowed is never contacted; an image no peer holds falls back to the registry", async () => {
  const other = await lyingPeer((_p, b) => b);
  const refused = await fetchImage(refC, [{ url: other.url.replace("127.0.0.1", "localhost") }]);
  assert.equal(refused.status, 403, refused.text);
  assert.match(refused.text, /is not an allowed peer of this server/);
  assert.deepEqual(other.seen, [], "no request reached it");
  // What a store keeps of an image is for admins only, by well-formed digests only.
  const record = `/store/images/record?name=${encodeURIComponent(refC)}`;
  assert.equal((await call(holder.url, "GET", record, { key: null })).status, 403);
  assert.equal((await call(holder.url, "GET", record, { key: KEY })).status, 200);
  const badDigest = await call(holder.url, "GET", "/store/images/diffs/sha256:..%2F..%2Fstore.json", { key: KEY });
  assert.equal(badDigest.status, 400, badDigest.text);
  const absent = await fetchImage("registry.example/absent/x:1", [source]);
  assert.match(absent.text, /no peer could give it \(http:\/\/127\.0\.0\.1:\d+: not there\)/);
  const job = await call(fetcher.url, "POST", "/environments", {
    key: KEY,
    body: { instance: asTaskInstance(inst1), image: "registry.example/absent/x:1", sources: [source] },
  });
  assert.equal(job.json.status, "failed", job.text);
  assert.match(job.json.error, /could not be pulled: .*blocked.* \(and image .* no peer could give it/);
  assert.ok(readFileSync(join(fetcherHome, "registries.json"), "utf8").includes("blocked"));
});
