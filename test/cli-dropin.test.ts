/**
 * The CLI as people already type it: --version, exit codes as the README says (2 for bad input, each one line),
 * global options anywhere, --python, the SWE-bench harness's flag names, datasets by Hub name from a local Hugging
 * Face cache (never downloaded), unknown prediction ids refused, live build progress and failures that say their
 * cause first with the fix.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CLI, tempDir, tempHome } from "./helpers.js";
import { preparedFixture } from "./agent-clients.js";

interface Out {
  status: number | null;
  stdout: string;
  stderr: string;
}

function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Out> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b));
    child.stderr.on("data", (b: Buffer) => (stderr += b));
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

const home = tempHome("msb-cli-dropin-");
const PKG = JSON.parse(readFileSync(join(import.meta.dirname, "..", "..", "package.json"), "utf8")) as {
  version: string;
};

test("--version prints the package's version", async () => {
  for (const flag of ["--version", "-V"]) {
    const r = await cli([flag]);
    assert.equal(r.status, 0);
    assert.equal(r.stdout, `${PKG.version}\n`);
  }
});

test("bad input: exit 2 and exactly one line on stderr, whatever the kind", async () => {
  const garbage = join(tempDir(), "data.parquet");
  writeFileSync(garbage, "this is not parquet\n");
  const cases: [string[], RegExp][] = [
    [["exec", "--bogus"], /unknown option '--bogus'/],
    [["nosuchcommand"], /unknown command 'nosuchcommand'/],
    [["exec", "--memory"], /option '--memory <SIZE>' argument missing/],
    [["exec", "--memory", "2x", "--", "true"], /invalid size "2x"/],
    [["exec", "--pids", "-3", "--", "true"], /--pids expects a positive number/],
    [["exec", "--python", "three", "--", "true"], /invalid Python version "three"/],
    [["exec", "--python", "2.1", "--", "true"], /Python 2\.1 is not installed; available: /],
    [["prepare"], /--dataset is required/],
    [["prepare", "--dataset", "/no/such/file.json"], /dataset file not found: \/no\/such\/file\.json/],
    [["prepare", "--dataset", garbage], /not a parquet file/],
    [["prepare", "--dataset", "nobody/such-dataset"], /not in the local Hugging Face cache .*huggingface-cli download/],
    [["prepare", "--dataset", garbage, "--workers", "0"], /not a parquet file|--workers/],
    [["evaluate", "--dataset", garbage], /--predictions is required|not a parquet file/],
    [["serve", "--python", "3.11"], /--python and --bind apply to the default sandbox: give --dir DIR too/],
    [["serve", "--dir", "/tmp", "--bind", "/no/such/dir"], /--bind: \/no\/such\/dir is not a directory/],
    [["demo", "--instances", "lots"], /--instances expects a positive integer/],
    [["serve", "--dataset", garbage, "--warm-pool", "0"], /--warm-pool expects a positive number, got 0/],
    [["serve", "--dataset", garbage, "--warm-pool", "-4"], /--warm-pool expects a positive number, got -4/],
    [["serve", "--warm-pool", "8"], /--warm-pool needs --dataset/],
  ];
  for (const [args, re] of cases) {
    const r = await cli(["--home", home, ...args], { HF_HOME: tempDir() });
    assert.equal(r.status, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.match(r.stderr, re, args.join(" "));
    assert.match(r.stderr, /^minisandbox: [^\n]+\n$/, `one line: ${JSON.stringify(r.stderr)}`);
  }
});

test("global options work before or after the command; --python puts python, python3, pip first on PATH", async () => {
  const late = tempHome("msb-cli-late-");
  const dir = tempDir();
  writeFileSync(join(dir, "hello.py"), "import sys\nprint('hello', sys.version_info[:2])\n");
  const r = await cli(
    ["exec", "--dir", dir, "--home", late, "--python", "3.11", "--"].concat([
      "sh",
      "-c",
      "python hello.py && python3 --version && pip --version && cat ~/.bashrc >/dev/null && echo $PAGER $GIT_PAGER",
    ]),
  );
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^hello \(3, 11\)\nPython 3\.11\.\d+\npip \S+ from .*\(python 3\.11\)\ncat cat\n$/);
  assert.ok(existsSync(join(late, "toolchains")), "--home after the command was used");
  const plain = await cli(["--home", late, "exec", "--dir", dir, "--", "sh", "-c", "command -v python || echo none"]);
  assert.equal(plain.stdout, "none\n", "without --python a plain directory has no `python`");
});

test("evaluate: harness flag names, a dataset by Hub name from the local cache, unknown ids refused", async () => {
  const fx = await preparedFixture();
  const hf = tempDir("msb-hf-");
  const snap = join(hf, "hub", "datasets--acme--calc-bench", "snapshots", "0123abcd", "data");
  mkdirSync(snap, { recursive: true });
  writeFileSync(join(snap, "test-00000-of-00001.jsonl"), readFileSync(join(fx.hfDir, "data.jsonl")));
  const reports = tempDir("msb-reports-");
  const harness = ["evaluate", "--dataset_name", "acme/calc-bench", "--split", "test", "--predictions_path", "gold"];
  harness.push("--max_workers", "1", "--run_id", "h1", "--instance_ids", "fixture__calc-2", "--report_dir", reports);
  const r = await cli(["--home", fx.home, ...harness, "--json"], { HF_HOME: hf });
  assert.equal(r.status, 0, r.stderr);
  const summary = JSON.parse(readFileSync(join(reports, "gold.h1.json"), "utf8"));
  assert.deepEqual([summary.total_instances, summary.resolved_ids], [1, ["fixture__calc-2"]]);

  const preds = join(tempDir(), "preds.json");
  const row = (id: string) => ({ instance_id: id, model_name_or_path: "m", model_patch: "" });
  writeFileSync(preds, JSON.stringify([row("fixture__calc-1"), row("someone__else-7")]));
  const u = await cli(
    ["--home", fx.home, "evaluate", "--dataset", fx.dataset, "--predictions", preds].concat([
      "--run-id",
      "u1",
      "--report-dir",
      reports,
    ]),
  );
  assert.equal(u.status, 2, u.stderr);
  assert.match(
    u.stderr,
    /^minisandbox: 1 prediction id\(s\) are not in .*: someone__else-7 \(the SWE-bench harness refuses/,
  );
  assert.ok(!existsSync(join(reports, "logs", "run_evaluation", "u1")), "nothing was evaluated");
});

test("prepare: progress per build step, and a failed build says its cause first, then the fix", async () => {
  const fx = await preparedFixture();
  const rows = JSON.parse(readFileSync(fx.dataset, "utf8")) as Record<string, unknown>[];
  const bad = join(tempDir(), "bad.json");
  writeFileSync(bad, JSON.stringify([{ ...rows[0], instance_id: "nobody__missing-1", repo: "nobody/missing" }]));
  const repos = tempDir("msb-empty-repos-");
  const r = await cli(["--home", home, "prepare", "--dataset", bad, "--repos", repos]);
  assert.equal(r.status, 1, "a build that fails is a failure of the work, not bad input");
  assert.match(r.stderr, /^\[0\/1\] nobody__missing-1: toolchain \(ETA .*\)$/m, "each step as it starts");
  assert.match(r.stderr, /^\[0\/1\] nobody__missing-1: fetch \(ETA .*\)$/m);
  const failure = r.stdout.slice(r.stdout.indexOf("\nnobody__missing-1: ") + 1).split("\n");
  assert.match(failure[0]!, /^nobody__missing-1: build failed at step "fetch": repository nobody\/missing not found/);
  assert.match(failure[1]!, /^ {2}fix: give local clones or mirrors with --repos DIR/);
  assert.match(failure[2]!, /^ {2}log: \S+\.log$/);
});
