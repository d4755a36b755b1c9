/**
 * Rows on images beyond one sandbox: dataset rows naming a SWE-bench-style instance image (imported into the store;
 * no environment is built from the spec here, and none may be) run their rollout groups, fresh rewards and gold
 * pre-checks on the image's root filesystem, `serve --dataset --images ...` gives the rollout API the same policy,
 * `prepare --validate` checks rows on their image (gold passes, no patch fails), and a fleet's plans name each row's
 * image, which a node lists, makes present (or says why not) and evaluates on. A spec may name a base image: its
 * environment is built on that image's root, not the host's, and runs on it.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildLogPath } from "../src/env/build.js";
import { readEnvRecord, envFor } from "../src/env/environments.js";
import { getImage, importImage } from "../src/env/images/index.js";
import { prepareInstances } from "../src/env/prepare.js";
import { makePresent, type MadePresent } from "../src/env/present.js";
import { openSandbox } from "../src/env/workspace.js";
import { runInstanceEvaluation } from "../src/eval/runner/instance.js";
import { openStore } from "../src/env/store/index.js";
import { NotFoundError } from "../src/errors.js";
import { fixtureImages } from "../src/fixtures/images.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { asTaskInstance } from "../src/tasks/index.js";
import { RolloutEngine } from "../src/index.js";
import { homeLayout } from "../src/util/home.js";
import { CLI, processesMatching, scratchDirs, tempDir } from "./helpers.js";
import { call, startServe } from "./serve-process.js";

const dir = tempDir("msb-img-rollout-");
const home = join(dir, "home");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
const ds = await makeFixtureDataset(join(dir, "ds"), { instances: 2 });
const inst = ds.instances[0]!;
const image = set.images.find((i) => i.kind === "instance" && i.instanceId === inst.instance_id)!;
const ref = `registry.example/fixture/${inst.instance_id.toLowerCase().replace(/__/g, "-")}:1`;
const store = openStore(homeLayout(home).store);
await importImage(store, set.layout, { name: image.name, tags: [ref] });
const rootfs = (await getImage(store, ref)).rootfs;
// The row names its image, as SWE-smith and SWE-Gym rows do; the other row names none.
const datasetPath = join(dir, "dataset.json");
writeFileSync(datasetPath, JSON.stringify([{ ...inst, image_name: ref }, ...ds.instances.slice(1)]));
const engine = new RolloutEngine({ home, dataset: datasetPath, rewardTimeoutMs: 300_000 });

after(async () => {
  await engine.close();
  assert.deepEqual(processesMatching(home), [], "no process outlives the engine");
  assert.deepEqual(scratchDirs(home), [], "no sandbox directory outlives the engine");
});

test("a group on the row's image: its root, the fresh reward and the gold check graded on the image", async (t) => {
  const verdict = await engine.goldCheck(inst.instance_id);
  assert.equal(verdict.passed, true, JSON.stringify(verdict));
  assert.equal(verdict.envKey, rootfs, "verdicts go by the image's root filesystem");
  const group = await engine.startGroup({ instance: inst.instance_id, n: 2 });
  t.after(() => group.close());
  assert.equal(group.envKey, rootfs);
  const [solver, idle] = group.rollouts;
  const probe = await solver!.exec("command -v podman || echo no-podman; git -C /testbed rev-parse HEAD; echo $PATH");
  const [podman, head, path] = probe.stdout.trim().split("\n");
  assert.equal(podman, "no-podman", "the image's /usr, not the host's");
  assert.equal(head, inst.base_commit);
  assert.match(path!, /^\/opt\/venv\/bin:/, "the image's Env");
  assert.equal((await solver!.exec("git apply -", { stdin: inst.patch })).exitCode, 0);
  const solved = await solver!.reward();
  assert.deepEqual([solved.status, solved.reward, solved.reason], ["scored", 1, "graded"], JSON.stringify(solved));
  const none = await idle!.reward();
  assert.deepEqual([none.status, none.reward], ["scored", 0], JSON.stringify(none));
});

test("prewarm holds the image's root; a policy without images wants the built environment", async () => {
  const report = await engine.prewarm([inst.instance_id]);
  assert.equal(report.tasks[0]!.envKey, rootfs, JSON.stringify(report));
  assert.equal(report.tasks[0]!.error, undefined);
  const built = new RolloutEngine({ home, dataset: datasetPath, images: { kind: "none" } });
  try {
    await assert.rejects(built.startGroup({ instance: inst.instance_id, n: 1 }), NotFoundError);
  } finally {
    await built.close();
  }
});

test("serve --dataset: the rollout API runs rows on their images, under the server's --images policy", async () => {
  const key = "tok";
  const auto = await startServe(home, ["--auth-token", key, "--dataset", datasetPath]);
  const made = await call(auto.url, "POST", "/rollouts/groups", { key, body: { instance_id: inst.instance_id, n: 1 } });
  assert.equal(made.status, 201, JSON.stringify(made.json));
  assert.equal(made.json.env_key, rootfs);
  const rid = made.json.rollouts[0].id as string;
  const x = await call(auto.url, "POST", `/rollouts/${rid}/exec`, { key, body: { command: "command -v podman" } });
  assert.notEqual(x.json.exit_code, 0, "no host /usr in the rollout");
  await call(auto.url, "DELETE", `/rollouts/groups/${made.json.id}`, { key });
  await auto.stop();
  const template = "registry.example/absent/{instance_id}:1";
  const absent = await startServe(home, ["--auth-token", key, "--dataset", datasetPath, "--image-template", template]);
  const refused = await call(absent.url, "POST", "/rollouts/groups", {
    key,
    body: { instance_id: inst.instance_id, n: 1 },
  });
  assert.equal(refused.status, 404, refused.text);
  assert.match(refused.text, /registry\.example\/absent\/.* is not in the store; run: minisandbox images/);
});

test("prepare --validate checks rows on their image: gold passes, no patch fails; a wrong row is invalid", () => {
  // A second row on the same image whose FAIL_TO_PASS lists a test that passes at the base commit.
  const moved = inst.PASS_TO_PASS[0]!;
  const wrong = {
    ...inst,
    instance_id: `${inst.instance_id}-wrong`,
    image_name: ref,
    FAIL_TO_PASS: [...inst.FAIL_TO_PASS, moved],
    PASS_TO_PASS: inst.PASS_TO_PASS.slice(1),
  };
  const rows = join(dir, "validate.json");
  writeFileSync(rows, JSON.stringify([{ ...inst, image_name: ref }, wrong]));
  const r = spawnSync(process.execPath, [CLI, "--home", home, "prepare", "--dataset", rows, "--validate", "--json"], {
    encoding: "utf8",
  });
  const out = JSON.parse(r.stdout) as {
    results: { status: string; image?: string }[];
    validation: { valid: string[]; invalid: { instanceId: string; problems: string[] }[]; results: unknown[] };
  };
  assert.deepEqual(
    out.results.map((x) => [x.status, x.image]),
    [
      ["cached", ref],
      ["cached", ref],
    ],
    r.stderr,
  );
  assert.deepEqual(out.validation.valid, [inst.instance_id], JSON.stringify(out.validation.results));
  assert.deepEqual(out.validation.invalid, [
    {
      instanceId: wrong.instance_id,
      environment: rootfs,
      problems: [`FAIL_TO_PASS test ${moved} passes without the fix`],
    },
  ]);
  assert.equal(r.status, 0, r.stderr);
});

test("a SWE-bench Pro row's dockerhub_tag names its image; a tag that is not one is the row's one-line error", () => {
  const tag = "nodebb.nodebb-NodeBB__NodeBB-00c70ce7b0541cfc94afe567921d7668cdc8f4ac-vnan";
  const pro = { ...inst, instance_id: "instance_NodeBB__NodeBB-00c70ce7", dockerhub_tag: tag };
  const bad = { ...inst, instance_id: "instance_bad", dockerhub_tag: "../x:y" };
  const rows = join(dir, "pro.json");
  writeFileSync(rows, JSON.stringify([pro, bad]));
  const r = spawnSync(
    process.execPath,
    [CLI, "--home", home, "prepare", "--dataset", rows, "--plan", "--images", "row"],
    {
      encoding: "utf8",
    },
  );
  assert.equal(r.status, 0, r.stderr);
  const p = JSON.parse(r.stdout);
  assert.deepEqual(
    p.environments.map((e: { image?: string; instance_ids: string[] }) => [e.image, e.instance_ids]),
    [[`docker.io/jefzda/sweap-images:${tag}`, [pro.instance_id]]],
  );
  assert.deepEqual(
    p.errors.map((e: { instance_id: string; error: string }) => [e.instance_id, e.error]),
    [["instance_bad", 'instance instance_bad: dockerhub_tag "../x:y" is not a tag']],
  );
});

test("fleet plans name each row's image; a node lists it, makes it present and evaluates on it", async () => {
  const cli = (args: string[]) => spawnSync(process.execPath, [CLI, "--home", home, ...args], { encoding: "utf8" });
  const prep = cli(["prepare", "--dataset", datasetPath, "--plan", "--images", "row"]);
  assert.equal(prep.status, 0, prep.stderr);
  const p = JSON.parse(prep.stdout);
  assert.deepEqual(
    p.environments.map((e: { image?: string; instance_ids: string[] }) => [e.image, e.instance_ids]),
    [[ref, [inst.instance_id]]],
  );
  assert.match(
    p.errors[0].error,
    /names no image \(image_name, docker_image or dockerhub_tag\)/,
    "the row without one",
  );
  const ev = cli(["evaluate", "--dataset", datasetPath, "--predictions", "gold", "--plan", "--run-id", "p"]);
  assert.equal(ev.status, 0, ev.stderr);
  const jobs = JSON.parse(ev.stdout).jobs as { instance_id: string; image?: string }[];
  assert.deepEqual(
    jobs.map((j) => [j.instance_id, j.image]),
    [
      [inst.instance_id, ref],
      [ds.instances[1]!.instance_id, undefined],
    ],
    "auto: the row's own image, since this store has it",
  );
  writeFileSync(join(home, "registries.json"), JSON.stringify({ blocked: ["blocked.example"] }));
  const key = "tok";
  const node = await startServe(home, ["--auth-token", key]);
  const listing = await call(node.url, "GET", "/store/layers", { key });
  assert.deepEqual(
    listing.json.images.filter((i: { name: string }) => i.name === ref),
    [{ name: ref, rootfs }],
  );
  const instance = asTaskInstance({ ...inst, image_name: ref });
  const env = (image: string) => call(node.url, "POST", "/environments", { key, body: { instance, image } });
  const present = await env(ref);
  assert.deepEqual([present.json.status, present.json.env_key], ["present", rootfs], present.text);
  assert.ok(present.json.manifest_sha256, "a peer could check the root filesystem it fetches");
  const blocked = await env("blocked.example/x:1");
  assert.equal(blocked.json.status, "failed", blocked.text);
  assert.match(blocked.json.error, /^image blocked\.example\/x:1 could not be pulled: .*blocked/);
  // Without leave to make it: an image in the store is present, one that is not is the node's 404, never a pull.
  const kept = await call(node.url, "POST", "/environments", { key, body: { instance, image: ref, build: false } });
  assert.deepEqual([kept.json.status, kept.json.env_key], ["present", rootfs], kept.text);
  const absent = "registry.example/absent/x:1";
  const missing = await call(node.url, "POST", "/environments", {
    key,
    body: { instance, image: absent, build: false },
  });
  assert.equal(missing.status, 404, missing.text);
  assert.match(missing.text, /registry\.example\/absent\/x:1 is not in the store; run: minisandbox images pull/);
  const bad = await env("Not A Reference!");
  assert.equal(bad.status, 400, bad.text);
  assert.match(bad.json.detail ?? bad.text, /invalid image reference/);
  const graded = await call(node.url, "POST", "/evaluations", {
    key,
    body: { instance, image: ref, model_patch: inst.patch, model_name_or_path: "gold" },
  });
  assert.equal(graded.json.status, "resolved", graded.text);
  assert.equal(graded.json.layer, "present", "an image in the store is not pulled again");
  const job = (body: Record<string, unknown>) =>
    call(node.url, "POST", "/evaluations", {
      key,
      body: { instance, model_patch: inst.patch, model_name_or_path: "gold", ...body },
    });
  const unpulled = await job({ image: absent, build: false });
  assert.deepEqual([unpulled.json.error?.kind, unpulled.json.layer], ["Environment Missing", null], unpulled.text);
  const unpullable = await job({ image: "blocked.example/x:1" });
  assert.equal(unpullable.json.error?.kind, "Environment Build Failed", unpullable.text);
  assert.match(unpullable.json.error.message, /^image blocked\.example\/x:1 could not be pulled: .*blocked/);
  const log = Buffer.from(graded.json.files["run_instance.log"], "base64").toString();
  assert.match(log, new RegExp(`\\(image ${ref.replace(/[.]/g, "\\.")}`), "evaluated on the image");
});

test("a spec on a base image: built on the image's root, not the host's, and run and graded on it", async () => {
  const base = set.images.find((i) => i.kind === "base")!;
  const baseRef = "registry.example/fixture/base:1";
  await importImage(store, set.layout, { name: base.name, tags: [baseRef] });
  const specsFile = join(dir, "base-specs.json");
  writeFileSync(specsFile, JSON.stringify({ "*": { base: baseRef } }));
  // The build itself fails if it sees the host's /usr (podman is the host's, not the image's).
  const row = ds.instances[1]!;
  const task = { ...row, spec: { ...row.spec, pre_install: ["! command -v podman"] } };
  const [built] = await prepareInstances([task], { home, reposDir: ds.reposDir, specsFile, workers: 1 });
  assert.equal(built!.status, "built", built!.error);
  assert.notEqual(built!.key, envFor(task, {}).key, "a base image is part of the key");
  assert.equal(readEnvRecord(home, built!.key)?.spec.base, baseRef);
  assert.match(
    readFileSync(buildLogPath(home, built!.key), "utf8"),
    /## base image\n[\s\S]*\$ .* && ! command -v podman\n/,
  );
  {
    await using sb = await openSandbox({ home, instance: task, specsFile });
    const r = await sb.exec("command -v podman || echo no-podman; python -c 'import calc, sys; print(sys.prefix)'");
    assert.equal(r.exitCode, 0, r.stderr);
    assert.deepEqual(r.stdout.trim().split("\n"), ["no-podman", "/opt/venv"], "the base's /usr, the layer's venv");
  }
  const gold = await runInstanceEvaluation({ home, instance: task, patch: task.patch, specsFile });
  assert.equal(gold.status, "resolved", gold.log);
});

test("makePresent: what the store has is not pulled again; what it lacks is pulled, else one clear line", async () => {
  // A pull from blocked.example fails at once, without a network.
  writeFileSync(join(home, "registries.json"), JSON.stringify({ blocked: ["blocked.example"] }));
  assert.deepEqual(await makePresent({ image: ref }, { home, build: true }), { status: "present", key: rootfs });
  assert.deepEqual(await makePresent({ image: ref }, { home }), { status: "present", key: rootfs });
  await assert.rejects(
    makePresent({ image: "registry.example/absent/y:1" }, { home }),
    (e: Error) => e instanceof NotFoundError && /is not in the store; run: minisandbox images pull/.test(e.message),
  );
  const failure = (m: MadePresent): Extract<MadePresent, { status: "failed" }> => {
    assert.equal(m.status, "failed", JSON.stringify(m));
    return m as Extract<MadePresent, { status: "failed" }>;
  };
  const pull = failure(await makePresent({ image: "blocked.example/y:1" }, { home, build: true }));
  assert.deepEqual([pull.key, pull.failed], [null, "pull"]);
  assert.match(pull.error, /^image blocked\.example\/y:1 could not be pulled: .*blocked/);
  const row = ds.instances[1]!;
  const env = envFor({ ...row, spec: { ...row.spec, base: "blocked.example/base:1" } }, {});
  const base = failure(await makePresent({ env }, { home, build: true, reposDir: ds.reposDir }));
  assert.deepEqual([base.key, base.failed], [env.key, "pull"]);
  assert.match(base.error, /^base image blocked\.example\/base:1 could not be pulled: .*blocked/);
  await assert.rejects(makePresent({ env }, { home }), NotFoundError, "not built, and no leave to build it");
});
