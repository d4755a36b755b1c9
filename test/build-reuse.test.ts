/**
 * What a build takes from the builds of its repository before it, on real git repositories, stores and builds: year
 * packs come from the store (hard links to its objects) and never bring an object that postdates the commit; a build
 * sandbox cannot change them; a `.pyc` is reused only for a source identical byte for byte (a changed source of the
 * same size gets its own); ingest takes the hard links without reading them but never trusts a name alone; prepare
 * says where each build's time went.
 */
process.env.PIP_RETRIES ??= "0";

import { before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { commitFilesAt as commitAt, git, tempDir, tempHome } from "./helpers.js";
import { checkoutTestbed } from "../src/env/repos.js";
import { HistoryPacks } from "../src/env/history-packs.js";
import { prepareInstances } from "../src/env/prepare.js";
import { buildLogPath } from "../src/env/build.js";
import { envFor } from "../src/env/environments.js";
import { openSandbox } from "../src/env/workspace.js";
import { ingestLayer, objectPath, openStore, readManifest, verifyStore } from "../src/env/store/index.js";
import { homeLayout } from "../src/util/home.js";
import type { Instance } from "../src/tasks/types.js";

const work = tempDir("msb-reuse-");
/**
 * acme/reuse: history over 2021 and 2022, then `base` (2023-02) and `later` (2023-05), which changes `pkg/a.py`
 * keeping its size (a stale .pyc would pass Python's mtime and size check) and leaves `pkg/b.py` as it was.
 */
function sourceRepo(reposDir: string): { dir: string; base: string; later: string; laterBlob: string } {
  const dir = join(reposDir, "acme", "reuse");
  mkdirSync(dir, { recursive: true });
  git(dir, "init", "-q", "-b", "main");
  commitAt(dir, { "pkg/__init__.py": "", "pkg/b.py": "Y = 'b'\n" }, "2021-03-01T10:00:00Z");
  commitAt(dir, { README: "reuse\n" }, "2022-06-01T10:00:00Z");
  const base = commitAt(dir, { "pkg/a.py": "X = 1\n" }, "2023-02-01T10:00:00Z");
  const later = commitAt(dir, { "pkg/a.py": "X = 2\n" }, "2023-05-01T10:00:00Z");
  return { dir, base, later, laterBlob: git(dir, "rev-parse", `${later}:pkg/a.py`) };
}

const allObjects = (d: string): string[] =>
  git(d, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split("\n");

describe("year packs from the store", () => {
  let src: ReturnType<typeof sourceRepo>;
  before(() => {
    src = sourceRepo(join(work, "packs"));
  });

  it("a later commit's stored packs serve an earlier one: linked, nothing after it, all reachable", async () => {
    const home = tempHome("msb-reuse-home-");
    const store = openStore(homeLayout(home).store, { create: true });
    const first = new HistoryPacks(home, store, true);
    const later = join(work, "h-later");
    const ranges = await checkoutTestbed(src.dir, src.later, later, { packs: first });
    assert.equal(ranges.length, 4, "2021, 2022, 2023 up to February (the base), the rest");
    assert.equal(first.linked.size, 0, "nothing stored yet");
    const stored = await ingestLayer(store, "a".repeat(64), { testbed: later });
    first.remember(ranges, stored.manifest);

    const second = new HistoryPacks(home, store, true);
    const dest = join(work, "h-base");
    await checkoutTestbed(src.dir, src.base, dest, { packs: second });
    assert.equal(second.linked.size, 6, "every pack of the base's ancestry and its index are linked");
    for (const [name, { object: id, mode }] of second.linked) {
      assert.equal(mode, 0o444, "recorded as git writes a pack");
      const file = statSync(join(dest, name.slice("testbed/".length)));
      assert.equal(file.ino, statSync(objectPath(store, id)).ino, `${name} is the store's object`);
    }
    assert.equal(git(dest, "rev-parse", "HEAD"), src.base);
    const all = allObjects(dest);
    assert.ok(!all.includes(src.later) && !all.includes(src.laterBlob), "nothing of the later commit");
    assert.equal(all.length, git(dest, "rev-list", "--objects", "--all").split("\n").length, "all reachable");
    assert.equal(git(dest, "fsck", "--unreachable", "--no-reflogs"), "");
    assert.equal(git(dest, "status", "--porcelain"), "");

    // Ingest takes the links without reading them, and the layer is the same as one hashed from copies.
    const again = await ingestLayer(store, "b".repeat(64), { testbed: dest }, { linked: second.linked });
    for (const e of again.manifest.trees["testbed"]!.entries)
      if (e.type === "file" && second.linked.has(`testbed/${String(e.path)}`))
        assert.equal(e.object, second.linked.get(`testbed/${String(e.path)}`)!.object);
    const plain = join(work, "h-plain");
    await checkoutTestbed(src.dir, src.base, plain);
    const copied = await ingestLayer(store, "c".repeat(64), { testbed: plain });
    const files = (m: typeof copied.manifest) =>
      m.trees["testbed"]!.entries.filter((e) => e.type === "file" && String(e.path).includes("/pack/"));
    assert.deepEqual(
      files(again.manifest).map((e) => [e.path, e.type === "file" && e.object, e.type === "file" && e.mode]),
      files(copied.manifest).map((e) => [e.path, e.type === "file" && e.object, e.type === "file" && e.mode]),
    );
  });

  it("a name is never trusted alone, and a range gone from the store is packed again", async () => {
    const home = tempHome("msb-reuse-home-");
    const store = openStore(homeLayout(home).store, { create: true });
    const packs = new HistoryPacks(home, store, true);
    const a = join(work, "n-a");
    const ranges = await checkoutTestbed(src.dir, src.base, a, { packs });
    const m = (await ingestLayer(store, "d".repeat(64), { testbed: a })).manifest;
    packs.remember(ranges, m);
    const b = join(work, "n-b");
    const reused = new HistoryPacks(home, store, true);
    await checkoutTestbed(src.dir, src.base, b, { packs: reused });
    // A file under a linked name that is not the object (replaced by other bytes) is hashed like any file.
    const [name, { object: id }] = [...reused.linked].find(([n]) => n.endsWith(".idx"))!;
    const path = join(b, name.slice("testbed/".length));
    rmSync(path);
    writeFileSync(path, "not an index\n");
    const r = await ingestLayer(store, "e".repeat(64), { testbed: b }, { linked: reused.linked });
    const entry = r.manifest.trees["testbed"]!.entries.find((e) => `testbed/${String(e.path)}` === name)!;
    assert.ok(entry.type === "file" && entry.object !== id && entry.size === 13, "recorded as what it is");
    // Objects gone (gc): the range is packed again from the source, and the testbed is whole.
    for (const e of m.trees["testbed"]!.entries) if (e.type === "file") rmSync(objectPath(store, e.object));
    const c = join(work, "n-c");
    const fresh = new HistoryPacks(home, store, true);
    await checkoutTestbed(src.dir, src.base, c, { packs: fresh });
    assert.equal(fresh.linked.size, 0);
    assert.equal(git(c, "fsck", "--no-reflogs"), "");
  });
});

describe("builds of one repository", () => {
  let src: ReturnType<typeof sourceRepo>;
  const home = tempHome("msb-reuse-build-");
  const row = (id: string, commit: string, install: string): Instance => ({
    instance_id: id,
    repo: "acme/reuse",
    base_commit: commit,
    patch: "",
    test_patch: "",
    problem_statement: "",
    FAIL_TO_PASS: [],
    PASS_TO_PASS: [],
    spec: { python: "3.11", install, test_cmd: "true" },
  });
  // The first build's install step tries to change the history it was given; the second's gets stored packs.
  const attack = "chmod u+w .git/objects/pack/* 2>/dev/null; for f in .git/objects/pack/*; do echo x >> $f; done; true";
  let rows: Instance[];
  before(() => {
    src = sourceRepo(join(work, "repos"));
    rows = [row("acme__reuse-1", src.base, "true"), row("acme__reuse-2", src.later, attack)];
  });

  it("the second build takes the first one's packs and bytecode, its changed source compiled anew", async () => {
    const reposDir = join(work, "repos");
    const results = [];
    for (const r of rows) results.push(...(await prepareInstances([r], { home, reposDir, workers: 1 })));
    assert.deepEqual(
      results.map((r) => r.status),
      ["built", "built"],
      JSON.stringify(results.map((r) => r.error)),
    );
    for (const r of results) {
      const names = r.steps!.map((s) => s.name);
      for (const n of ["history", "checkout", "sandbox", "compile", "store", "other", "prepare"])
        assert.ok(names.includes(n), n);
      const sum = r.steps!.reduce((n, s) => n + s.durationMs, 0);
      assert.ok(Math.abs(sum - r.durationMs) < 1, `steps ${sum} ms of ${r.durationMs} ms`);
    }
    const store = openStore(homeLayout(home).store);
    const [m1, m2] = await Promise.all(rows.map((r) => readManifest(store, envFor(r, {}).key)));
    const object = (m: typeof m1, path: string): string | undefined => {
      const e = m.trees["testbed"]!.entries.find((x) => x.path === path);
      return e?.type === "file" ? e.object : undefined;
    };
    const pyc = (name: string): string => `pkg/__pycache__/${name}.cpython-311.pyc`;
    assert.ok(object(m1, pyc("b")) && object(m1, pyc("b")) === object(m2, pyc("b")), "b.py's bytecode reused");
    assert.notEqual(object(m2, pyc("a")), object(m1, pyc("a")), "a.py changed (same size): compiled anew");
    const log = readFileSync(buildLogPath(home, envFor(rows[1]!, {}).key), "utf8");
    assert.match(log, /\b2 \.pyc file\(s\) of identical sources/, "pkg/__init__.py and pkg/b.py");
    // The install step could not write the packs it was given: the store is intact, the packs are the first's.
    assert.equal((await verifyStore(store)).ok, true);
    const packs = (m: typeof m1) =>
      m.trees["testbed"]!.entries.filter((e) => e.type === "file" && String(e.path).includes("/pack/"));
    const shared = packs(m2).filter((e) =>
      packs(m1).some((f) => f.type === "file" && e.type === "file" && f.object === e.object),
    );
    assert.equal(shared.length, 6, "the base's packs and indexes, as the first build stored them");

    await using sb = await openSandbox({ home, instance: rows[1]! });
    const r = await sb.exec("python -v -c 'import pkg.a, pkg.b; print(pkg.a.X, pkg.b.Y)' 2>&1; git fsck --no-reflogs");
    assert.match(r.stdout, /^2 b$/m, r.stdout.slice(-2000));
    assert.doesNotMatch(r.stdout, /code object from '?\/testbed\/pkg\/[ab]\.py'?$/m, "no source compiled");
    assert.match(r.stdout, /matches \/testbed\/pkg\/a\.py/);
  });

  it("a build that reused packs, files and bytecode is the layer a fresh build of the same commit makes", async () => {
    const fresh = tempHome("msb-reuse-fresh-");
    const reposDir = join(work, "repos");
    const [r] = await prepareInstances([rows[1]!], { home: fresh, reposDir, workers: 1 });
    assert.equal(r!.status, "built", r!.error);
    const key = envFor(rows[1]!, {}).key;
    const reusedLog = readFileSync(buildLogPath(home, key), "utf8");
    assert.match(reusedLog, /\b2 \.pyc file\(s\) of identical sources/, "the layer compared did reuse bytecode");
    const layer = async (h: string) => {
      const m = await readManifest(openStore(homeLayout(h).store), key);
      // The index holds inode numbers: no two checkouts agree on it.
      return Object.fromEntries(
        Object.entries(m.trees).map(([t, tree]) => [t, tree.entries.filter((e) => e.path !== ".git/index")]),
      );
    };
    const [reused, built] = [await layer(home), await layer(fresh)];
    const linkedFiles = reused["testbed"]!.filter((e) => e.type === "file" && String(e.path).startsWith("pkg/"));
    assert.ok(linkedFiles.length > 0);
    assert.deepEqual(reused, built);
    // Unchanged sources were the store's objects (hard links), not checked out again.
    assert.match(reusedLog, /\b3 file\(s\) of the tree linked from earlier layers/, "README, pkg/__init__.py, b.py");
    assert.doesNotMatch(reusedLog, /built again/);
  });

  it("a build that writes a tracked file in place is built again as a fresh one; the store is untouched", async () => {
    const writes = row("acme__reuse-3", src.later, "echo built >> README");
    const [r] = await prepareInstances([writes], { home, reposDir: join(work, "repos"), workers: 1 });
    assert.equal(r!.status, "built", r!.error);
    const log = readFileSync(buildLogPath(home, envFor(writes, {}).key), "utf8");
    assert.match(
      log,
      /\b[1-9]\d* file\(s\) of the tree linked[\s\S]*# FAILED at install 1[\s\S]*built again[\s\S]*\b0 file\(s\)/,
    );
    const store = openStore(homeLayout(home).store);
    assert.equal((await verifyStore(store)).ok, true, "the linked README object was not written");
    await using sb = await openSandbox({ home, instance: writes });
    assert.equal((await sb.exec("tail -n 1 README")).stdout, "built\n");
  });
});
