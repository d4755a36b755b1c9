import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { createServer } from "node:net";
import * as os from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { InvalidInputError, NotFoundError, StoreCorruptError } from "../src/errors.js";
import { run, runOk } from "../src/util/run.js";
import {
  NORMALIZED_MTIME_SEC,
  exportPack,
  gcStore,
  importPack,
  ingestLayer,
  listLayers,
  materializeLayer,
  normalizeMtimes,
  objectPath,
  openStore,
  pullLayer,
  readManifest,
  removeLayer,
  removeTree,
  storeStats,
  verifyStore,
  type Store,
} from "../src/env/store/index.js";

const STORE_INDEX = fileURLToPath(new URL("../src/env/store/index.js", import.meta.url));

function tmpDir(t: TestContext): string {
  const dir = fs.mkdtempSync(join(os.tmpdir(), "msb-store-"));
  t.after(() => removeTree(dir));
  return dir;
}

/** Deterministic pseudo-random bytes. */
function bytes(seed: string, n: number): Buffer {
  const out = Buffer.alloc(n);
  let block = createHash("sha256").update(seed).digest();
  for (let off = 0; off < n; off += block.length) {
    block.copy(out, off);
    block = createHash("sha256").update(block).digest();
  }
  return out;
}

function write(path: string | Buffer, data: string | Buffer, mode = 0o644): void {
  fs.writeFileSync(path, data, { mode });
  fs.chmodSync(path, mode);
}

/** A tree with every kind of entry the store must keep (and two it must skip). */
async function richTree(t: TestContext, root: string): Promise<void> {
  fs.mkdirSync(join(root, "bin"), { recursive: true });
  fs.mkdirSync(join(root, "empty/nested-empty"), { recursive: true });
  fs.mkdirSync(join(root, "pkg/sub"), { recursive: true });
  write(join(root, "README"), "hello\n");
  write(join(root, "bin/run.sh"), "#!/bin/sh\necho run\n", 0o755);
  write(join(root, "pkg/sub/data.bin"), bytes("data", 3 << 20)); // > 1 MiB: the streaming path
  write(join(root, "pkg/same.txt"), "hello\n"); // same content as README: one object
  write(join(root, "hard1"), "linked twice\n");
  fs.linkSync(join(root, "hard1"), join(root, "pkg/hard2"));
  fs.symlinkSync("README", join(root, "rel-link"));
  fs.symlinkSync("/etc/hostname", join(root, "abs-link"));
  fs.symlinkSync("does/not/exist", join(root, "dangling"));
  write(Buffer.from(`${root}/latin1-\xe9.txt`, "latin1"), "not utf-8 name\n"); // byte 0xe9 alone is invalid UTF-8
  await runOk("mkfifo", [join(root, "fifo")]);
  // A listening Unix socket (Node deletes the socket file when the server closes: keep it open for the test).
  const server = createServer();
  await new Promise<void>((r) => server.listen(join(root, "sock"), r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
}

interface Node {
  type: string;
  mode?: number;
  sha?: string;
  target?: string;
  ino?: number;
}

/** path -> what it is; `ino` kept so hard-link structure can be compared. Names as latin1 to keep bytes. */
function snapshot(root: string): Map<string, Node> {
  const out = new Map<string, Node>();
  const visit = (abs: Buffer, rel: string): void => {
    for (const name of fs.readdirSync(abs, { encoding: "buffer" }).sort(Buffer.compare)) {
      const p = Buffer.concat([abs, Buffer.from("/"), name]);
      const r = rel ? `${rel}/${name.toString("latin1")}` : name.toString("latin1");
      const st = fs.lstatSync(p);
      if (st.isDirectory()) {
        out.set(r, { type: "dir" });
        visit(p, r);
      } else if (st.isSymbolicLink()) {
        out.set(r, { type: "symlink", target: fs.readlinkSync(p, { encoding: "buffer" }).toString("latin1") });
      } else if (st.isFile()) {
        out.set(r, {
          type: "file",
          mode: st.mode & 0o111 ? 1 : 0,
          sha: createHash("sha256").update(fs.readFileSync(p)).digest("hex"),
          ino: st.ino,
        });
      } else out.set(r, { type: "special" });
    }
  };
  visit(Buffer.from(root), "");
  return out;
}

/**
 * Same entries and contents, and hard-linked files still share an inode. Copies reproduce the link groups
 * exactly; links to objects also join files that merely have the same content (that is the dedup).
 */
function assertSameTree(actual: Map<string, Node>, expected: Map<string, Node>, linksExact: boolean): void {
  const strip = (m: Map<string, Node>) => [...m].map(([k, v]) => [k, { ...v, ino: undefined }]);
  assert.deepEqual(strip(actual), strip(expected));
  const groups = (m: Map<string, Node>) => {
    const byIno = new Map<number, string[]>();
    for (const [k, v] of m) if (v.ino !== undefined) byIno.set(v.ino, [...(byIno.get(v.ino) ?? []), k]);
    return [...byIno.values()].filter((g) => g.length > 1);
  };
  const expectedGroups = groups(expected);
  if (linksExact)
    assert.deepEqual(
      groups(actual)
        .map((g) => g.join("|"))
        .sort(),
      expectedGroups.map((g) => g.join("|")).sort(),
    );
  for (const g of expectedGroups)
    assert.equal(new Set(g.map((p) => actual.get(p)!.ino)).size, 1, `${g.join(", ")} must stay hard-linked`);
}

/** Every path, type, mode and content under a directory: "the store is exactly as before". */
function fingerprint(root: string): string[] {
  const out: string[] = [];
  const visit = (dir: string, rel: string): void => {
    for (const name of fs.readdirSync(dir).sort()) {
      const p = join(dir, name);
      const st = fs.lstatSync(p);
      const sha = st.isFile() ? createHash("sha256").update(fs.readFileSync(p)).digest("hex") : "";
      out.push(`${rel}${name} ${st.mode.toString(8)} ${st.size} ${sha}`);
      if (st.isDirectory()) visit(p, `${rel}${name}/`);
    }
  };
  visit(root, "");
  return out;
}

function objectCount(store: Store): number {
  let n = 0;
  for (const shard of fs.readdirSync(store.objectsDir)) n += fs.readdirSync(join(store.objectsDir, shard)).length;
  return n;
}

test("ingest + materialize keep files, exec bits, symlinks, empty dirs, hard links, non-UTF-8 names", async (t) => {
  const dir = tmpDir(t);
  const src = join(dir, "src");
  await richTree(t, src);
  const store = openStore(join(dir, "store"));
  const r = await ingestLayer(store, "rich", { testbed: src });
  assert.ok(
    r.warnings.some((w) => /skipped FIFO testbed\/fifo/.test(w)),
    r.warnings.join("\n"),
  );
  assert.ok(
    r.warnings.some((w) => /skipped socket testbed\/sock/.test(w)),
    r.warnings.join("\n"),
  );
  const manifest = await readManifest(store, "rich");
  const entries = manifest.trees.testbed!.entries;
  assert.ok(
    entries.some(
      (e) =>
        typeof e.path === "object" &&
        Buffer.from(e.path.b64, "base64").equals(Buffer.from("latin1-\xe9.txt", "latin1")),
    ),
  );
  assert.ok(entries.some((e) => e.type === "hardlink"));
  assert.ok(entries.some((e) => e.type === "dir" && e.path === "empty/nested-empty"));

  const out = join(dir, "out");
  const m = await materializeLayer(store, "rich", out);
  assert.equal(m.linked, m.files, "same filesystem: every file is a hard link to its object");
  const expected = snapshot(src);
  expected.delete("fifo");
  expected.delete("sock");
  assertSameTree(snapshot(join(out, "testbed")), expected, false);
  const copy = await materializeLayer(store, "rich", join(dir, "copy"), { mode: "copy" });
  assert.equal(copy.copied, copy.files - 1, "everything copied but the hard link, which links to its copy");
  assertSameTree(snapshot(join(dir, "copy", "testbed")), expected, true);

  // Read-only everywhere, every mtime normalized, files share the object's inode.
  const visit = (p: Buffer): void => {
    const st = fs.lstatSync(p);
    if (!st.isSymbolicLink()) assert.equal(st.mode & 0o222, 0, `${p.toString()} must not be writable`);
    assert.equal(st.mtimeMs, NORMALIZED_MTIME_SEC * 1000, `${p.toString()} mtime`);
    if (st.isDirectory())
      for (const n of fs.readdirSync(p, { encoding: "buffer" })) visit(Buffer.concat([p, Buffer.from("/"), n]));
  };
  visit(Buffer.from(out));
  visit(Buffer.from(join(dir, "copy")));
  const readme = entries.find((e) => e.path === "README");
  assert.ok(readme?.type === "file");
  assert.equal(fs.statSync(join(out, "testbed/README")).ino, fs.statSync(objectPath(store, readme.object)).ino);
});

test("the same bytes with and without the exec bit are two read-only objects", async (t) => {
  const dir = tmpDir(t);
  fs.mkdirSync(join(dir, "src"));
  write(join(dir, "src/plain"), "#!/bin/sh\ntrue\n", 0o644);
  write(join(dir, "src/exec"), "#!/bin/sh\ntrue\n", 0o755);
  const store = openStore(join(dir, "store"));
  const { manifest } = await ingestLayer(store, "x", { t: join(dir, "src") });
  const [exec, plain] = manifest.trees.t!.entries.map((e) => (e.type === "file" ? e.object : ""));
  assert.notEqual(exec, plain);
  assert.equal(exec, `${plain}x`);
  assert.equal(fs.statSync(objectPath(store, exec!)).mode & 0o7777, 0o555);
  assert.equal(fs.statSync(objectPath(store, plain!)).mode & 0o7777, 0o444);
  assert.equal(objectCount(store), 2);
});

test("ingest is idempotent: same manifest bytes, no new objects", async (t) => {
  const dir = tmpDir(t);
  await richTree(t, join(dir, "src"));
  const store = openStore(join(dir, "store"));
  const first = await ingestLayer(store, "k", { testbed: join(dir, "src") }, { meta: { spec: "v1" } });
  const text = fs.readFileSync(join(store.manifestsDir, "k.json"), "utf8");
  const objects = objectCount(store);
  const second = await ingestLayer(store, "k", { testbed: join(dir, "src") }, { meta: { spec: "v1" } });
  assert.ok(first.newObjects > 0);
  assert.equal(second.newObjects, 0);
  assert.equal(second.newBytes, 0);
  assert.equal(fs.readFileSync(join(store.manifestsDir, "k.json"), "utf8"), text);
  assert.equal(objectCount(store), objects);
  assert.deepEqual(fs.readdirSync(store.tmpDir), []);
});

test("N checkouts at nearby commits plus N identical venvs cost little more than one", async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  const venv = join(dir, "venv");
  for (let i = 0; i < 100; i++) {
    fs.mkdirSync(join(venv, `lib/pkg${i % 10}`), { recursive: true });
    write(join(venv, `lib/pkg${i % 10}/m${i}.py`), bytes(`venv${i}`, 4096));
  }
  const N = 6;
  let single = 0;
  for (let c = 0; c < N; c++) {
    const repo = join(dir, `repo${c}`);
    for (let i = 0; i < 100; i++) {
      fs.mkdirSync(join(repo, `src/d${i % 8}`), { recursive: true });
      // Each later "commit" changes two files of the first checkout.
      const changed = c > 0 && (i === c || i === c + 50);
      write(join(repo, `src/d${i % 8}/f${i}.py`), bytes(changed ? `repo${i}@${c}` : `repo${i}`, 3000));
    }
    const venvCopy = join(dir, `venv${c}`);
    fs.cpSync(venv, venvCopy, { recursive: true });
    await ingestLayer(store, `layer${c}`, { testbed: repo, venv: venvCopy });
    if (c === 0) single = (await storeStats(store)).storedBytes;
  }
  const s = await storeStats(store);
  assert.equal(s.layers, N);
  assert.equal(s.logicalBytes, N * single);
  // Each extra layer adds its two changed files and nothing else.
  assert.equal(s.storedBytes, single + (N - 1) * 2 * 3000);
  assert.ok(s.dedupRatio > N * 0.9, `dedup ratio ${s.dedupRatio}`);
});

test("materialize restores the recorded mtime exactly, so .pyc caches compiled before ingest stay valid", async (t) => {
  const dir = tmpDir(t);
  const src = join(dir, "src");
  fs.mkdirSync(join(src, "pkg"), { recursive: true });
  write(join(src, "pkg/__init__.py"), "");
  write(join(src, "pkg/mod.py"), "VALUE = 42\n");
  const store = openStore(join(dir, "store"));
  // Without normalization the user is told why their pycs will be stale.
  const unnormalized = await ingestLayer(store, "raw", { testbed: src });
  assert.ok(unnormalized.warnings.some((w) => /mtime/.test(w)));

  assert.ok((await normalizeMtimes(src)) >= 3);
  await runOk("python3", ["-m", "compileall", "-q", src]);
  const r = await ingestLayer(store, "pyc", { testbed: src });
  assert.deepEqual(r.warnings, []);
  const out = join(dir, "out");
  await materializeLayer(store, "pyc", out, { mode: "copy" });
  // Python itself confirms the cached bytecode matches the materialized source (mtime + size in the pyc header).
  const py = await run("python3", ["-v", "-c", "import pkg.mod"], {
    cwd: join(out, "testbed"),
    env: { PATH: process.env.PATH ?? "" },
  });
  assert.equal(py.code, 0, py.stderr);
  assert.match(py.stderr, /mod\.cpython-\d+\.pyc matches .*pkg\/mod\.py/);
});

test("past the link limit (EMLINK), materialize copies instead of linking", async (t) => {
  const dir = tmpDir(t);
  const src = join(dir, "src");
  fs.mkdirSync(src);
  for (let i = 0; i < 6; i++) write(join(src, `copy${i}.txt`), "same content\n");
  const store = openStore(join(dir, "store"));
  const { manifest } = await ingestLayer(store, "many", { t: src });
  const entry = manifest.trees.t!.entries[0]!;
  assert.ok(entry.type === "file");
  const object = objectPath(store, entry.object);
  assert.equal(fs.statSync(object).nlink, 1);
  // The object may reach 4 links: itself plus 3 materialized files; the other 3 must be copies.
  const r = await materializeLayer(store, "many", join(dir, "out"), { maxLinks: 4 });
  assert.deepEqual([r.files, r.linked, r.copied], [6, 3, 3]);
  assert.equal(fs.statSync(object).nlink, 4);
  const objIno = fs.statSync(object).ino;
  let linkedCount = 0;
  for (let i = 0; i < 6; i++) {
    const p = join(dir, "out/t", `copy${i}.txt`);
    const st = fs.statSync(p);
    assert.equal(fs.readFileSync(p, "utf8"), "same content\n");
    assert.equal(st.mode & 0o7777, 0o444);
    assert.equal(st.mtimeMs, NORMALIZED_MTIME_SEC * 1000);
    if (st.ino === objIno) linkedCount++;
  }
  assert.equal(linkedCount, 3);
});

test("clear errors: unknown layer, invalid key, existing destination, missing object", async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  await assert.rejects(
    materializeLayer(store, "nope", join(dir, "out")),
    (e: Error) => e instanceof NotFoundError && /layer nope not found/.test(e.message),
  );
  await assert.rejects(readManifest(store, "../etc/passwd"), NotFoundError);
  await assert.rejects(ingestLayer(store, "../bad", { t: dir }), InvalidInputError);
  await assert.rejects(ingestLayer(store, "k", { t: join(dir, "missing") }), /is not a directory/);
  fs.mkdirSync(join(dir, "src"));
  write(join(dir, "src/f"), "f\n");
  const { manifest } = await ingestLayer(store, "k", { t: join(dir, "src") });
  fs.mkdirSync(join(dir, "exists"));
  await assert.rejects(materializeLayer(store, "k", join(dir, "exists")), /already exists/);
  const e = manifest.trees.t!.entries[0]!;
  assert.ok(e.type === "file");
  fs.rmSync(objectPath(store, e.object));
  await assert.rejects(
    materializeLayer(store, "k", join(dir, "out")),
    (err: Error) => err instanceof StoreCorruptError && /missing from store/.test(err.message),
  );
  assert.equal(fs.existsSync(join(dir, "out")), false, "a failed materialization leaves nothing behind");
  fs.writeFileSync(join(store.manifestsDir, "broken.json"), "{ not json");
  await assert.rejects(
    readManifest(store, "broken"),
    (err: Error) => err instanceof StoreCorruptError && /manifest of layer broken is corrupt/.test(err.message),
  );
});

test("verify finds corrupt and missing objects; gc frees exactly the unreferenced ones", async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  for (const name of ["a", "b"]) {
    fs.mkdirSync(join(dir, name));
    write(join(dir, name, "shared.txt"), bytes("shared", 5000));
    write(join(dir, name, "own.txt"), bytes(`own-${name}`, 7000));
    await ingestLayer(store, name, { t: join(dir, name) });
  }
  assert.equal((await verifyStore(store)).ok, true);
  const stats = await storeStats(store);
  assert.deepEqual([stats.layers, stats.objects, stats.logicalBytes, stats.storedBytes], [2, 3, 24000, 19000]);

  // gc: dropping layer b frees only b's own object; leftovers of a crashed writer go too.
  fs.writeFileSync(join(store.tmpDir, "obj-999999-deadbeef"), "partial");
  await removeLayer(store, "b");
  const gc = await gcStore(store);
  assert.deepEqual(gc, { removedObjects: 1, freedBytes: 7000, removedImageFiles: 0, removedTemp: 1 });
  assert.deepEqual(await listLayers(store), ["a"]);
  assert.equal((await verifyStore(store)).ok, true);
  await materializeLayer(store, "a", join(dir, "out"));
  assert.deepEqual(fs.readFileSync(join(dir, "out/t/shared.txt")), bytes("shared", 5000));

  // Corrupt one object (content) and delete the other.
  const m = await readManifest(store, "a");
  const [own, shared] = m.trees.t!.entries.map((e) => (e.type === "file" ? e.object : ""));
  fs.chmodSync(objectPath(store, own!), 0o644);
  fs.writeFileSync(objectPath(store, own!), bytes("tampered", 7000));
  fs.chmodSync(objectPath(store, own!), 0o444);
  fs.rmSync(objectPath(store, shared!));
  const report = await verifyStore(store);
  assert.equal(report.ok, false);
  assert.deepEqual(
    report.corrupt.map((c) => c.id),
    [own],
  );
  assert.match(report.corrupt[0]!.reason, /content hash/);
  assert.deepEqual(report.missing, [{ id: shared, layers: ["a"] }]);

  // gc refuses to guess when a manifest is unreadable.
  fs.writeFileSync(join(store.manifestsDir, "junk.json"), "[]");
  await assert.rejects(
    gcStore(store),
    (e: Error) => e instanceof StoreCorruptError && /refusing to gc/.test(e.message),
  );
});

test("an ingest killed at any moment leaves a consistent store, and re-ingesting completes it", async (t) => {
  const dir = tmpDir(t);
  const src = join(dir, "src");
  for (let i = 0; i < 400; i++) {
    fs.mkdirSync(join(src, `d${i % 20}`), { recursive: true });
    write(join(src, `d${i % 20}/f${i}`), bytes(`crash${i}`, 2000 + i));
  }
  const script = join(dir, "ingest.mjs");
  fs.writeFileSync(
    script,
    `import { openStore, ingestLayer } from ${JSON.stringify(STORE_INDEX)};\n` +
      `await ingestLayer(openStore(process.argv[2]), "victim", { t: process.argv[3] });\n`,
  );
  const store = openStore(join(dir, "store"));
  let interrupted = 0;
  for (const killAtObjects of [1, 200, 390]) {
    const child = spawn(process.execPath, [script, store.root, src], { stdio: "ignore" });
    const closed = new Promise((r) => child.once("close", r));
    let done = false;
    void closed.then(() => (done = true));
    while (!done && objectCount(store) < killAtObjects) await new Promise((r) => setTimeout(r, 10));
    child.kill("SIGKILL");
    await closed;
    if (!fs.existsSync(join(store.manifestsDir, "victim.json"))) interrupted++;
    // Whatever was interrupted: objects are complete (verify) and a manifest, if present, is whole and backed.
    const report = await verifyStore(store);
    assert.deepEqual(
      [report.corrupt, report.missing, report.badManifests],
      [[], [], []],
      `after kill at ${killAtObjects} objects`,
    );
  }
  assert.ok(interrupted > 0, "at least one kill landed mid-ingest");
  await gcStore(store);
  assert.deepEqual(fs.readdirSync(store.tmpDir), []);
  await ingestLayer(store, "victim", { t: src });
  await materializeLayer(store, "victim", join(dir, "out"));
  assertSameTree(snapshot(join(dir, "out/t")), snapshot(src), false);
});

test("packs: export then import into an empty store round-trips layers, one copy per object", async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  await richTree(t, join(dir, "src"));
  fs.mkdirSync(join(dir, "src2"));
  write(join(dir, "src2/README"), "hello\n"); // same object as in the first layer
  await ingestLayer(store, "one", { testbed: join(dir, "src") });
  await ingestLayer(store, "two", { testbed: join(dir, "src2") });
  const pack = join(dir, "layers.tar.zst");
  const r = await exportPack(store, ["two", "one", "one"], pack);
  assert.deepEqual(r.layers, ["one", "two"]);
  const members = (await runOk("tar", ["-tf", pack, "-I", "zstd"])).trim().split("\n");
  assert.equal(members.filter((m) => m.startsWith("objects/")).length, r.objects);
  assert.equal(new Set(members).size, members.length, "each object once");
  assert.deepEqual(
    members.filter((m) => m.startsWith("manifests/")),
    ["manifests/one.json", "manifests/two.json"],
  );

  const other = openStore(join(dir, "other"));
  const imported = await importPack(other, pack);
  assert.deepEqual(imported.layers, ["one", "two"]);
  assert.equal(imported.objectsAdded, r.objects);
  assert.deepEqual(fs.readdirSync(other.tmpDir), []);
  assert.equal((await verifyStore(other)).ok, true);
  await materializeLayer(other, "one", join(dir, "out"));
  const expected = snapshot(join(dir, "src"));
  expected.delete("fifo");
  expected.delete("sock");
  assertSameTree(snapshot(join(dir, "out/testbed")), expected, false);
  // Importing again adds nothing.
  const again = await importPack(other, pack);
  assert.deepEqual([again.objectsAdded, again.objectsPresent], [0, r.objects]);
});

/** Build a pack by hand from a staging dir: `files` maps member name -> content (written in that order). */
async function handPack(
  dir: string,
  name: string,
  files: [string, string | Buffer][],
  extraTarArgs: string[] = [],
): Promise<string> {
  const staging = join(dir, `${name}-staging`);
  for (const [member, content] of files) {
    fs.mkdirSync(join(staging, member, ".."), { recursive: true });
    fs.writeFileSync(join(staging, member), content);
  }
  const pack = join(dir, `${name}.tar.zst`);
  await runOk("tar", ["-c", "-I", "zstd -q", "-f", pack, "-C", staging, ...extraTarArgs, ...files.map(([m]) => m)]);
  return pack;
}

const sha = (data: string | Buffer): string => createHash("sha256").update(data).digest("hex");
const objMember = (id: string): string => `objects/${id.slice(0, 2)}/${id.slice(2)}`;
const header = (layers: string[]): string => JSON.stringify({ format: "minisandbox-pack", version: 1, layers });
function manifestFor(key: string, entries: unknown[]): string {
  return JSON.stringify({
    format: 1,
    key,
    mtime: { policy: "fixed", epochSec: NORMALIZED_MTIME_SEC },
    trees: { t: { mode: 0o755, entries } },
  });
}

test("hostile or broken packs fail with a clear error and leave the store exactly as it was", async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  fs.mkdirSync(join(dir, "src"));
  write(join(dir, "src/keep.txt"), "existing layer\n");
  await ingestLayer(store, "existing", { t: join(dir, "src") });
  await exportPack(store, ["existing"], join(dir, "good.tar.zst"));
  const before = fingerprint(store.root);

  const good = "payload\n";
  const goodId = sha(good);
  const goodManifest = manifestFor("evil", [
    { path: "f", type: "file", mode: 0o644, object: goodId, size: good.length },
  ]);
  const outside = join(dir, "outside");
  fs.mkdirSync(outside);

  const cases: [string, () => Promise<string>, RegExp][] = [
    [
      "truncated",
      async () => {
        const full = fs.readFileSync(join(dir, "good.tar.zst"));
        fs.writeFileSync(join(dir, "trunc.tar.zst"), full.subarray(0, Math.floor(full.length / 2)));
        return join(dir, "trunc.tar.zst");
      },
      /corrupt or truncated|truncated archive/,
    ],
    [
      "not zstd",
      async () => {
        fs.writeFileSync(join(dir, "plain.tar.zst"), "just some text\n");
        return join(dir, "plain.tar.zst");
      },
      /corrupt or truncated compressed data/,
    ],
    [
      "object content does not match its name",
      () =>
        handPack(dir, "badhash", [
          ["msb-pack.json", header(["evil"])],
          [objMember(goodId), "tampered\n"],
          ["manifests/evil.json", goodManifest],
        ]),
      /content does not match its hash/,
    ],
    [
      "absolute path",
      async () => {
        const abs = join(outside, "abs-evil");
        fs.writeFileSync(abs, "x");
        const pack = join(dir, "abs.tar.zst");
        await runOk("tar", ["-c", "-P", "-I", "zstd -q", "-f", pack, abs]);
        fs.rmSync(abs);
        return pack;
      },
      /absolute path/,
    ],
    [
      "'..' escape",
      async () => {
        fs.mkdirSync(join(dir, "dd/sub"), { recursive: true });
        fs.writeFileSync(join(dir, "dd/escape"), "x");
        const pack = join(dir, "dotdot.tar.zst");
        await runOk("tar", ["-c", "-P", "-I", "zstd -q", "-f", pack, "-C", join(dir, "dd/sub"), "../escape"]);
        return pack;
      },
      /escapes the store/,
    ],
    [
      "symlink entry pointing out",
      async () => {
        const staging = join(dir, "sym-staging");
        fs.mkdirSync(join(staging, "objects"), { recursive: true });
        fs.symlinkSync(outside, join(staging, "objects", goodId.slice(0, 2)));
        const pack = join(dir, "sym.tar.zst");
        await runOk("tar", ["-c", "-I", "zstd -q", "-f", pack, "-C", staging, "objects"]);
        return pack;
      },
      /is a symlink/,
    ],
    [
      "hard link entry",
      async () => {
        const staging = join(dir, "hl-staging");
        fs.mkdirSync(join(staging, "objects", goodId.slice(0, 2)), { recursive: true });
        fs.writeFileSync(join(staging, "msb-pack.json"), header([]));
        fs.linkSync(join(staging, "msb-pack.json"), join(staging, objMember(goodId)));
        const pack = join(dir, "hl.tar.zst");
        await runOk("tar", ["-c", "-I", "zstd -q", "-f", pack, "-C", staging, "msb-pack.json", objMember(goodId)]);
        return pack;
      },
      /is a hardlink/,
    ],
    [
      "unexpected member",
      () =>
        handPack(dir, "etc", [
          ["msb-pack.json", header([])],
          ["etc/passwd", "root::0:0\n"],
        ]),
      /unexpected entry "etc\/passwd"/,
    ],
    [
      "manifest references an absent object",
      () =>
        handPack(dir, "dangling", [
          ["msb-pack.json", header(["evil"])],
          ["manifests/evil.json", goodManifest],
        ]),
      /neither in the pack nor in the store/,
    ],
    [
      "manifest path escaping its tree",
      () =>
        handPack(dir, "mpath", [
          ["msb-pack.json", header(["evil"])],
          [objMember(goodId), good],
          [
            "manifests/evil.json",
            manifestFor("evil", [{ path: "../../f", type: "file", mode: 0o644, object: goodId, size: good.length }]),
          ],
        ]),
      /'\.\.' path component/,
    ],
    [
      "write through a symlink in the manifest",
      () =>
        handPack(dir, "mlink", [
          ["msb-pack.json", header(["evil"])],
          [objMember(goodId), good],
          [
            "manifests/evil.json",
            manifestFor("evil", [
              { path: "l", type: "symlink", target: outside },
              { path: "l/f", type: "file", mode: 0o644, object: goodId, size: good.length },
            ]),
          ],
        ]),
      /parent is not a directory/,
    ],
    [
      "no pack header",
      () =>
        handPack(dir, "nohdr", [
          [objMember(goodId), good],
          ["manifests/evil.json", goodManifest],
        ]),
      /not a minisandbox pack/,
    ],
    [
      "swapping the content of an existing layer",
      () =>
        handPack(dir, "swap", [
          ["msb-pack.json", header(["existing"])],
          [objMember(goodId), good],
          [
            "manifests/existing.json",
            manifestFor("existing", [
              { path: "keep.txt", type: "file", mode: 0o644, object: goodId, size: good.length },
            ]),
          ],
        ]),
      /layer existing already exists .* with different content/,
    ],
  ];
  for (const [what, build, message] of cases) {
    const pack = await build();
    await assert.rejects(importPack(store, pack), (e: Error) => {
      assert.ok(e instanceof InvalidInputError, `${what}: ${e.name}: ${e.message}`);
      assert.match(e.message, message, what);
      assert.doesNotMatch(e.message, /\n/, `${what}: one line`);
      return true;
    });
    assert.deepEqual(fingerprint(store.root), before, `${what}: store changed`);
    assert.deepEqual(fs.readdirSync(outside), [], `${what}: wrote outside`);
  }
  await assert.rejects(importPack(store, join(dir, "nope.tar.zst")), NotFoundError);
  // Replacing is possible when asked for explicitly.
  await importPack(store, join(dir, "swap.tar.zst"), { replace: true });
  await materializeLayer(store, "existing", join(dir, "swapped"));
  assert.equal(fs.readFileSync(join(dir, "swapped/t/keep.txt"), "utf8"), good);
});

test("pullLayer copies only the missing objects from a remote store, verifying them", async (t) => {
  const dir = tmpDir(t);
  const remote = openStore(join(dir, "remote"));
  for (const name of ["base", "next", "bad"]) {
    fs.mkdirSync(join(dir, name));
    write(join(dir, name, "common.txt"), bytes("common", 9000));
    write(join(dir, name, `${name}.txt`), bytes(name, 1000));
    await ingestLayer(remote, name, { t: join(dir, name) });
  }
  const local = openStore(join(dir, "local"));
  const first = await pullLayer(local, remote.root, "base");
  assert.deepEqual([first.objectsFetched, first.bytesFetched, first.objectsPresent], [2, 10000, 0]);
  const second = await pullLayer(local, remote.root, "next");
  assert.deepEqual([second.objectsFetched, second.bytesFetched, second.objectsPresent], [1, 1000, 1]);
  await materializeLayer(local, "next", join(dir, "out"));
  assert.deepEqual(fs.readFileSync(join(dir, "out/t/next.txt")), bytes("next", 1000));

  // A corrupt remote object is refused and the layer does not appear locally.
  const bad = await readManifest(remote, "bad");
  const badObj = bad.trees.t!.entries.find((e) => e.type === "file" && e.path === "bad.txt");
  assert.ok(badObj?.type === "file");
  fs.chmodSync(objectPath(remote, badObj.object), 0o644);
  fs.writeFileSync(objectPath(remote, badObj.object), bytes("evil", 1000));
  await assert.rejects(
    pullLayer(local, remote.root, "bad"),
    (e: Error) => e instanceof StoreCorruptError && /remote store .* is corrupt/.test(e.message),
  );
  assert.deepEqual(await listLayers(local), ["base", "next"]);
  assert.deepEqual(fs.readdirSync(local.tmpDir), []);
  await assert.rejects(pullLayer(local, remote.root, "absent"), NotFoundError);
  await assert.rejects(pullLayer(local, join(dir, "not-a-store"), "base"), /not a minisandbox store/);
});

/** Run the real `store` command in a child process, as the CLI entry point will. */
async function cli(home: string, ...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const script = join(home, "..", "cli.mjs");
  const storeCli = fileURLToPath(new URL("../src/cli/store.js", import.meta.url));
  if (!fs.existsSync(script)) {
    fs.writeFileSync(
      script,
      `import { Command } from ${JSON.stringify(import.meta.resolve("commander"))};\n` +
        `import { registerStoreCommand } from ${JSON.stringify(storeCli)};\n` +
        `const program = new Command("minisandbox");\n` +
        `registerStoreCommand(program, () => process.env.TEST_HOME);\n` +
        `await program.parseAsync(process.argv);\n`,
    );
  }
  return run(process.execPath, [script, ...args], { env: { ...process.env, TEST_HOME: home } });
}

test("CLI: store list/stats/verify/gc/export/import, --json; bad input exits 2, failed work 1, one line", async (t) => {
  const dir = tmpDir(t);
  const home = join(dir, "home");
  const store = openStore(join(home, "store"));
  fs.mkdirSync(join(dir, "src"));
  write(join(dir, "src/a.txt"), bytes("cli", 3000));
  await ingestLayer(store, "L1", { t: join(dir, "src") });

  const stats = await cli(home, "store", "stats", "--json");
  assert.equal(stats.code, 0, stats.stderr);
  assert.deepEqual(JSON.parse(stats.stdout).layers, 1);
  const human = await cli(home, "store", "stats");
  assert.match(human.stdout, /dedup ratio:\s+1\.00x/);

  const verify = await cli(home, "store", "verify", "--json");
  assert.equal(verify.code, 0, verify.stderr);
  assert.equal(JSON.parse(verify.stdout).ok, true);

  // `store list` shows full keys; export takes a key or the unique start of one (prepare prints 12 characters).
  await ingestLayer(store, "L1b", { t: join(dir, "src") });
  const list = await cli(home, "store", "list", "--json");
  assert.equal(list.code, 0, list.stderr);
  assert.deepEqual(
    (JSON.parse(list.stdout) as { key: string; files: number }[]).map((r) => [r.key, r.files]),
    [
      ["L1", 1],
      ["L1b", 1],
    ],
  );
  assert.match((await cli(home, "store", "ls")).stdout, /^key +repository +python +size +built\n.*\nL1 /);
  const ambiguous = await cli(home, "store", "export", "L", "-o", join(dir, "x.tar.zst"));
  assert.equal(ambiguous.code, 2);
  assert.match(ambiguous.stderr, /^minisandbox store export: layer "L" is ambiguous .*2 keys start with it/);
  await removeLayer(store, "L1b");

  const pack = join(dir, "l1.tar.zst");
  const exp = await cli(home, "store", "export", "L1", "-o", pack, "--json");
  assert.equal(exp.code, 0, exp.stderr);
  assert.equal(JSON.parse(exp.stdout).objects, 1);
  const prefix = await cli(home, "store", "export", "L", "-o", join(dir, "prefix.tar.zst"), "--json");
  assert.equal(prefix.code, 0, prefix.stderr);
  assert.deepEqual(JSON.parse(prefix.stdout).layers, ["L1"]);

  const home2 = join(dir, "home2");
  const imp = await cli(home2, "store", "import", pack);
  assert.equal(imp.code, 0, imp.stderr);
  assert.match(imp.stdout, /imported L1: 1 new objects/);

  const gc = await cli(home, "store", "gc", "--json");
  assert.deepEqual(JSON.parse(gc.stdout), { removedObjects: 0, freedBytes: 0, removedImageFiles: 0, removedTemp: 0 });

  // Bad input exits 2 with one line: an unknown layer says where the full keys are; a missing or invalid pack.
  const missing = await cli(home, "store", "export", "nope", "-o", join(dir, "x.tar.zst"));
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /^minisandbox store export: layer "nope" not found in store .*store list.*\n$/);
  const noFile = await cli(home, "store", "import", join(dir, "MISSING_FILE"));
  assert.equal(noFile.code, 2);
  assert.match(noFile.stderr, /^minisandbox store import: pack \S+MISSING_FILE not found\n$/);
  const garbage = join(dir, "garbage.tar.zst");
  fs.writeFileSync(garbage, "garbage");
  const bad = await cli(home, "store", "import", garbage);
  assert.equal(bad.code, 2);
  assert.equal(bad.stderr.trim().split("\n").length, 1);

  const m = await readManifest(store, "L1");
  const e = m.trees.t!.entries[0]!;
  assert.ok(e.type === "file");
  fs.rmSync(objectPath(store, e.object));
  const broken = await cli(home, "store", "verify");
  assert.equal(broken.code, 1);
  assert.match(broken.stdout, /missing object .* \(layers L1\)/);
});
