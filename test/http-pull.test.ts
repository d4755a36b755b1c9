/**
 * A layer of many small files pulled from a peer over real HTTP on 127.0.0.1 (the peer answers with the store's own
 * `objectsAnswer`): placed by the object writing thread or on the calling thread, every object lands verified; a
 * peer that changes one object's bytes in the middle of the stream is refused, and the store gets neither that
 * object nor the layer.
 */
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import {
  hasLayer,
  ingestLayer,
  objectsAnswer,
  openStore,
  pullLayerHttp,
  readManifest,
  verifyStore,
} from "../src/env/store/index.js";
import { objectHash, objectPath } from "../src/env/store/layout.js";
import { referencedObjects } from "../src/env/store/manifest.js";
import { tempDir } from "./helpers.js";

const work = tempDir("msb-http-pull-");
const FILES = 600;
const source = openStore(join(work, "source"));
const servers: Server[] = [];
after(() => {
  for (const s of servers) s.close();
});

/** A tree of `FILES` small files of distinct bytes and a few large ones, ingested as layer `key`. */
async function sourceLayer(key: string): Promise<void> {
  const tree = join(work, "tree");
  mkdirSync(join(tree, "d"), { recursive: true });
  for (let i = 0; i < FILES; i++) writeFileSync(join(tree, "d", `f${i}`), `file ${i} `.repeat(1 + (i % 50)));
  for (let i = 0; i < 3; i++) writeFileSync(join(tree, `big${i}`), Buffer.alloc((2 << 20) + i, i + 1));
  writeFileSync(join(tree, "empty"), "");
  await ingestLayer(source, key, { testbed: tree });
}

/** A peer on 127.0.0.1 serving `source`; `tamper` may change the bytes of the objects' answer. */
async function peer(key: string, tamper?: (answer: Buffer) => Buffer): Promise<string> {
  const manifest = readFileSync(join(source.root, "manifests", `${key}.json`));
  const srv = createServer((req, res) => {
    if (req.url?.endsWith("/manifest")) return void res.end(manifest);
    let body = "";
    req.on("data", (b: Buffer) => (body += b.toString()));
    req.on("end", async () => {
      const { ids } = JSON.parse(body) as { ids: string[] };
      const parts: Buffer[] = [];
      for await (const b of objectsAnswer(source, ids).stream) parts.push(b as Buffer);
      const answer = Buffer.concat(parts);
      res.end(tamper ? tamper(answer) : answer);
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  servers.push(srv);
  return `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
}

const KEY = "many-small-files";
await sourceLayer(KEY);

for (const [how, threadMinObjects] of [
  ["by the writing thread", 1],
  ["on the calling thread", 1_000_000],
] as const) {
  test(`a layer of many small files, ${how}: every object verified, the manifest last`, async () => {
    const url = await peer(KEY);
    const local = openStore(join(work, `local-${threadMinObjects}`));
    const r = await pullLayerHttp(local, { url }, KEY, { threadMinObjects, batchObjects: 100 });
    const objects = [...referencedObjects(await readManifest(local, KEY))];
    assert.equal(r.objectsFetched, objects.length);
    assert.ok(objects.length > FILES);
    for (const [id] of objects) {
      const hex = createHash("sha256")
        .update(readFileSync(objectPath(local, id)))
        .digest("hex");
      assert.equal(hex, objectHash(id));
    }
    const report = await verifyStore(local);
    assert.equal(report.ok, true, JSON.stringify(report.corrupt));
  });

  test(`a peer that changes one small object's bytes, ${how}: refused, neither it nor the layer stored`, async () => {
    const ids = [...referencedObjects(await readManifest(source, KEY))];
    // The 400th small object's first byte, wherever it falls in its batch's answer.
    const target = ids.filter(([, size]) => size > 0 && size < 1 << 20)[400]!;
    const original = readFileSync(objectPath(source, target[0]));
    const url = await peer(KEY, (answer) => {
      const at = answer.indexOf(original);
      if (at < 0) return answer;
      const changed = Buffer.from(answer);
      changed[at] = changed[at]! ^ 1;
      return changed;
    });
    const local = openStore(join(work, `tampered-${threadMinObjects}`));
    await assert.rejects(
      pullLayerHttp(local, { url }, KEY, { threadMinObjects, batchObjects: 100 }),
      new RegExp(`object ${target[0]} of layer ${KEY} does not match its hash`),
    );
    assert.equal(existsSync(objectPath(local, target[0])), false);
    assert.equal(await hasLayer(local, KEY), false);
  });
}
