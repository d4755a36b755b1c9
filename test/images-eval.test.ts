/**
 * Datasets on images: SWE-bench-style instance images (built by podman from a Debian root, src/fixtures/images.ts)
 * are served by a registry on 127.0.0.1 under the names SWE-bench's harness gives them, docker.io mirrored to it
 * (and never contacted). `prepare --images swebench` pulls them, `exec --instance --images swebench` runs on them,
 * and `evaluate --images swebench` grades gold predictions on them with the same report as on the environment built
 * from the spec and as the same eval script in `podman run` of the same images; without a patch too.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { envFor } from "../src/env/environments.js";
import { swebenchImage } from "../src/env/instance-image.js";
import { makeEvalScript } from "../src/eval/eval-script.js";
import { gradeInstance } from "../src/eval/grading.js";
import { runInstanceEvaluation } from "../src/eval/runner/instance.js";
import { evalSandboxSettings } from "../src/eval/runner/sandbox.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { fixtureImages, fixturePodmanEnv } from "../src/fixtures/images.js";
import { LoopbackRegistry } from "../src/fixtures/registry.js";
import type { Instance } from "../src/tasks/types.js";
import { CLI, tempDir } from "./helpers.js";

const dir = tempDir("msb-img-eval-");
const home = join(dir, "home");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
// The fixture is deterministic: the same options give the rows the images were built from.
const ds = await makeFixtureDataset(join(dir, "ds"), { instances: 2 });
const registry = await LoopbackRegistry.start(join(dir, "registry"));
after(() => registry.stop());
const images = new Map<string, string>(); // instance id -> the image's name in podman's storage
for (const image of set.images.filter((i) => i.kind === "instance")) {
  const harnessName = swebenchImage(image.instanceId!).replace("docker.io/", "");
  execFileSync("skopeo", [
    "copy",
    "--quiet",
    "--dest-tls-verify=false",
    `oci:${set.layout}:${image.name}`,
    `docker://${registry.host}/${harnessName}`,
  ]);
  images.set(image.instanceId!, `localhost/${image.name}`);
}
mkdirSync(home, { recursive: true });
writeFileSync(
  join(home, "registries.json"),
  JSON.stringify({ mirrors: { "docker.io": [registry.url] }, blocked: ["docker.io"] }),
);
const common = ["--dataset", ds.datasetPath, "--repos", ds.reposDir];
const forExec = ["--dataset", ds.datasetPath];

function cli(args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [CLI, "--home", home, ...args], { encoding: "utf8" });
}

/** Each instance's report.json of a run (`logs/run_evaluation/<run>/gold/<id>/report.json`). */
function reports(reportDir: string, runId: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const inst of ds.instances) {
    const file = join(reportDir, "logs", "run_evaluation", runId, "gold", inst.instance_id, "report.json");
    Object.assign(out, JSON.parse(readFileSync(file, "utf8")));
  }
  return out;
}

/** The eval script a run on the image writes (eval.sh), in `podman run` of the same image, graded the same way. */
async function podmanReport(inst: Instance, patch: string | null): Promise<unknown> {
  const env = envFor(inst, {});
  const settings = await evalSandboxSettings(home, env.spec);
  const evalScript = makeEvalScript({ instance: inst, spec: env.spec });
  const apply = patch === null ? "" : `git apply -v - <<'MSB_PATCH_EOF'\n${patch}\nMSB_PATCH_EOF\n`;
  const args = ["run", "--rm", "-i", "--network", "none", "--workdir", "/testbed"];
  for (const b of settings.binds) args.push("-v", `${b.source}:${b.target}:ro`);
  for (const [k, v] of Object.entries(settings.env)) args.push("-e", `${k}=${v}`);
  const writeEval = `cat > /tmp/eval.sh <<'MSB_EVAL_EOF'\n${evalScript}MSB_EVAL_EOF\n`;
  const r = spawnSync("podman", [...args, images.get(inst.instance_id)!, "/bin/bash", "-s"], {
    // One stream, as the sandbox's merged output: set -x writes the markers to stderr, the tests to stdout.
    input: `exec 2>&1\ncd /testbed\n${apply}${writeEval}bash /tmp/eval.sh\n`,
    encoding: "utf8",
    env: { ...process.env, ...fixturePodmanEnv() },
  });
  assert.equal(r.error, undefined);
  const modelPatch = patch === null ? "" : patch;
  return gradeInstance({ instance: inst, modelPatch, testOutput: r.stdout, includeTestsStatus: true }).report;
}

test("bad image flags: one line, cause first, exit 2; nothing is pulled or built", () => {
  for (const [args, message] of [
    [["--images", "podman"], /--images podman: expected one of auto, row, swebench, none/],
    [["--image-template", "ghcr.io/x/env"], /--image-template ghcr\.io\/x\/env: it must contain \{instance_id\}/],
    [["--images", "row", "--image-template", "a/{instance_id}"], /--image-template goes without --images/],
  ] as const) {
    for (const command of ["prepare", "evaluate"]) {
      const extra = command === "evaluate" ? ["--predictions", "gold"] : [];
      const r = cli([command, ...common, ...extra, ...args]);
      assert.equal(r.status, 2, `${command} ${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, message);
      assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    }
  }
  const row = cli(["exec", ...forExec, "--instance", ds.instances[0]!.instance_id, "--images", "row", "--", "true"]);
  assert.equal(row.status, 2, row.stderr);
  assert.match(row.stderr, /names no image \(image_name, docker_image or dockerhub_tag\)/);
  const dirImages = cli(["exec", "--dir", dir, "--images", "swebench", "--", "true"]);
  assert.equal(dirImages.status, 2, dirImages.stderr);
  assert.match(dirImages.stderr, /is for dataset instances only/);
  const absent = cli([
    "exec",
    ...forExec,
    "--instance",
    ds.instances[0]!.instance_id,
    "--image-template",
    "docker.io/nobody/absent.{instance_id}:1",
    "--",
    "true",
  ]);
  assert.equal(absent.status, 2, absent.stderr);
  assert.match(
    absent.stderr,
    /image docker\.io\/nobody\/absent\.fixture.* is not in the store; run: minisandbox images/,
  );
  assert.equal(cli(["images", "ls", "--json"]).stdout.trim(), "[]", "nothing pulled");
});

test("prepare --images swebench pulls each row's harness image (a mirror of docker.io), exec runs a row on it", () => {
  const r = cli(["prepare", ...common, "--images", "swebench", "--json"]);
  assert.equal(r.status, 0, r.stderr);
  const results = JSON.parse(r.stdout).results as { instanceId: string; status: string; image: string }[];
  assert.deepEqual(
    results.map((x) => [x.status, x.image]),
    ds.instances.map((i) => ["pulled", swebenchImage(i.instance_id)]),
  );
  const again = cli(["prepare", ...common, "--images", "swebench", "--json"]);
  assert.deepEqual(
    (JSON.parse(again.stdout).results as { status: string }[]).map((x) => x.status),
    ["cached", "cached"],
  );
  const first = ds.instances[0]!;
  const show = "cat /etc/debian_version; git rev-parse HEAD; echo $PATH";
  const x = cli(["exec", ...forExec, "--instance", first.instance_id, "--images", "swebench", "--", "sh", "-c", show]);
  assert.equal(x.status, 0, x.stderr);
  const [debian, head, path] = x.stdout.trim().split("\n");
  assert.match(debian!, /^12\./, "the image's own Debian root");
  assert.equal(head, first.base_commit);
  assert.match(path!, /^\/opt\/venv\/bin:/, "the image's Env");
});

test("gold on images: the same reports as on the spec-built environment and as podman run of the images", async () => {
  const reportDir = join(dir, "reports");
  const onImages = cli([
    "evaluate",
    ...common,
    "--predictions",
    "gold",
    "--images",
    "swebench",
    "--run-id",
    "img",
    "--report-dir",
    reportDir,
  ]);
  assert.equal(onImages.status, 0, onImages.stderr);
  const log = readFileSync(
    join(dir, "reports", "logs", "run_evaluation", "img", "gold", ds.instances[0]!.instance_id, "run_instance.log"),
    "utf8",
  );
  assert.match(log, /\(image docker\.io\/swebench\/sweb\.eval\.x86_64\./, "evaluated on the image");
  const built = cli(["evaluate", ...common, "--predictions", "gold", "--run-id", "built", "--report-dir", reportDir]);
  assert.equal(built.status, 0, built.stderr);
  const ours = reports(join(dir, "reports"), "img");
  assert.deepEqual(ours, reports(join(dir, "reports"), "built"), "the same as on the spec-built environment");
  for (const inst of ds.instances) assert.equal((ours[inst.instance_id] as { resolved: boolean }).resolved, true);
  const podman: Record<string, unknown> = {};
  for (const inst of ds.instances) Object.assign(podman, await podmanReport(inst, inst.patch));
  assert.deepEqual(ours, podman, "the same as the eval script in podman run of the same images");
});

test("no patch on an image: the same failing report as podman run of the image", async () => {
  const inst = ds.instances[1]!;
  const r = await runInstanceEvaluation({
    home,
    instance: inst,
    image: swebenchImage(inst.instance_id),
    patch: null,
  });
  assert.equal(r.error, undefined, r.log);
  assert.equal(r.status, "unresolved");
  assert.deepEqual(r.report, await podmanReport(inst, null));
});
