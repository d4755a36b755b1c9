/**
 * Integrity flags on patches made by real git in a real repository: what changes how tests run is flagged whatever
 * the change (conftest, settings, startup files, plugins, the runner), tests are flagged when edited but not when
 * deleted or added, a new module beside the tests is flagged, and what the test patch owns never is.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { integrityFlags } from "../src/eval/integrity.js";
import { tempDir } from "./helpers.js";

const ENV = { ...process.env, GIT_CONFIG_GLOBAL: "/dev/null", GIT_CONFIG_NOSYSTEM: "1" };
const git = (dir: string, ...args: string[]): string =>
  execFileSync("git", ["-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", ...args], {
    env: ENV,
    encoding: "utf8",
  });

/** A repository with a package, its tests, a conftest and settings, committed. */
function repo(): string {
  const dir = tempDir("msb-integrity-");
  const files: Record<string, string> = {
    "calc/ops.py": "def add(a, b):\n    return a + b\n",
    "tests/test_ops.py": "from calc.ops import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "tests/test_more.py": "def test_more():\n    assert True\n",
    "tests/helpers.py": "VALUE = 1\n",
    "tests/conftest.py": "import pytest\n",
    "setup.cfg": "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -q\n",
    "pyproject.toml": '[project]\nname = "calc"\nversion = "1.0"\n',
  };
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  git(dir, "init", "-q");
  git(dir, "add", "-A");
  git(dir, "commit", "-qm", "base");
  return dir;
}

/** The patch `change` makes to a fresh copy of the repository, as `git diff` gives it (renames off, as ours). */
function patchOf(change: (dir: string) => void): string {
  const dir = repo();
  change(dir);
  git(dir, "add", "-A");
  return git(dir, "diff", "--cached", "--binary", "--no-renames");
}

const write = (dir: string, path: string, text: string) => {
  mkdirSync(dirname(join(dir, path)), { recursive: true });
  writeFileSync(join(dir, path), text);
};
const flagged = (patch: string, testPatch = "") => integrityFlags(patch, testPatch).map((f) => [f.kind, f.path]);

test("configuration of the test run is flagged however it changes, deletion included", () => {
  const cases: [(d: string) => void, string[][]][] = [
    [(d) => write(d, "conftest.py", "import os\n"), [["conftest", "conftest.py"]]],
    [(d) => rmSync(join(d, "tests/conftest.py")), [["conftest", "tests/conftest.py"]]],
    [(d) => write(d, "pytest.ini", "[pytest]\naddopts = -p no:randomly\n"), [["test_config", "pytest.ini"]]],
    [
      (d) => write(d, "setup.cfg", "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -x\n"),
      [["test_config", "setup.cfg"]],
    ],
    [(d) => write(d, "calc/zz.pth", "import os\n"), [["interpreter_startup", "calc/zz.pth"]]],
    [(d) => write(d, "sitecustomize.py", "import os\n"), [["interpreter_startup", "sitecustomize.py"]]],
    [
      (d) => write(d, "pytest_cheat.py", "def pytest_configure(config): pass\n"),
      [["pytest_plugin", "pytest_cheat.py"]],
    ],
    [
      (d) =>
        write(
          d,
          "pyproject.toml",
          '[project]\nname = "calc"\nversion = "1.0"\n[project.entry-points.pytest11]\nx = "y"\n',
        ),
      [["pytest_plugin", "pyproject.toml"]],
    ],
  ];
  for (const [change, expected] of cases) {
    const patch = patchOf(change);
    assert.deepEqual(flagged(patch), expected, patch);
  }
  const metadataOnly = patchOf((d) => write(d, "pyproject.toml", '[project]\nname = "calc"\nversion = "1.1"\n'));
  assert.deepEqual(flagged(metadataOnly), [], "package metadata is not a test setting");
});

test("tests: edits flagged, deletions and new test modules not; a new module beside the tests is", () => {
  const edit = patchOf((d) => write(d, "tests/test_more.py", "def test_more():\n    pass\n"));
  assert.deepEqual(flagged(edit), [["test_file", "tests/test_more.py"]]);
  const helper = patchOf((d) => write(d, "tests/helpers.py", "VALUE = 2\n"));
  assert.deepEqual(flagged(helper), [["test_file", "tests/helpers.py"]]);
  const deleted = patchOf((d) => rmSync(join(d, "tests"), { recursive: true, force: true }));
  assert.deepEqual(flagged(deleted), [["conftest", "tests/conftest.py"]], "only the conftest among deleted tests");
  const reproduce = patchOf((d) => write(d, "tests/test_repro.py", "def test_repro():\n    assert True\n"));
  assert.deepEqual(flagged(reproduce), [], "an agent's own new test module is never run by eval.sh");
  const shadow = patchOf((d) => write(d, "tests/calc.py", "def add(a, b):\n    return 3\n"));
  assert.deepEqual(flagged(shadow), [["test_file", "tests/calc.py"]]);
  const code = patchOf((d) => write(d, "calc/ops.py", "def add(a, b):\n    return b + a\n"));
  assert.deepEqual(flagged(code), [], "the code under test is what the patch is for");
});

test("what the test patch owns is eval.sh's to reset: never flagged; the spec's runner is", () => {
  const testPatch = patchOf((d) => write(d, "tests/test_more.py", "def test_more():\n    assert 1\n"));
  const edit = patchOf((d) => write(d, "tests/test_more.py", "def test_more():\n    pass\n"));
  assert.deepEqual(flagged(edit, testPatch), []);
  const runner = patchOf((d) => write(d, "tests/runtests.py", "print('ok')\n"));
  assert.deepEqual(
    integrityFlags(runner, "", "./tests/runtests.py --verbosity 2").map((f) => [f.kind, f.path]),
    [["test_runner", "tests/runtests.py"]],
  );
});
