/**
 * The fleet on a real multi-node Ray cluster simulated on this host (ray.cluster_utils: three raylets), inside a
 * network namespace of its own with only lo up and a pid namespace that takes every process with it when the test
 * ends, however it ends. Each node runs a real `minisandbox serve` with its own home; the environments are the
 * fixture's 20 (one repository version), built once per machine and reused; the references are single-node runs of
 * `minisandbox evaluate` on the same inputs. The checks themselves run in Python (test/fleet/checks.py) and report
 * one JSON line each, turned into one subtest each here.
 */
process.env.PIP_RETRIES ??= "0";

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeFixtureDataset, type FixtureDataset } from "../src/fixtures/generate.js";
import { envFor } from "../src/env/environments.js";
import { fixtureImages } from "../src/fixtures/images.js";
import { openStore, pullLayer } from "../src/env/store/index.js";
import { run } from "../src/util/run.js";
import { cachedFixtureStore, cachedVenv, CLI, tempDir } from "./helpers.js";
import { runCli } from "./serve-process.js";

const REPO = join(import.meta.dirname, "..", "..");
const CHECKS = join(REPO, "test", "fleet", "checks.py");
const PYTHON_PACKAGE = join(REPO, "integrations", "python");
/** Environments n0 starts with; the fleet's prepare builds the others. */
const SEEDED = 17;
const BAD_PATCH =
  "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1 +1 @@\n-absent\n+x\n";

let skip: string | undefined;
let python = "";
let fx: FixtureDataset;
const work = tempDir("msb-fleet-");
// Ray's socket paths live under the cluster's directory and must stay short (AF_UNIX: 107 bytes).
const base = mkdtempSync(join(tmpdir().length <= 20 ? tmpdir() : "/tmp", "msbf-"));
let child: ChildProcess | undefined;

after(() => {
  child?.kill("SIGKILL"); // unshare ignores SIGTERM while it waits; SIGKILL takes the whole pid namespace down
  rmSync(base, { recursive: true, force: true });
});

/** A home whose store holds these layers, copied from `from` (objects verified on the way). */
async function seedHome(home: string, from: string, keys: string[]): Promise<void> {
  const store = openStore(join(home, "store"));
  for (const key of keys) await pullLayer(store, from, key);
}

/**
 * Rows on a SWE-bench-style instance image (the fixture images'; three rows of its instance, so that one is placed
 * on a node lacking the image while the holder's slots are taken), which n0 imports during the checks; the other
 * nodes' registry is blocked: they can only take it from n0.
 */
async function imageRows(): Promise<Record<string, string>> {
  const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
  const ds = await makeFixtureDataset(join(work, "img-ds"), { instances: 2 });
  const row = ds.instances[0]!;
  const image = set.images.find((i) => i.kind === "instance" && i.instanceId === row.instance_id)!;
  const ref = `registry.example/fixture/${image.name.replace(/^msb-fixture\//, "")}`;
  const rows = ["", "0", "00"].map((s) => ({ ...row, instance_id: `${row.instance_id}${s}`, image_name: ref }));
  const dataset = join(work, "image-rows.json");
  writeFileSync(dataset, JSON.stringify(rows));
  for (const node of ["n1", "n2"]) {
    mkdirSync(join(base, node, "home"), { recursive: true });
    writeFileSync(join(base, node, "home", "registries.json"), JSON.stringify({ blocked: ["registry.example"] }));
  }
  return { image_layout: set.layout, image_name: image.name, image_ref: ref, image_dataset: dataset };
}

async function why(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return "needs root (network and pid namespaces of its own)";
  for (const tool of ["unshare", "ip"]) {
    if ((await run("sh", ["-c", `command -v ${tool}`])).code !== 0) return `${tool} is not installed`;
  }
  try {
    const venv = await cachedVenv("ray", ["ray"]);
    python = join(venv, "bin", "python");
  } catch (e) {
    return `Ray cannot be installed here (pip install ray failed: ${(e as Error).message.split("\n")[0]})`;
  }
  return undefined;
}

before(async () => {
  skip = await why();
  if (skip) {
    process.stderr.write(`\nSKIPPING the fleet tests: ${skip}\n\n`);
    return;
  }
  fx = await makeFixtureDataset(join(work, "fx"), { instances: 20 });
  const store = await cachedFixtureStore(fx);
  const keys = fx.instances.map((i) => envFor(i, {}).key);
  const refHome = join(work, "ref-home");
  await seedHome(refHome, store, keys);
  await seedHome(join(base, "n0", "home"), store, keys.slice(0, SEEDED));
  const ids = fx.instances.map((i) => i.instance_id);
  const onImage = await imageRows();
  const mixed = join(work, "mixed.json");
  writeFileSync(
    mixed,
    JSON.stringify(
      fx.instances.map((inst, i) => ({
        instance_id: inst.instance_id,
        model_name_or_path: "mixed/model",
        model_patch: i < 4 ? inst.patch : i < 18 ? BAD_PATCH : "",
      })),
    ),
  );
  const refDir = join(work, "ref");
  for (const [runId, predictions] of [
    ["ref-gold", "gold"],
    ["ref-mixed", mixed],
  ] as const) {
    const r = await runCli(refHome, [
      "evaluate",
      ...["--dataset", fx.datasetPath, "--predictions", predictions, "--run-id", runId, "--report-dir", refDir],
      ...["--workers", "2"],
    ]);
    assert.equal(r.code, 0, r.stderr);
  }
  writeFileSync(
    join(base, "checks.json"),
    JSON.stringify({
      base,
      cli: [process.execPath, CLI],
      repos: fx.reposDir,
      dataset: fx.datasetPath,
      mixed,
      seeded: SEEDED,
      ref_dir: refDir,
      ref_gold_summary: join(refDir, "gold.ref-gold.json"),
      ref_mixed_summary: join(refDir, "mixed__model.ref-mixed.json"),
      out_dir: join(work, "fleet"),
      subset: [ids[0], ids[1], ids[4], ids[5], ids[6], ids[7], ids[8], ids[19]],
      ...onImage,
    }),
  );
});

test("a minisandbox fleet on a 3-node Ray cluster", { timeout: 900_000 }, async (t) => {
  if (skip) {
    t.skip(skip);
    return;
  }
  // sh stays pid 1 of the namespace and reaps orphans (an exec'd Python would keep them as zombies).
  child = spawn(
    "unshare",
    [
      ...["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--"],
      ...["sh", "-c", 'ip link set lo up && "$@"', "sh", python, CHECKS, join(base, "checks.json")],
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        TMPDIR: base,
        PYTHONPATH: PYTHON_PACKAGE,
        PYTHONDONTWRITEBYTECODE: "1",
        PIP_RETRIES: "0",
        NO_PROXY: "*",
      },
    },
  );
  let err = "";
  child.stderr!.on("data", (d: Buffer) => {
    err = (err + d.toString()).slice(-20_000);
  });
  const checks: { check: string; ok: boolean }[] = [];
  const notes: string[] = [];
  let buf = "";
  child.stdout!.on("data", (d: Buffer) => {
    buf += d.toString();
    for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.startsWith('{"check"')) checks.push(JSON.parse(line) as { check: string; ok: boolean });
      else if (line.startsWith('{"note"')) notes.push(line);
    }
  });
  const code = await new Promise<number | null>((r) => child!.once("exit", (c) => r(c)));
  for (const c of checks)
    await t.test(c.check, (s) => {
      s.diagnostic(JSON.stringify(c)); // the figures behind each check (times, placements, fetches)
      assert.equal(c.ok, true, JSON.stringify(c));
    });
  // Ray's own noise (a killed raylet's last log lines) is left out of the failure message.
  const tail = err
    .split("\n")
    .filter((l) => !/network_util\.cc|Raylet is terminated|^\s*$/.test(l))
    .slice(-60)
    .join("\n");
  assert.equal(code, 0, `checks ended with ${code}\n${notes.join("\n")}\n${tail}`);
  assert.ok(
    checks.some((c) => c.check === "done"),
    "every check ran",
  );
});

test("with no Ray cluster to join, the fleet's commands say so in one line and exit 1", async (t) => {
  if (skip) return t.skip(skip);
  // Namespaces of its own: Ray's "auto" finds any cluster's processes on this machine (another test's, say).
  const empty = tempDir("msb-noray-");
  const env = { ...process.env, PYTHONPATH: PYTHON_PACKAGE, RAY_TMPDIR: empty, RAY_ADDRESS: "" };
  const alone = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--", python, "-m", "minisandbox.fleet"];
  for (const args of [["status"], ["prepare", "--dataset", "x.json"], ["status", "--address", "127.0.0.1:1"]]) {
    const r = await run("unshare", [...alone, ...args], { env, timeoutMs: 60_000 });
    assert.equal(r.code, 1, r.stderr);
    const where = args.includes("--address")
      ? "at 127.0.0.1:1"
      : "on this machine (--address auto, $RAY_ADDRESS unset)";
    assert.ok(r.stderr.startsWith(`minisandbox fleet: no running Ray cluster ${where}: `), r.stderr);
    assert.match(r.stderr, /; start one with ray start --head .*, or give --address HOST:6379\n$/);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
});

test("placement by environment, as pure Python; the package imports without Ray", async () => {
  const code = `
import sys
import minisandbox, minisandbox.fleet
assert "ray" not in sys.modules, "importing minisandbox (or minisandbox.fleet) must not import Ray"
from minisandbox.fleet import Placement, NodeState
p = Placement()
for name, layers in (("a", {"k1": "d1"}), ("b", {}), ("c", {"k1": "d1c"})):
    p.add(NodeState(name, name, "http://" + name, "t-" + name, 2, layers=dict(layers)))
assert p.choose("k1") == (p.nodes["a"], True)          # warm, least loaded, then by name
assert p.choose("k1") == (p.nodes["c"], True)          # the other warm node
assert p.choose("k2") == (p.nodes["b"], False)         # nobody holds k2: the least loaded node
assert p.choose("k2") == (p.nodes["b"], True)          # ... and the next one follows the incoming layer
assert [s["url"] for s in p.sources("k1", exclude="a")] == ["http://c"]
assert p.sources("k1", exclude="b")[0]["manifest_sha256"] in ("d1", "d1c")
p.nodes["c"].usable = False                            # suspected: neither placed on nor fetched from
assert [s["url"] for s in p.sources("k1", exclude="b")] == ["http://a"]
assert p.choose("k1") == (p.nodes["a"], True)
assert p.choose("k3") is None                          # every usable node full
p.done("b", "k2", ok=True, digest="d2")
assert p.nodes["b"].layers["k2"] == "d2" and p.nodes["b"].running == 1
assert "t-a" not in repr(p.nodes["a"]), "a node's repr never shows its token"
print("OK")
`;
  const r = await run("python3", ["-c", code], {
    env: { PATH: process.env.PATH, PYTHONPATH: PYTHON_PACKAGE, PYTHONDONTWRITEBYTECODE: "1" },
  });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /OK\n$/);
});
