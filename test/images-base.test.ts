/**
 * `--base IMAGE` on the command line: every instance's spec-built environment on that image's root, as the spec field
 * `base` does (test/images-jobs.test.ts). The fixture's base image (src/fixtures/images.ts: a Debian root from
 * debootstrap, built by podman) is served by a registry on 127.0.0.1; `prepare --base` pulls it and builds on it (the
 * build fails if it sees the host's /usr), under the key the spec field gives, never the host's; `exec`, `evaluate`
 * and `serve` with `--base` find that environment and run on the image's root. A malformed reference is one line and
 * exit 2 for every command; an image missing from the registry or the store fails as the spec field's does.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildLogPath } from "../src/env/build.js";
import { envFor, readEnvRecord } from "../src/env/environments.js";
import { getImage } from "../src/env/images/index.js";
import { openStore } from "../src/env/store/index.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { fixtureImages } from "../src/fixtures/images.js";
import { homeLayout } from "../src/util/home.js";
import { CLI, tempDir } from "./helpers.js";
import { TestRegistry } from "./oci.js";
import { call, startServe } from "./serve-process.js";

const dir = tempDir("msb-img-base-");
const home = join(dir, "home");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
const registry = await TestRegistry.start(join(dir, "registry"));
const base = set.images.find((i) => i.kind === "base")!;
const ref = `${registry.host}/${base.name}`;
execFileSync("skopeo", [
  "copy",
  "--quiet",
  "--dest-tls-verify=false",
  `oci:${set.layout}:${base.name}`,
  `docker://${ref}`,
]);
const absent = `${registry.host}/msb-fixture/absent:1`;
const ds = await makeFixtureDataset(join(dir, "ds"), { instances: 1 });
// The build itself fails if it runs on the host's /usr (podman is the host's, not the image's).
const row = ds.instances[0]!;
const task = { ...row, spec: { ...row.spec, pre_install: ["! command -v podman"] } };
const dataset = join(dir, "dataset.json");
writeFileSync(dataset, JSON.stringify([task]));

/** A `--specs` file giving every instance `base` (the spec field `--base` stands for). */
function specsWithBase(image: string): string {
  const file = join(dir, `specs-${image.replace(/[^a-z0-9]/g, "_")}.json`);
  writeFileSync(file, JSON.stringify({ "*": { base: image } }));
  return file;
}

function cli(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const { status, stdout, stderr } = spawnSync(process.execPath, [CLI, "--home", home, ...args], { encoding: "utf8" });
  return { status, stdout, stderr };
}

function prepareJson(args: string[]): { status: number | null; row: Record<string, string>; stderr: string } {
  const r = cli(["prepare", "--dataset", dataset, "--repos", ds.reposDir, "--json", ...args]);
  return { status: r.status, row: JSON.parse(r.stdout).results[0], stderr: r.stderr };
}

test("prepare --base pulls the image and builds on its root, under the spec field's key, not the host's", async () => {
  const built = prepareJson(["--base", ref]);
  assert.equal(built.status, 0, built.stderr);
  assert.equal(built.row.status, "built", built.row.error);
  const key = built.row.key!;
  assert.equal(key, envFor(task, { base: ref }).key);
  assert.equal(key, envFor(task, { specsFile: specsWithBase(ref) }).key, "the same key as the spec field's");
  assert.notEqual(key, envFor(task, {}).key, "never the key of the environment built on the host");
  assert.equal(envFor(task, { specsFile: specsWithBase("debian:12"), base: ref }).spec.base, ref, "after the file's *");
  // Below what is more specific: a repository's base, or a row's (null: the host), wins for its rows.
  const repoBase = join(dir, "repo-base.json");
  writeFileSync(repoBase, JSON.stringify({ [task.repo]: { "*": { base: "debian:12" } } }));
  const byRepo = envFor(task, { specsFile: repoBase, base: ref }).spec.base;
  assert.equal(byRepo, "docker.io/library/debian:12");
  const onHost = { ...task, spec: { ...task.spec, base: null } };
  assert.equal(envFor(onHost, { base: ref }).key, envFor(task, {}).key);
  assert.equal(readEnvRecord(home, key)?.spec.base, ref);
  assert.match(readFileSync(buildLogPath(home, key), "utf8"), /## base image\n[\s\S]*&& ! command -v podman\n/);
  assert.ok((await getImage(openStore(homeLayout(home).store), ref)).rootfs, "pulled into the store");
  const again = prepareJson(["--specs", specsWithBase(ref)]);
  assert.deepEqual([again.row.status, again.row.key], ["cached", key], "the spec field names the same environment");
});

test("exec, evaluate and serve with --base find that environment and run on the image's root", async () => {
  const id = task.instance_id;
  const probe = "command -v podman || echo no-podman; python -c 'import sys; print(sys.prefix)'";
  const exec = cli(["exec", "--instance", id, "--dataset", dataset, "--base", ref, "--", "sh", "-c", probe]);
  assert.deepEqual([exec.status, exec.stdout], [0, "no-podman\n/opt/venv\n"], exec.stderr);
  const onHost = cli(["exec", "--instance", id, "--dataset", dataset, "--", "true"]);
  assert.equal(onHost.status, 2, "without --base: the host's environment, never built");
  assert.match(onHost.stderr, /is not built: run `minisandbox prepare` first/);
  const reportDir = join(dir, "reports");
  const args = ["--dataset", dataset, "--predictions", "gold", "--run-id", "b", "--report-dir", reportDir];
  const ev = cli(["evaluate", ...args, "--base", ref, "--no-build", "--json"]);
  assert.equal(ev.status, 0, ev.stderr);
  assert.deepEqual(JSON.parse(ev.stdout).summary.resolved_ids, [id]);
  const key = "tok";
  const server = await startServe(home, ["--auth-token", key, "--dataset", dataset, "--base", ref]);
  const made = await call(server.url, "POST", "/sandboxes", { key, body: { instance_id: id } });
  assert.equal(made.status, 201, made.text);
  assert.equal(made.json.meta.env_key, envFor(task, { base: ref }).key, "the environment prepare built");
  const r = await call(server.url, "POST", `/sandboxes/${made.json.id}/exec`, { key, body: { command: probe } });
  assert.equal(r.json.stdout, "no-podman\n/opt/venv\n", r.text);
  assert.equal(await server.stop(), 0);
});

test("a malformed --base is one line and exit 2, whichever command is given it", () => {
  const bad = ["--base", "Not/A Ref"];
  const forDataset = ["--dataset", dataset];
  for (const args of [
    ["prepare", ...forDataset, ...bad],
    ["prepare", ...forDataset, "--plan", ...bad],
    ["evaluate", ...forDataset, "--predictions", "gold", ...bad],
    ["exec", "--instance", task.instance_id, ...forDataset, ...bad, "--", "true"],
    ["shell", "--instance", task.instance_id, ...forDataset, ...bad],
    ["serve", "--port", "0", ...forDataset, ...bad],
  ]) {
    const r = cli(args);
    assert.equal(r.status, 2, `${args[0]}: ${r.stderr}`);
    assert.match(r.stderr, /^minisandbox: --base: invalid image reference "Not\/A Ref": [^\n]+\n$/, args[0]);
  }
  const noDataset = cli(["serve", "--port", "0", "--base", ref]);
  assert.equal(noDataset.status, 2);
  assert.match(noDataset.stderr, /^minisandbox: --base applies to the instances of --dataset/);
  const onDir = cli(["exec", "--dir", dir, "--base", ref, "--", "true"]);
  assert.equal(onDir.status, 2);
  assert.match(
    onDir.stderr,
    /^minisandbox: a base image \(base, --base\) is for the environments of dataset instances/,
  );
});

test("a base image the registry lacks, or the store no longer has, fails as the spec field's does", () => {
  const flag = prepareJson(["--base", absent]);
  const field = prepareJson(["--specs", specsWithBase(absent)]);
  assert.deepEqual([flag.status, flag.row.status], [1, "failed"], flag.stderr);
  assert.match(flag.row.error!, /msb-fixture\/absent/);
  assert.deepEqual(flag.row, { ...field.row, durationMs: flag.row.durationMs }, "the same failure, word for word");
  // The environment stays built, its base forgotten: a sandbox on it says which image to pull.
  const rm = cli(["images", "rm", ref]);
  assert.equal(rm.status, 0, rm.stderr);
  const probe = ["exec", "--instance", task.instance_id, "--dataset", dataset];
  const byFlag = cli([...probe, "--base", ref, "--", "true"]);
  const byField = cli([...probe, "--specs", specsWithBase(ref), "--", "true"]);
  assert.equal(byFlag.status, 2, byFlag.stderr);
  assert.match(byFlag.stderr, /is not in the store; run: minisandbox images pull/);
  assert.deepEqual(byFlag, byField, "the same error as the spec field's");
});
