import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { NotFoundError } from "../src/errors.js";
import { IoBudget, NodeCache, type CacheLease } from "../src/env/cache/index.js";
import { ingestLayer, listLayers, openStore, removeTree, type Store } from "../src/env/store/index.js";

const CACHE_INDEX = fileURLToPath(new URL("../src/env/cache/index.js", import.meta.url));
const STORE_INDEX = fileURLToPath(new URL("../src/env/store/index.js", import.meta.url));

function tmpDir(t: TestContext): string {
  const dir = fs.mkdtempSync(join(os.tmpdir(), "msb-cache-"));
  t.after(() => removeTree(dir));
  return dir;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A store holding `keys`, each layer a testbed of `files` files (distinct per layer) of `size` bytes. */
async function storeWith(dir: string, keys: string[], files = 40, size = 1000): Promise<Store> {
  const store = openStore(join(dir, "store"));
  for (const key of keys) {
    const src = join(dir, "src", key);
    fs.mkdirSync(join(src, "pkg"), { recursive: true });
    for (let i = 0; i < files; i++) fs.writeFileSync(join(src, "pkg", `f${i}.py`), `${key}:${i}:`.padEnd(size, "x"));
    fs.writeFileSync(join(src, "MARKER"), key);
    await ingestLayer(store, key, { testbed: src });
  }
  return store;
}

function countEvents(cache: NodeCache): { materialized: string[]; active: number; maxActive: number } {
  const c = { materialized: [] as string[], active: 0, maxActive: 0 };
  cache.on("materialize-start", () => {
    c.active++;
    c.maxActive = Math.max(c.maxActive, c.active);
  });
  cache.on("materialize", (e) => {
    c.active--;
    c.materialized.push(e.key);
  });
  return c;
}

test("acquire materializes a layer once, read-only, and later acquires reuse it", async (t) => {
  const dir = tmpDir(t);
  const store = await storeWith(dir, ["L"]);
  const cache = new NodeCache({ store, dir: join(dir, "cache") });
  const events = countEvents(cache);
  const lease = await cache.acquire("L");
  assert.equal(lease.path, join(dir, "cache", "layers", "L"));
  assert.deepEqual(lease.trees, { testbed: join(lease.path, "testbed") });
  assert.equal(fs.readFileSync(join(lease.trees.testbed!, "MARKER"), "utf8"), "L");
  for (const p of [
    lease.path,
    lease.trees.testbed!,
    join(lease.trees.testbed!, "pkg"),
    join(lease.trees.testbed!, "MARKER"),
  ]) {
    assert.equal(fs.statSync(p).mode & 0o222, 0, `${p} is read-only`);
  }
  await lease.release();
  await lease.release(); // idempotent
  const again = await cache.acquire("L");
  await again.release();
  // A second cache object (another process would be the same) finds it too.
  const other = new NodeCache({ store, dir: join(dir, "cache") });
  const otherEvents = countEvents(other);
  await (await other.acquire("L")).release();
  assert.deepEqual(events.materialized, ["L"]);
  assert.deepEqual(otherEvents.materialized, []);
  assert.equal(await cache.has("L"), true);
});

test("16 concurrent acquires in one process materialize exactly once", async (t) => {
  const dir = tmpDir(t);
  const store = await storeWith(dir, ["L"], 200);
  const cache = new NodeCache({ store, dir: join(dir, "cache") });
  const events = countEvents(cache);
  const leases = await Promise.all(Array.from({ length: 16 }, () => cache.acquire("L")));
  assert.deepEqual(events.materialized, ["L"]);
  assert.equal(new Set(leases.map((l) => l.path)).size, 1);
  assert.equal((await cache.list())[0]!.leases, 16);
  await Promise.all(leases.map((l) => l.release()));
  assert.equal((await cache.list())[0]!.leases, 0);
});

/** Child script: wait for the go file, acquire `n` times at once, append one line per materialization to `log`. */
function childScript(dir: string): string {
  const script = join(dir, "child.mjs");
  fs.writeFileSync(
    script,
    `import * as fs from "node:fs";
import { NodeCache } from ${JSON.stringify(CACHE_INDEX)};
import { openStore } from ${JSON.stringify(STORE_INDEX)};
const [storeDir, cacheDir, key, n, go, log] = process.argv.slice(2);
const cache = new NodeCache({ store: openStore(storeDir), dir: cacheDir });
cache.on("materialize", (e) => fs.appendFileSync(log, e.key + "\\n"));
while (!fs.existsSync(go)) await new Promise((r) => setTimeout(r, 2));
const leases = await Promise.all(Array.from({ length: Number(n) }, () => cache.acquire(key)));
for (const l of leases) if (fs.readFileSync(l.trees.testbed + "/MARKER", "utf8") !== key) process.exit(3);
await Promise.all(leases.map((l) => l.release()));
`,
  );
  return script;
}

test("16 concurrent acquires from 4 processes materialize exactly once", async (t) => {
  const dir = tmpDir(t);
  const store = await storeWith(dir, ["L"], 300);
  const script = childScript(dir);
  const go = join(dir, "go");
  const log = join(dir, "materializations.log");
  fs.writeFileSync(log, "");
  const children = Array.from({ length: 4 }, () => {
    const child = spawn(process.execPath, [script, store.root, join(dir, "cache"), "L", "4", go, log], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    return new Promise<{ code: number | null; stderr: string }>((r) =>
      child.once("close", (code) => r({ code, stderr })),
    );
  });
  await sleep(300); // let every child start and wait at the barrier
  fs.writeFileSync(go, "");
  for (const r of await Promise.all(children)) assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(fs.readFileSync(log, "utf8"), "L\n");
});

test("LRU eviction removes least recently used layers not in use; stale leases do not count", async (t) => {
  const dir = tmpDir(t);
  const store = await storeWith(dir, ["A", "B", "C", "D"], 10, 1000);
  const layerBytes = 10 * 1000 + 1; // ten files plus the 1-byte MARKER
  const cache = new NodeCache({ store, dir: join(dir, "cache"), maxBytes: 2 * layerBytes });
  const evicted: string[] = [];
  cache.on("evict", (e) => evicted.push(e.key));

  await (await cache.acquire("A")).release();
  await sleep(5);
  const b = await cache.acquire("B"); // held
  await sleep(5);
  await (await cache.acquire("C")).release(); // 3 layers > budget of 2: A (least recent, unused) goes
  assert.deepEqual(evicted, ["A"]);
  assert.deepEqual(
    (await cache.list()).map((l) => l.key),
    ["B", "C"],
  );

  // Using C again makes B the least recent; B is leased, so the next eviction takes C instead.
  await sleep(5);
  await (await cache.acquire("C")).release();
  await (await cache.acquire("D")).release();
  assert.deepEqual(evicted, ["A", "C"]);
  assert.equal(await cache.has("B"), true);
  assert.equal(fs.readFileSync(join(b.trees.testbed!, "MARKER"), "utf8"), "B");

  // Nothing in use can be evicted, even with a zero budget...
  assert.deepEqual((await cache.evict({ maxBytes: 0 })).evicted, ["D"]);
  assert.equal(await cache.has("B"), true);
  // ...but a lease left by a dead process is stale.
  await b.release();
  const dead = spawn("true");
  await new Promise((r) => dead.once("close", r));
  fs.writeFileSync(join(dir, "cache", "leases", "B", `lease-1-${dead.pid}-abcdef`), "");
  assert.deepEqual(await cache.evict({ maxBytes: 0 }), { evicted: ["B"], freedBytes: layerBytes });
  assert.deepEqual(await cache.list(), []);
  assert.deepEqual(fs.readdirSync(join(dir, "cache", "layers")), []);
});

test("eviction racing acquires never removes a layer someone holds", async (t) => {
  const dir = tmpDir(t);
  const store = await storeWith(dir, ["L"], 20);
  const cache = new NodeCache({ store, dir: join(dir, "cache") });
  let stop = false;
  let evictions = 0;
  const evictor = (async () => {
    while (!stop) evictions += (await cache.evict({ maxBytes: 0 })).evicted.length;
  })();
  let uses = 0;
  const user = async (): Promise<void> => {
    // Until the evictor has really removed the layer a few times (bounded): leased windows and free windows.
    for (let i = 0; i < 300 && evictions < 4; i++) {
      const lease: CacheLease = await cache.acquire("L");
      assert.equal(fs.readFileSync(join(lease.trees.testbed!, "MARKER"), "utf8"), "L");
      await sleep(2);
      assert.equal(fs.readFileSync(join(lease.trees.testbed!, "MARKER"), "utf8"), "L", "still there while leased");
      await lease.release();
      uses++;
      await sleep(i % 7);
    }
  };
  await Promise.all([user(), user()]);
  stop = true;
  await evictor;
  assert.ok(evictions >= 4, `the race was exercised (${evictions} evictions in ${uses} uses)`);
});

test("acquire of an unknown layer: NotFoundError, and no lease or scratch left behind", async (t) => {
  const dir = tmpDir(t);
  const store = await storeWith(dir, []);
  const cache = new NodeCache({ store, dir: join(dir, "cache") });
  await assert.rejects(
    cache.acquire("missing"),
    (e: Error) => e instanceof NotFoundError && /layer missing not found in store/.test(e.message),
  );
  assert.deepEqual(fs.readdirSync(join(dir, "cache", "leases", "missing")), []);
  assert.deepEqual(fs.readdirSync(join(dir, "cache", "tmp")), []);
  await assert.rejects(cache.acquire("../escape"), /invalid layer key/);
});

test("a layer missing locally is pulled from a remote store, then materialized", async (t) => {
  const dir = tmpDir(t);
  const remote = await storeWith(join(dir, "remote-side"), ["R"]);
  const local = openStore(join(dir, "local-store"));
  const unmounted = join(dir, "unmounted-share");
  const cache = new NodeCache({ store: local, dir: join(dir, "cache"), remotes: [unmounted, remote.root] });
  const pulls: number[] = [];
  const warnings: string[] = [];
  cache.on("pull", (p) => pulls.push(p.objectsFetched));
  cache.on("warning", (w) => warnings.push(w));
  const lease = await cache.acquire("R");
  assert.equal(fs.readFileSync(join(lease.trees.testbed!, "MARKER"), "utf8"), "R");
  assert.deepEqual(pulls, [41]);
  assert.deepEqual(await listLayers(local), ["R"]);
  assert.match(warnings.join("\n"), /unmounted-share skipped: not a minisandbox store/);
  await lease.release();
  // Not anywhere: the error names every place looked at, and why a remote was unusable.
  await assert.rejects(cache.acquire("nope"), (e: Error) => {
    assert.ok(e instanceof NotFoundError);
    assert.ok(e.message.includes(remote.root) && e.message.includes("not a minisandbox store"), e.message);
    return true;
  });
});

test("a crashed materialization's scratch dir is cleared and the layer still materializes", async (t) => {
  const dir = tmpDir(t);
  const store = await storeWith(dir, ["L"]);
  const scratch = join(dir, "cache", "tmp", "L@-999999-0123456789ab");
  fs.mkdirSync(join(scratch, "testbed"), { recursive: true });
  fs.chmodSync(join(scratch, "testbed"), 0o555);
  const cache = new NodeCache({ store, dir: join(dir, "cache") });
  const lease = await cache.acquire("L");
  assert.equal(fs.existsSync(scratch), false);
  assert.deepEqual(fs.readdirSync(join(dir, "cache", "tmp")), []);
  await lease.release();
});

test("I/O budget: at most maxConcurrent materializations run at once", async (t) => {
  const dir = tmpDir(t);
  const keys = ["K1", "K2", "K3", "K4", "K5", "K6"];
  const store = await storeWith(dir, keys, 60);
  const cache = new NodeCache({ store, dir: join(dir, "cache"), maxConcurrent: 2, materialize: { mode: "copy" } });
  const events = countEvents(cache);
  const leases = await Promise.all(keys.map((k) => cache.acquire(k)));
  assert.equal(events.materialized.length, 6);
  assert.ok(events.maxActive <= 2, `max ${events.maxActive} at once`);
  await Promise.all(leases.map((l) => l.release()));

  // The bare budget, with plain tasks: the cap holds and is reached.
  const budget = new IoBudget({ maxConcurrent: 3 });
  let active = 0;
  let peak = 0;
  await Promise.all(
    Array.from({ length: 10 }, () =>
      budget.withSlot(async () => {
        peak = Math.max(peak, ++active);
        await sleep(15);
        active--;
      }),
    ),
  );
  assert.equal(peak, 3);
});

test("I/O budget: the concurrency cap also holds across processes sharing the slot dir", async (t) => {
  const dir = tmpDir(t);
  const script = join(dir, "slots.mjs");
  fs.writeFileSync(
    script,
    `import * as fs from "node:fs";
import { IoBudget } from ${JSON.stringify(CACHE_INDEX)};
const [slotDir, activeDir, peakLog] = process.argv.slice(2);
const budget = new IoBudget({ maxConcurrent: 2, slotDir });
await Promise.all([0, 1].map((i) => budget.withSlot(async () => {
  const me = activeDir + "/" + process.pid + "-" + i;
  fs.writeFileSync(me, "");
  fs.appendFileSync(peakLog, fs.readdirSync(activeDir).length + "\\n");
  await new Promise((r) => setTimeout(r, 60));
  fs.rmSync(me);
})));
`,
  );
  const active = join(dir, "active");
  fs.mkdirSync(active);
  const peakLog = join(dir, "peaks");
  const runs = Array.from({ length: 3 }, () => {
    const child = spawn(process.execPath, [script, join(dir, "slots"), active, peakLog], { stdio: "ignore" });
    return new Promise<number | null>((r) => child.once("close", r));
  });
  assert.deepEqual(await Promise.all(runs), [0, 0, 0]);
  const peaks = fs.readFileSync(peakLog, "utf8").trim().split("\n").map(Number);
  assert.equal(peaks.length, 6);
  assert.ok(Math.max(...peaks) <= 2, `peaks ${peaks.join(",")}`);
});

test("I/O budget: copying beyond the burst waits for the byte rate", async () => {
  const budget = new IoBudget({ bytesPerSec: 1_000_000 });
  const start = performance.now();
  await budget.consume(1_000_000); // the burst: immediate
  assert.ok(performance.now() - start < 100);
  await Promise.all([budget.consume(200_000), budget.consume(200_000)]); // 400 kB of debt at 1 MB/s
  const elapsedMs = performance.now() - start;
  assert.ok(elapsedMs >= 380 && elapsedMs < 2000, `${elapsedMs} ms`);
});
