/**
 * The log parsers on real logs: small fixture projects are run with the real frameworks (pytest, Django's test
 * runner, sympy's test runner) from a venv built once per machine from the local package index, wrapped in the
 * eval.sh marker lines exactly as bash `set -x` prints them; the parsed maps are checked name by name.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { run } from "../src/util/run.js";
import { cachedVenv } from "./helpers.js";
import {
  DEFAULT_PARSER,
  MARKERS,
  PARSERS,
  REPO_PARSERS,
  evalTestLog,
  parseLog,
  parserForInstance,
  resolveParser,
  type StatusMap,
} from "../src/eval/index.js";

// ---------------------------------------------------------------------------------------------------------------
// Shared venv (same recipe and hash as test/eval-files.test.ts, so both reuse one venv).
const VENV_PACKAGES = ["pytest", "django", "sympy"];

const sharedVenv = (): Promise<string> => cachedVenv("eval", VENV_PACKAGES);

const venvPromise = sharedVenv();

const fixtureDirs: string[] = [];
after(() => {
  for (const dir of fixtureDirs) rmSync(dir, { recursive: true, force: true });
});

/** Files for a fixture project, written into a fresh temp dir (removed after the tests). */
function project(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), "msb-eval-fixture-"));
  fixtureDirs.push(root);
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, rel)), { recursive: true });
    writeFileSync(join(root, rel), text);
  }
  return root;
}

/**
 * Run `command` in `cwd` the way eval.sh does: bash with `set -x` around `: '<marker>'` lines, stdout and stderr
 * in one stream. Returns the whole log.
 */
async function runMarked(cwd: string, command: string, before = ""): Promise<string> {
  const venv = await venvPromise;
  const script = [
    "set -uxo pipefail",
    `source ${join(venv, "bin", "activate")}`,
    before,
    `: '${MARKERS.startTestOutput}'`,
    command,
    `: '${MARKERS.endTestOutput}'`,
  ].join("\n");
  const r = await run("bash", ["-c", `exec 2>&1\n${script}`], {
    cwd,
    env: { ...process.env, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1", HOME: cwd },
    timeoutMs: 120_000,
  });
  assert.equal(r.signal, null, `fixture run killed: ${r.stdout.slice(-2000)}`);
  return r.stdout;
}

/** The status map evalTestLog finds in a real log (asserting it found one between the markers). */
function statuses(parser: Parameters<typeof evalTestLog>[0], log: string): StatusMap {
  const res = evalTestLog(parser, log);
  assert.ok(res.found, `no status map: ${res.found ? "" : res.reason}\n${log.slice(-3000)}`);
  assert.equal(res.wholeLog, false);
  return res.statusMap;
}

// ---------------------------------------------------------------------------------------------------------------
// pytest fixture

const PYTEST_DEMO = `import enum
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")

@pytest.fixture
def bad_teardown():
    yield 1
    raise RuntimeError("teardown exploded")

def test_pass():
    assert 1 + 1 == 2

def test_fail():
    assert 1 + 1 == 3, "math - is hard"

def test_error(broken):
    pass

def test_teardown_error(bad_teardown):
    assert bad_teardown == 1

@pytest.mark.skip(reason="not today")
def test_skip():
    pass

@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="fixed already")
def test_xpass():
    pass

@pytest.mark.parametrize("value", [1, 2, 3])
def test_param(value):
    assert value != 2

@pytest.mark.parametrize("text", ["a b", "x - y", "[inner]"], ids=lambda t: t)
def test_ids(text):
    assert text

@pytest.mark.parametrize("path", ["/a/b/c", "//net/share", "/glob/*.py", "rel/x"], ids=lambda p: p)
def test_paths(path):
    assert path.startswith("/")

@pytest.mark.parametrize("text", ["ok - fine", "bad - broken"], ids=lambda t: t)
def test_dash(text):
    assert text.startswith("ok")

class MouseButton(enum.Enum):
    LEFT = 1
    RIGHT = 3

@pytest.mark.parametrize("button", [MouseButton.LEFT, MouseButton.RIGHT], ids=str)
def test_mouse(button):
    assert button is MouseButton.LEFT
`;

const PYTEST_BROKEN = `import module_that_does_not_exist

def test_never():
    pass
`;

const pytestProject = (): string =>
  project({ "pytest.ini": "[pytest]\n", "tests/test_demo.py": PYTEST_DEMO, "tests/test_broken.py": PYTEST_BROKEN });

const D = "tests/test_demo.py::";
/**
 * What the harness's pytest parser makes of `pytest -rA` on the fixture: the name is the second token of each
 * summary line, so ids with spaces are cut ("[a b]" -> "[a"); FAILED lines lose " - " first; a teardown error
 * (ERROR line after the PASSED line) wins; skips are keyed by their count "[1]"; XPASS is not a status.
 */
const PYTEST_EXPECTED: StatusMap = {
  [`${D}test_pass`]: "PASSED",
  [`${D}test_teardown_error`]: "ERROR",
  [`${D}test_param[1]`]: "PASSED",
  [`${D}test_param[3]`]: "PASSED",
  [`${D}test_ids[a`]: "PASSED",
  [`${D}test_ids[x`]: "PASSED",
  [`${D}test_ids[[inner]]`]: "PASSED",
  [`${D}test_paths[/a/b/c]`]: "PASSED",
  [`${D}test_paths[//net/share]`]: "PASSED",
  [`${D}test_paths[/glob/*.py]`]: "PASSED",
  [`${D}test_dash[ok`]: "PASSED",
  [`${D}test_mouse[MouseButton.LEFT]`]: "PASSED",
  "[1]": "SKIPPED",
  [`${D}test_xfail`]: "XFAIL",
  "tests/test_broken.py": "ERROR",
  [`${D}test_error`]: "ERROR",
  [`${D}test_fail`]: "FAILED",
  [`${D}test_param[2]`]: "FAILED",
  [`${D}test_paths[rel/x]`]: "FAILED",
  [`${D}test_dash[bad`]: "FAILED",
  [`${D}test_mouse[MouseButton.RIGHT]`]: "FAILED",
};

const PYTEST_CMD = "pytest -rA --continue-on-collection-errors tests/test_demo.py tests/test_broken.py";

test("pytest parser: real `pytest -rA` log, name by name", async () => {
  const log = await runMarked(pytestProject(), PYTEST_CMD);
  assert.match(log, /short test summary info/);
  assert.deepEqual(statuses("pytest", log), PYTEST_EXPECTED);
  // The per-repo names route to the same parser.
  assert.deepEqual(parseLog("pallets/flask", log), parseLog("pytest", log));
});

test("pytest parser: a collection error interrupts the run, leaving only the broken file", async () => {
  const log = await runMarked(pytestProject(), "pytest -rA tests/test_demo.py tests/test_broken.py");
  assert.match(log, /Interrupted: 1 error during collection/);
  assert.deepEqual(statuses("pytest", log), { "tests/test_broken.py": "ERROR" });
});

test("pytest-with-options parser: a path option keeps its last component", async () => {
  const log = await runMarked(pytestProject(), PYTEST_CMD);
  const expected: StatusMap = { ...PYTEST_EXPECTED };
  delete expected[`${D}test_paths[/a/b/c]`];
  expected[`${D}test_paths[/c]`] = "PASSED"; // "//net/share", "/glob/*.py" and "rel/x" are left alone
  assert.deepEqual(statuses("pytest_options", log), expected);
  assert.equal(resolveParser("psf/requests"), "pytest_options");
});

test("pytest v2 parser: ANSI colours (--color=yes) are stripped", async () => {
  const log = await runMarked(pytestProject(), `${PYTEST_CMD} --color=yes`);
  assert.ok(log.includes("\x1b[32mPASSED\x1b[0m"), "expected coloured output");
  const parsed = statuses("pytest_v2", log);
  // Its "status word anywhere in the line" rule also records report separators such as
  // "____ ERROR at setup of test_error ____" and "==== ERRORS ====" under their first token, as the harness does.
  const separators = Object.keys(parsed).filter((k) => /^[_=]+$/.test(k));
  assert.ok(separators.length > 0);
  for (const k of separators) assert.match(parsed[k]!, /^ERRORS?$/);
  for (const k of separators) delete parsed[k];
  assert.deepEqual(parsed, PYTEST_EXPECTED);
  // The plain parser sees none of the coloured lines.
  assert.deepEqual(parseLog("pytest", log), {});
});

test("pytest v2 parser: old-style verbose lines (`name STATUS`) are read too", async () => {
  // astropy's alternative test_cmd.
  const log = await runMarked(pytestProject(), `${PYTEST_CMD} -vv -o console_output_style=classic --tb=no`);
  assert.match(log, /test_demo\.py::test_skip SKIPPED \(not today\)/);
  // Summary lines come last and overwrite; the verbose lines add the skipped test by name.
  assert.deepEqual(statuses("pytest_v2", log), { ...PYTEST_EXPECTED, [`${D}test_skip`]: "SKIPPED" });
});

test("matplotlib parser: MouseButton reprs become their values", async () => {
  const log = await runMarked(pytestProject(), PYTEST_CMD);
  const expected: StatusMap = { ...PYTEST_EXPECTED };
  delete expected[`${D}test_mouse[MouseButton.LEFT]`];
  delete expected[`${D}test_mouse[MouseButton.RIGHT]`];
  expected[`${D}test_mouse[1]`] = "PASSED";
  expected[`${D}test_mouse[3]`] = "FAILED";
  assert.deepEqual(statuses("matplotlib", log), expected);
});

test("seaborn parser: only PASSED and FAILED lines, FAILED names taken as written", async () => {
  const log = await runMarked(pytestProject(), PYTEST_CMD.replace("pytest -rA", "pytest --no-header -rA"));
  assert.doesNotMatch(log, /^platform /m);
  const expected: StatusMap = {};
  for (const [name, status] of Object.entries(PYTEST_EXPECTED)) {
    if (status === "PASSED" || status === "FAILED") expected[name] = status;
  }
  // The teardown error's PASSED line is all seaborn's parser reads of it.
  expected[`${D}test_teardown_error`] = "PASSED";
  assert.deepEqual(statuses("seaborn", log), expected);
});

// ---------------------------------------------------------------------------------------------------------------
// Django fixture: a project + app run by Django's own test runner at verbosity 2.

const DJANGO_FILES: Record<string, string> = {
  "proj/__init__.py": "",
  "proj/settings.py": `import logging
SECRET_KEY = "fixture"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
INSTALLED_APPS = ["app"]
ROOT_URLCONF = "proj.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
USE_TZ = True

class MessageOnly(logging.Formatter):
    def formatException(self, ei):
        return ""

# Request errors to stderr, one line each (the traceback is not printed).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"()": "proj.settings.MessageOnly", "format": "%(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"django.request": {"handlers": ["stderr"], "level": "ERROR", "propagate": False}},
}
`,
  "proj/urls.py": `from django.urls import path

def boom(request):
    raise RuntimeError("view exploded")

urlpatterns = [path("boom/", boom)]
`,
  // A child suite in the style of Django's tests/runtests.py, sharing the parent's output like Django's own
  // test-runner tests do.
  "runtests.py": `import os, sys, unittest
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
print("Testing against Django installed in '%s' with up to %d processes" % (os.path.dirname(django.__file__), 1))
django.setup()

class Inner(unittest.TestCase):
    def test_inner(self):
        pass

result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(
    unittest.defaultTestLoader.loadTestsFromTestCase(Inner))
from django.core.management import call_command
call_command("check")
sys.exit(not result.wasSuccessful())
`,
  "app/__init__.py": "",
  "app/tests.py": `import os, subprocess, sys, unittest
from django.core.management import call_command
from django.test import Client, SimpleTestCase

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

class Basics(SimpleTestCase):
    def test_ok(self):
        self.assertEqual(1 + 1, 2)

    def test_fail(self):
        self.assertEqual(1 + 1, 3)

    def test_error(self):
        raise ValueError("boom")

    @unittest.skip("not today")
    def test_skipped(self):
        pass

    @unittest.expectedFailure
    def test_expected_failure(self):
        self.assertEqual(1, 2)

    @unittest.expectedFailure
    def test_unexpected_success(self):
        pass

    def test_docstring(self):
        """--version is equivalent to version"""
        self.assertTrue(True)

class Noisy(SimpleTestCase):
    def test_system_check(self):
        call_command("check")

    def test_internal_error(self):
        response = Client(raise_request_exception=False).get("/boom/")
        self.assertEqual(response.status_code, 500)

    def test_runs_inner_suite(self):
        subprocess.run([sys.executable, os.path.join(ROOT, "runtests.py")], cwd=ROOT, check=True)
`,
};

test("django parser: real `django test --verbosity 2` log, including the multi-line cases", async () => {
  const log = await runMarked(
    project(DJANGO_FILES),
    "python -m django test --settings=proj.settings --verbosity 2 app",
  );
  // The shapes the special rules exist for really occur:
  assert.match(
    log,
    /test_internal_error \(app\.tests\.Noisy\.test_internal_error\) \.\.\. Internal Server Error: \/boom\/\nok\n/,
  );
  assert.match(
    log,
    new RegExp(
      "test_system_check \\(app\\.tests\\.Noisy\\.test_system_check\\) \\.\\.\\. " +
        "System check identified no issues \\(0 silenced\\)\\.\\nok\\n",
    ),
  );
  assert.match(
    log,
    /test_runs_inner_suite \(app\.tests\.Noisy\.test_runs_inner_suite\) \.\.\. Testing against Django installed in /,
  );
  const name = (cls: string, method: string): string => `${method} (app.tests.${cls}.${method})`;
  assert.deepEqual(statuses("django", log), {
    [name("Basics", "test_ok")]: "PASSED",
    [name("Basics", "test_fail")]: "FAILED",
    test_fail: "FAILED", // from the "FAIL: test_fail (...)" header: its second token
    [name("Basics", "test_error")]: "ERROR",
    test_error: "ERROR",
    [name("Basics", "test_skipped")]: "SKIPPED",
    // A docstring replaces the name on the result line; the harness names the test by it.
    "--version is equivalent to version": "PASSED",
    // "... Internal Server Error: /boom/" then "ok": the pending test passes.
    [name("Noisy", "test_internal_error")]: "PASSED",
    [name("Noisy", "test_system_check")]: "PASSED",
    // The child's own result line; the parent's "ok" after the child's output lands on it too.
    "test_inner (__main__.Inner.test_inner)": "PASSED",
    // Only the "Testing against Django installed in ... silenced).\nok" rule finds the parent's result.
    [name("Noisy", "test_runs_inner_suite")]: "PASSED",
    // "expected failure" and "unexpected success" results are not statuses for the harness.
  });
});

// ---------------------------------------------------------------------------------------------------------------
// sympy fixture: a sympy-shaped checkout whose bin/test runs sympy's own runner (sympy.testing.runtests).

const SYMPY_FILES: Record<string, string> = {
  "bin/test": `#!/usr/bin/env python
"""bin/test of a sympy-shaped checkout: sympy's own test runner (sympy.testing.runtests) on the given files,
rooted at this checkout instead of the installed sympy package."""
import os, sys
if "-C" in sys.argv or "--no-cache" in sys.argv:
    os.environ["SYMPY_USE_CACHE"] = "no"  # read when sympy is imported
from sympy.testing.runtests import PyTestReporter, SymPyTests

paths = [a for a in sys.argv[1:] if not a.startswith("-")]
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
reporter = PyTestReporter(verbose="--verbose" in sys.argv, tb="short", colors=False)
tests = SymPyTests(reporter, kw=(), post_mortem=False, seed=0)
tests._root_dir = root
reporter.root_dir(root)
tests._testfiles.extend(os.path.join(root, p) for p in paths)
sys.exit(int(not tests.test(sort=True)))
`,
  "sympy/__init__.py": "",
  "sympy/demo/__init__.py": "",
  "sympy/demo/tests/__init__.py": "",
  "sympy/demo/tests/test_demo.py": `from sympy import Symbol, cos, simplify, sin
from sympy.testing.pytest import XFAIL, raises, skip

x = Symbol("x")

def test_identity():
    assert simplify(sin(x)**2 + cos(x)**2) == 1

def test_wrong():
    assert simplify(sin(x)**2) == 1

def test_raises_error():
    raise ZeroDivisionError("bad division")

def test_raises_ok():
    raises(ZeroDivisionError, lambda: 1 / 0)

@XFAIL
def test_known_bug():
    assert x == 2

def test_skipped():
    skip("not on this machine")

def test_last():
    assert True
`,
};

test("sympy parser: real sympy test-runner log (`bin/test -C --verbose`)", async () => {
  const root = project(SYMPY_FILES);
  chmodSync(join(root, "bin", "test"), 0o755);
  const log = await runMarked(
    root,
    "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose sympy/demo/tests/test_demo.py",
  );
  assert.match(log, /cache:\s+no/);
  assert.match(log, /^test_raises_error E$/m);
  assert.deepEqual(statuses("sympy", log), {
    // Section headers of the failure report: "___ path.py:name ___" (this sympy writes "::" for failures).
    "sympy/demo/tests/test_demo.py:test_raises_error": "FAILED",
    "sympy/demo/tests/test_demo.py::test_wrong": "FAILED",
    test_identity: "PASSED",
    test_wrong: "FAILED",
    test_raises_error: "ERROR",
    test_raises_ok: "PASSED",
    // test_known_bug (f) and test_skipped (s) are not statuses; test_last shares its line with the file's
    // "[FAIL]" verdict, so it does not end with " ok" and is not read.
  });
  assert.match(log, /^test_last ok +\[FAIL\]$/m);
});

// ---------------------------------------------------------------------------------------------------------------
// Reading a whole test log.

test("evalTestLog: markers, failure markers, and the whole-log fallback", async () => {
  const root = pytestProject();
  const log = await runMarked(root, PYTEST_CMD);
  assert.deepEqual(evalTestLog("pytest", log), { found: true, statusMap: PYTEST_EXPECTED, wholeLog: false });

  for (const [marker, reason] of [
    [MARKERS.applyPatchFail, "patch_apply_failed"],
    [MARKERS.resetFailed, "reset_failed"],
    [MARKERS.testsError, "tests_errored"],
    [MARKERS.testsTimeout, "tests_timed_out"],
  ] as const) {
    assert.deepEqual(evalTestLog("pytest", `${log}\n${marker}\n`), { found: false, statusMap: null, reason });
  }
  const noEnd = log.slice(0, log.indexOf(MARKERS.endTestOutput));
  assert.deepEqual(evalTestLog("pytest", noEnd), { found: false, statusMap: null, reason: "missing_markers" });

  // Tests that ran before the start marker (nothing parses between the markers): the whole log is parsed.
  const early = await runMarked(root, "true", PYTEST_CMD);
  assert.deepEqual(evalTestLog("pytest", early), { found: true, statusMap: PYTEST_EXPECTED, wholeLog: true });
});

// ---------------------------------------------------------------------------------------------------------------
// Parser selection.

test("every Python repository of the spec table has a parser; log_parser fields and names resolve", () => {
  // The repo's copy of the table (data/), else the shared one beside the checkout.
  const candidates = ["../../data/", "../../../shared/data/"].map(
    (d) => new URL(`${d}swebench-python-specs.json`, import.meta.url),
  );
  const specsPath = candidates.find((u) => existsSync(u));
  assert.ok(specsPath, "swebench-python-specs.json not found in data/ or ../shared/data/");
  const table = JSON.parse(readFileSync(specsPath, "utf8")) as { specs: Record<string, unknown> };
  const repos = Object.keys(table.specs);
  assert.ok(repos.length >= 20);
  for (const repo of repos) {
    assert.ok(Object.hasOwn(REPO_PARSERS, repo), `no parser for ${repo}`);
    assert.ok(Object.hasOwn(PARSERS, resolveParser(repo)));
  }
  assert.equal(resolveParser("django/django"), "django");
  assert.equal(resolveParser("sympy/sympy"), "sympy");
  assert.equal(resolveParser("astropy/astropy"), "pytest_v2");
  assert.equal(resolveParser("Matplotlib/Matplotlib"), "matplotlib");
  assert.equal(resolveParser("someone/unknown-repo"), DEFAULT_PARSER);
  assert.equal(resolveParser("parse_log_pytest_v2"), "pytest_v2");
  assert.equal(resolveParser("parse_log_scikit"), "pytest_v2");
  assert.equal(resolveParser("parse_log_requests"), "pytest_options");
  assert.equal(resolveParser("pytest-options"), "pytest_options");
  assert.throws(() => resolveParser("parse_log_nonsense"), /unknown log parser "parse_log_nonsense"/);
  // The row's log_parser wins over its repository.
  assert.equal(parserForInstance({ repo: "django/django", log_parser: "parse_log_pytest" }), "pytest");
  assert.equal(parserForInstance({ repo: "django/django" }), "django");
  assert.equal(parserForInstance({ repo: "django/django", log_parser: "" }), "django");
});
