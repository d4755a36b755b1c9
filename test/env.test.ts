process.env.PIP_RETRIES ??= "0";
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { readFileSync, writeFileSync } from "node:fs";
import { makeFixtureDataset, makeSweSmithDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import { loadDataset } from "../src/tasks/index.js";
import { prepareInstances } from "../src/env/prepare.js";
import { ensurePresent, envFor, nodeCacheFor } from "../src/env/environments.js";
import { resolveWorkspace, Workspace } from "../src/env/workspace.js";
import { buildLogPath } from "../src/env/build.js";
import { depsKey } from "../src/env/deps-cache.js";
import { openStore, storeStats, verifyStore } from "../src/env/store/index.js";
import { GIT_INDEX_MTIME_SEC } from "../src/env/store/materialize.js";
import { InvalidInputError, NotFoundError, Sandbox } from "../src/index.js";
import { homeLayout } from "../src/util/home.js";
import { CLI, tempDir, tempHome } from "./helpers.js";

const home = tempHome("msb-env-");
const fxDir = tempDir("msb-envfx-");
let fx: FixtureDataset;

before(async () => {
  fx = await makeFixtureDataset(fxDir, { instances: 3 });
  const results = await prepareInstances(fx.instances, { home, reposDir: fx.reposDir, workers: 2 });
  assert.deepEqual(
    results.map((r) => r.status),
    ["built", "built", "built"],
    JSON.stringify(results, null, 2),
  );
});

test("prepare is resumable: built environments are skipped", async () => {
  const again = await prepareInstances(fx.instances, { home, reposDir: fx.reposDir, workers: 2 });
  assert.deepEqual(
    again.map((r) => r.status),
    ["cached", "cached", "cached"],
  );
});

test("a repository version installs its dependencies once (venv snapshot), then each instance's step", async () => {
  const logs = fx.instances.map((i) => readFileSync(buildLogPath(home, envFor(i, {}).key), "utf8"));
  const restored = logs.filter((l) => l.includes("restored the venv with dependencies from snapshot"));
  // Two workers: the first two builds may both install from scratch; the third restores.
  assert.ok(restored.length >= 1, "no build reused the dependencies");
  for (const l of restored) assert.ok(!l.includes("## venv\n"), "a restored build must not create the venv again");
  const spec = envFor(fx.instances[0]!, {}).spec;
  const base = { spec, python: "/usr/bin/python3.11", pythonVersion: "3.11.2", pipEnv: {} };
  const key = depsKey(base)!;
  assert.match(key, /^[0-9a-f]{64}$/);
  assert.equal(depsKey({ ...base, spec: { ...spec, commit: "0".repeat(40) } }), key, "the commit does not matter");
  assert.notEqual(depsKey({ ...base, spec: { ...spec, pip_packages: [...spec.pip_packages, "six"] } }), key);
  assert.notEqual(depsKey({ ...base, pipEnv: { PIP_INDEX_URL: "file:///other" } }), key);
  assert.equal(
    depsKey({ ...base, spec: { ...spec, pre_install: ["sed -i s/a/b/ setup.cfg"] } }),
    undefined,
    "pre_install steps are never shared",
  );
});

test("an instance sandbox has /testbed at the base commit with history, and the venv on PATH", async () => {
  const inst = fx.instances[1]!;
  await using sb = await Sandbox.create({ home, instance: inst });
  const r = await sb.exec(
    "git rev-parse HEAD && git log --oneline | wc -l && git status --porcelain && which python && " +
      "python -m pytest -q -p no:cacheprovider 2>&1 | tail -1",
  );
  const [head, commits, python, summary] = r.stdout.trim().split("\n");
  assert.equal(head, inst.base_commit);
  assert.ok(Number(commits) > 1, "history is there");
  assert.equal(python, "/opt/venv/bin/python");
  assert.match(summary!, /passed/);
  assert.equal((await sb.exec(["ls", "/testbed"])).exitCode, 0);
});

test("the root Sandbox.create takes an instance id and a dataset, or a directory (the README's API)", async () => {
  const inst = fx.instances[2]!;
  await using task = await Sandbox.create({ home, instance: inst.instance_id, dataset: fx.datasetPath });
  assert.ok(task instanceof Sandbox);
  assert.equal(task.labels["instance"], inst.instance_id);
  assert.equal((await task.exec("git rev-parse HEAD")).stdout.trim(), inst.base_commit);
  await using plain = await Sandbox.create({ home, dir: fx.repoPath, limits: { pids: 256 } });
  assert.ok(plain instanceof Sandbox);
  assert.equal(plain.labels["instance"], undefined);
  assert.equal((await plain.exec("test -f /testbed/setup.py && echo yes")).stdout, "yes\n");
  await assert.rejects(Sandbox.create({ home, instance: inst.instance_id }), /a dataset is needed/);
  await assert.rejects(Sandbox.create({ home, instance: "fixture__calc-99", dataset: fx.datasetPath }), NotFoundError);
});

test("the first import in a fresh sandbox uses the cached bytecode (no recompilation)", async () => {
  await using sb = await Sandbox.create({ home, instance: fx.instances[0]! });
  // python -v says "code object from '<...>.pyc'" when it uses a cache, "code object from <...>.py" when it compiles.
  const r = await sb.exec("python -v -c 'import calc, pytest' 2>&1 | grep 'code object from'");
  const lines = r.stdout.trim().split("\n");
  const compiled = lines.filter((l) => !/\.pyc'?$/.test(l));
  assert.ok(lines.length > 50, r.stdout.slice(0, 500));
  assert.deepEqual(compiled, []);
  const m = await sb.exec("python -v -c 'import calc' 2>&1 | grep -c matches");
  assert.ok(Number(m.stdout) > 0);
});

test("the first git command in a fresh sandbox trusts the index (no re-hash, no index rewrite)", async () => {
  await using sb = await Sandbox.create({ home, instance: fx.instances[0]! });
  // A racily clean index (as old as its files) would make git re-read every file and write a new index.
  const r = await sb.exec("stat -c %Y .git/index; git status --porcelain; git diff --stat; stat -c %Y .git/index");
  const [before, after] = r.stdout.trim().split("\n");
  assert.equal(before, String(GIT_INDEX_MTIME_SEC), r.stdout);
  assert.equal(after, before, "git rewrote the index: it did not trust its stat data");
});

test("nothing done inside a sandbox changes the store or the node cache", async () => {
  const inst = fx.instances[0]!;
  await using sb = await Sandbox.create({ home, instance: inst });
  const r = await sb.exec(
    "set -e; find /testbed /opt/venv -type f | head -2000 > /tmp/files; " +
      'while read f; do echo x >> "$f"; done < /tmp/files; ' +
      'head -100 /tmp/files | while read f; do : > "$f"; chmod 777 "$f"; done; ' +
      "echo overwritten > /testbed/calc/__init__.py; find /testbed /opt/venv -mindepth 1 -delete; " +
      "ls -A /testbed | wc -l",
  );
  assert.equal(r.stdout.trim(), "0", r.stderr);
  const report = await verifyStore(openStore(homeLayout(home).store));
  assert.equal(report.ok, true, JSON.stringify(report.corrupt.slice(0, 3)));
  // The cached layer is intact too: a new sandbox sees the original tree.
  await using fresh = await Sandbox.create({ home, instance: inst });
  assert.equal((await fresh.exec("git status --porcelain | wc -l")).stdout, "0\n");
});

test("16 simultaneous sandboxes on a cold environment materialize it exactly once", async () => {
  const { key } = envFor(fx.instances[2]!, {});
  const cache = nodeCacheFor(home);
  await cache.evict({ maxBytes: 0 });
  assert.equal(await cache.has(key), false);
  let materialized = 0;
  const onMat = (e: { key: string }): void => void (e.key === key && materialized++);
  cache.on("materialize", onMat);
  try {
    const boxes = await Promise.all(
      Array.from({ length: 16 }, () => Sandbox.create({ home, instance: fx.instances[2]! })),
    );
    const outs = await Promise.all(boxes.map((b) => b.exec(["git", "rev-parse", "HEAD"])));
    assert.ok(outs.every((o) => o.stdout.trim() === fx.instances[2]!.base_commit));
    await Promise.all(boxes.map((b) => b.close()));
  } finally {
    cache.off("materialize", onMat);
  }
  assert.equal(materialized, 1);
});

test("N environments of one repository cost little more than one in the store", async () => {
  const stats = await storeStats(openStore(homeLayout(home).store));
  const perLayer = stats.logicalBytes / 3;
  assert.ok(stats.storedBytes <= 1.5 * perLayer, `stored ${stats.storedBytes} for 3 layers of ~${perLayer}`);
});

test("exec --instance from the CLI; a missing environment is a clear error", async () => {
  const r = spawnSync(
    process.execPath,
    [
      CLI,
      "--home",
      home,
      "exec",
      "--instance",
      fx.instances[0]!.instance_id,
      "--dataset",
      fx.datasetPath,
      "--",
      "git",
      "rev-parse",
      "HEAD",
    ],
    { encoding: "utf8" },
  );
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), fx.instances[0]!.base_commit);
  const other = tempHome();
  const m = spawnSync(
    process.execPath,
    [
      CLI,
      "--home",
      other,
      "exec",
      "--instance",
      fx.instances[0]!.instance_id,
      "--dataset",
      fx.datasetPath,
      "--",
      "true",
    ],
    { encoding: "utf8" },
  );
  assert.notEqual(m.status, 0);
  assert.match(m.stderr, /is not built: run `minisandbox prepare` first/);
  const u = spawnSync(
    process.execPath,
    [CLI, "--home", home, "exec", "--instance", "nope__nope-1", "--dataset", fx.datasetPath, "--", "true"],
    { encoding: "utf8" },
  );
  assert.match(u.stderr, /nope__nope-1/);
});

test("a failing build names the failing step and shows the tail of its log", async () => {
  const data = JSON.parse(JSON.stringify(fx.instances[0]!)) as Record<string, unknown>;
  data["instance_id"] = "fixture__calc-broken";
  data["spec"] = {
    ...(data["spec"] as object),
    install: "python -c 'import sys; print(\"boom-marker\"); sys.exit(3)'",
  };
  const file = join(tempDir(), "broken.json");
  writeFileSync(file, JSON.stringify([data]));
  const [inst] = await loadDataset(file);
  const [r] = await prepareInstances([inst!], { home, reposDir: fx.reposDir });
  assert.equal(r!.status, "failed");
  assert.match(r!.error!, /build failed at step "install 2/);
  assert.match(r!.error!, /boom-marker/);
  const py = JSON.parse(JSON.stringify(data)) as Record<string, unknown>;
  py["spec"] = { ...(py["spec"] as object), python: "3.1" };
  writeFileSync(file, JSON.stringify([py]));
  const [r2] = await prepareInstances(await loadDataset(file), { home, reposDir: fx.reposDir });
  assert.match(r2!.error!, /3\.1/);
  assert.match(r2!.error!, /3\.11/, "names what is installed");
});

test("SWE-smith tasks share one environment and start with their bug applied and committed", async () => {
  const ss = await makeSweSmithDataset(tempDir("msb-ss-"), { tasks: 2 });
  const instances = await loadDataset(ss.datasetPath);
  const results = await prepareInstances(instances, { home, reposDir: ss.reposDir });
  assert.equal(new Set(results.map((r) => r.key)).size, 1);
  await using sb = await Sandbox.create({ home, instance: instances[0]! });
  await sb.files.write("/tmp/fix.diff", instances[0]!.patch);
  // The dataset's patch is the fix: it applies to the buggy testbed.
  const r = await sb.exec("git status --porcelain | wc -l; git rev-list --count HEAD; git apply --check /tmp/fix.diff");
  assert.equal(r.exitCode, 0, r.stderr);
  const [dirty, commits] = r.stdout.trim().split("\n");
  assert.equal(dirty, "0");
  assert.equal(commits, "1", "the bug is the testbed's only commit (details in testbed-history)");
});

test("a store on shared storage serves as a remote: another node pulls the layer and runs it", async () => {
  const node2 = tempHome("msb-node2-");
  writeFileSync(
    join(node2, "config.json"),
    JSON.stringify({ cache: { remotes: [homeLayout(home).store], maxConcurrent: 1 } }),
  );
  await using sb = await Sandbox.create({ home: node2, instance: fx.instances[0]! });
  assert.equal((await sb.exec(["git", "rev-parse", "HEAD"])).stdout.trim(), fx.instances[0]!.base_commit);
  const stats = await storeStats(openStore(homeLayout(node2).store));
  assert.equal(stats.layers, 1);
});

test("ensurePresent: an environment is present here, else fetched, else built, else a clear error", async () => {
  const env = envFor(fx.instances[1]!, {});
  assert.equal(await ensurePresent(env, { home }), "present");
  const fresh = tempHome("msb-present-");
  await assert.rejects(
    ensurePresent(env, { home: fresh }),
    (e) => e instanceof NotFoundError && /is not built/.test(e.message),
  );
  await assert.rejects(ensurePresent({ key: env.key }, { home: fresh, build: true }), /unknown environment/);
  assert.equal(await ensurePresent(env, { home: fresh, build: true, reposDir: fx.reposDir }), "built");
  assert.equal(await ensurePresent(env, { home: fresh, build: true }), "present");
  const node = tempHome("msb-present-remote-");
  writeFileSync(join(node, "config.json"), JSON.stringify({ cache: { remotes: [homeLayout(fresh).store] } }));
  assert.equal(await ensurePresent({ key: env.key }, { home: node }), "fetched", "from the configured remote store");
});

test("one door: a workspace starts and sets up sandboxes, and gives its environment back after the last", async () => {
  const ws = await resolveWorkspace({ home, instance: fx.instances[0]! });
  assert.equal(ws.kind, "instance");
  const a = await ws.start({ labels: { run: "a" }, env: { X: "1" } });
  const b = await ws.start();
  assert.equal(a.labels["instance"], fx.instances[0]!.instance_id);
  assert.equal(a.labels["run"], "a");
  assert.equal((await a.exec("echo $X $VIRTUAL_ENV")).stdout, "1 /opt/venv\n", "the caller's env over the layer's");
  await a.close();
  assert.equal(ws.isReleased, false, "another sandbox still holds it");
  await b.close();
  assert.equal(ws.isReleased, true);
  await assert.rejects(ws.start(), /after it was released/);

  let seen: Sandbox | undefined;
  let released = 0;
  const failing = new Workspace({
    kind: "dir",
    options: { home, dir: fx.repoPath },
    setup: async (sb) => {
      seen = sb;
      throw new Error("setup boom");
    },
    release: () => void released++,
  });
  await assert.rejects(failing.start(), /setup boom/);
  assert.equal(seen?.isClosed, true, "a sandbox whose setup failed is closed");
  assert.equal(released, 1, "and its workspace given back");
  const unused = new Workspace({ kind: "empty", options: { home }, release: () => void released++ });
  unused.release();
  unused.release();
  assert.equal(released, 2, "a workspace never started is given back once");
});

test("one rule for python: first on PATH for a directory or an empty sandbox, refused for an environment", async () => {
  await using plain = await Sandbox.create({ home, dir: fx.repoPath, python: "3.11", pathPrepend: ["/opt/own"] });
  const r = await plain.exec("python --version && pip --version && echo $PATH");
  const [version, pip, path] = r.stdout.trim().split("\n");
  assert.match(version!, /^Python 3\.11\./);
  assert.match(pip!, /\(python 3\.11\)/);
  assert.match(path!, /^[^:]*toolchains\/bin\/3\.11[^:]*:\/opt\/own:/, "python first, then the caller's own entries");
  const refused = /python is for a sandbox on a directory or an empty one/;
  const task = { home, instance: fx.instances[0]!, python: "3.11" };
  await assert.rejects(Sandbox.create(task), (e) => e instanceof InvalidInputError && refused.test(e.message));
  await assert.rejects(Sandbox.create({ home, envKey: envFor(fx.instances[0]!, {}).key, python: "3.11" }), refused);
  const cli = spawnSync(
    process.execPath,
    [CLI, "--home", home, "exec", "--instance", fx.instances[0]!.instance_id, "--dataset", fx.datasetPath].concat([
      "--python",
      "3.11",
      "--",
      "true",
    ]),
    { encoding: "utf8" },
  );
  assert.equal(cli.status, 2, cli.stderr);
  assert.match(cli.stderr, refused);
  assert.equal(cli.stderr.trim().split("\n").length, 1);
  await assert.rejects(Sandbox.create({ home, dir: fx.repoPath, instance: fx.instances[0]! }), /at most one of/);
  await assert.rejects(Sandbox.create({ home, image: "docker.io/library/python:3.11" }), /is not in the store/);
});
