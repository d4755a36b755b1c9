/**
 * The Python package's own tests (integrations/python/tests, pytest) in `npm test`: pytest runs once, against a real
 * `minisandbox serve` of this build that its fixtures start, on the fixture dataset (its environments from the store
 * every machine builds once for the tests); each pytest test is reported here as a subtest, failing with pytest's
 * own output. The tools venv is the one `npm run lint` uses (scripts/install-python-tools.sh).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { envFor } from "../src/env/environments.js";
import { openStore, pullLayer } from "../src/env/store/index.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { run, runOk } from "../src/util/run.js";
import { CLI, cachedFixtureStore, processesMatching, tempDir, tempHome } from "./helpers.js";

const ROOT = join(import.meta.dirname, "..", "..");
const PACKAGE = join(ROOT, "integrations", "python");

interface Phase {
  nodeid: string;
  when: "setup" | "call" | "teardown";
  outcome: "passed" | "failed" | "skipped";
  longrepr: string;
}

/** Per test, in the order pytest ran them: failed if any phase failed, skipped if its setup skipped it. */
function outcomes(phases: Phase[]): Map<string, { outcome: string; longrepr: string }> {
  const out = new Map<string, { outcome: string; longrepr: string }>();
  for (const p of phases) {
    const prev = out.get(p.nodeid) ?? { outcome: "passed", longrepr: "" };
    if (p.outcome === "failed")
      out.set(p.nodeid, { outcome: "failed", longrepr: `${prev.longrepr}[${p.when}] ${p.longrepr}\n` });
    else if (p.outcome === "skipped" && prev.outcome !== "failed") out.set(p.nodeid, { ...p });
    else out.set(p.nodeid, prev);
  }
  return out;
}

/** A fresh home holding the environments of the dataset's first two instances, and the dataset itself. */
async function fixture(): Promise<{ dataset: string; repos: string; home: string }> {
  const fx = await makeFixtureDataset(join(tempDir("msb-pytest-fx-"), "fx"), { instances: 20 });
  const store = await cachedFixtureStore(fx);
  const home = tempHome("msb-pytest-home-");
  const local = openStore(join(home, "store"));
  for (const inst of fx.instances.slice(0, 2)) await pullLayer(local, store, envFor(inst, {}).key);
  return { dataset: fx.datasetPath, repos: fx.reposDir, home };
}

test("the Python package's tests (pytest, a real server and sandboxes)", { timeout: 600_000 }, async (t) => {
  const python = (await runOk(join(ROOT, "scripts", "install-python-tools.sh"), [], { timeoutMs: 300_000 })).trim();
  const { dataset, repos, home } = await fixture();
  const report = join(tempDir("msb-pytest-report-"), "report.jsonl");
  const r = await run(python, ["-m", "pytest", "-p", "tests.node_report", "-q", "-rs"], {
    cwd: PACKAGE,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      PYTHONDONTWRITEBYTECODE: "1",
      NO_PROXY: "*",
      PIP_RETRIES: "0",
      MINISANDBOX_TEST_NODE: process.execPath,
      MINISANDBOX_TEST_CLI: CLI,
      MINISANDBOX_TEST_DATASET: dataset,
      MINISANDBOX_TEST_REPOS: repos,
      MINISANDBOX_TEST_HOME: home,
      MINISANDBOX_PYTEST_REPORT: report,
      // Where verl's and SkyRL's sources are (test_framework_sources.py; default: .mirror beside the checkout).
      ...(process.env.MINISANDBOX_MIRRORS ? { MINISANDBOX_MIRRORS: process.env.MINISANDBOX_MIRRORS } : {}),
    },
    timeoutMs: 540_000,
  });
  const phases = existsSync(report)
    ? readFileSync(report, "utf8")
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Phase)
    : [];
  const results = outcomes(phases);
  for (const [nodeid, res] of results) {
    await t.test(nodeid, { skip: res.outcome === "skipped" ? res.longrepr || "skipped by pytest" : false }, () => {
      if (res.outcome === "failed") assert.fail(res.longrepr);
    });
  }
  assert.ok(results.size >= 40, `pytest ran ${results.size} tests:\n${r.stdout}\n${r.stderr}`);
  assert.equal(r.code, 0, `pytest failed:\n${r.stdout.slice(-20_000)}\n${r.stderr.slice(-5000)}`);
  assert.deepEqual(processesMatching(home), [], "no process of the server or its sandboxes is left");
});
