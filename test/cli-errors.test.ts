/**
 * The mistakes a newcomer makes first, each answered the way every error is: the cause first, then the fix, on
 * stderr, with exit code 2 for bad input and 1 for work that failed. The real CLI in a child process.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { CLI, tempDir, tempHome } from "./helpers.js";

const home = tempHome();

test("without --repos or network: the clone's cause first, --repos as the fix; evaluate then exits 1", async (t) => {
  if (process.getuid?.() !== 0) return t.skip("needs root (a network namespace of its own)");
  const fx = await makeFixtureDataset(join(tempDir(), "fx"), { instances: 1 });
  // A network namespace with nothing up: git's name lookup fails at once, and nothing leaves this host.
  const r = spawnSync(
    "unshare",
    ["--net", process.execPath, CLI, "--home", home, "prepare", "--dataset", fx.datasetPath],
    {
      encoding: "utf8",
      timeout: 60_000,
    },
  );
  assert.equal(r.status, 1, r.stderr);
  const [cause, fix] = r.stdout.split("\n").filter((l) => l.startsWith("fixture__calc-1: ") || l.startsWith("  fix:"));
  const url = "https://github.com/fixture/calc.git";
  assert.ok(
    cause!.startsWith(
      `fixture__calc-1: build failed at step "fetch": repository fixture/calc could not be cloned from ${url}: `,
    ),
    cause,
  );
  assert.match(fix!, /^ {2}fix: give local clones or mirrors with --repos DIR/);
  assert.ok(!existsSync(join(home, "repos", "fixture", `calc.git.tmp-${r.pid}`)), "no partial clone left");

  // evaluate builds what is missing first: an instance it could not build is not graded, and the run fails.
  const reports = tempDir();
  const args = ["--home", home, "evaluate", "--dataset", fx.datasetPath, "--predictions", "gold"];
  const e = spawnSync("unshare", ["--net", process.execPath, CLI, ...args, "--report-dir", reports], {
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(e.status, 1, e.stderr);
  assert.match(e.stdout, /Instances with errors: 1/);
  assert.match(
    e.stderr,
    /^minisandbox: 1 instance\(s\) could not be evaluated \(fixture__calc-1: Environment Build Failed\); the report /m,
  );
  assert.ok(
    readdirSync(reports).some((f) => /^gold\.minisandbox-\S+\.json$/.test(f)),
    "the report is written",
  );
});
