/**
 * What a graded patch touches that decides how tests run rather than what they test: files the test patch does not
 * own but that pytest, the interpreter or the test runner load (conftest.py, pytest/tox settings, sitecustomize,
 * .pth files, pytest plugins, test helpers, the spec's test runner). The grade stays the harness's; these flags go
 * beside it (never in report.json) so a trainer can penalise or filter such attempts. Pure: reads text only.
 */
import { parseDiff } from "./diff.js";

export type IntegrityFlagKind =
  | "conftest"
  | "test_config"
  | "interpreter_startup"
  | "pytest_plugin"
  | "test_file"
  | "test_runner";

export interface IntegrityFlag {
  kind: IntegrityFlagKind;
  /** Repository-relative path the patch touches. */
  path: string;
  /** One line: why this path can change how tests run. */
  reason: string;
}

/** Settings files that are also package metadata: flagged only when the patch's lines for them mention tests. */
const SHARED_CONFIG = new Set(["setup.cfg", "pyproject.toml", "setup.py"]);
const TEST_SETTING = /pytest|\btox\b|addopts|testpaths|python_files|python_classes|python_functions|filterwarnings/i;
const PLUGIN_ENTRY = /pytest11|pytest_plugins|-p\s+\w/;
const TEST_DIR = /(^|\/)(tests?|testing)\//;
const TEST_NAME = /(^|\/)(test_[^/]*|[^/]*_tests?)\.py$/;

/** Flags for `patch` against what `testPatch` owns (its files are reset and re-applied by eval.sh). */
export function integrityFlags(patch: string, testPatch: string, testCmd = ""): IntegrityFlag[] {
  const owned = new Set(parseDiff(testPatch).flatMap((f) => [f.oldPath, f.newPath]));
  const runners = runnerPaths(testCmd);
  const flags: IntegrityFlag[] = [];
  const seen = new Set<string>();
  for (const f of parseDiff(patch)) {
    for (const path of [f.newPath, f.oldPath]) {
      if (path === null || owned.has(path) || seen.has(path)) continue;
      seen.add(path);
      const flag = flagFor(path, () => fileChunk(patch, path), runners);
      if (flag) flags.push({ ...flag, path });
    }
  }
  return flags;
}

function flagFor(path: string, chunk: () => string, runners: Set<string>): Omit<IntegrityFlag, "path"> | undefined {
  const name = path.slice(path.lastIndexOf("/") + 1);
  if (name === "conftest.py") return { kind: "conftest", reason: "pytest loads conftest.py before the tests" };
  if (name === "pytest.ini" || name === ".pytest.ini" || name === "tox.ini")
    return { kind: "test_config", reason: `${name} configures how pytest collects and runs the tests` };
  if (name === "sitecustomize.py" || name === "usercustomize.py" || name.endsWith(".pth"))
    return { kind: "interpreter_startup", reason: `${name} runs in every Python process at startup` };
  if (/^pytest_[^/]*\.py$/.test(name) || path.includes("_pytest/"))
    return { kind: "pytest_plugin", reason: "a pytest plugin module can change every test's result" };
  if (runners.has(path)) return { kind: "test_runner", reason: "the environment's test command runs this file" };
  if (SHARED_CONFIG.has(path)) {
    const text = changedLines(chunk());
    if (PLUGIN_ENTRY.test(text)) return { kind: "pytest_plugin", reason: `${name}: pytest plugin or entry point` };
    if (TEST_SETTING.test(text)) return { kind: "test_config", reason: `${name}: changed lines are test settings` };
    return undefined;
  }
  if (path.endsWith(".py") && (TEST_DIR.test(path) || TEST_NAME.test(path)))
    return { kind: "test_file", reason: "a test module or helper the test patch does not own (not reset by eval.sh)" };
  return undefined;
}

/** Paths the spec's test command names (e.g. `./tests/runtests.py`, `bin/test`). */
function runnerPaths(testCmd: string): Set<string> {
  const paths = new Set<string>();
  for (const word of testCmd.split(/[\s;&|]+/)) {
    const p = word.replace(/^\.\//, "");
    if (p.includes("/") && !p.startsWith("/") && !p.startsWith("-")) paths.add(p);
  }
  return paths;
}

/** The part of a git diff about one path (from its `diff --git` line to the next). */
function fileChunk(patch: string, path: string): string {
  const parts = patch.split(/^(?=diff --git )/m);
  return parts.find((p) => p.startsWith(`diff --git a/${path} `) || p.includes(` b/${path}\n`)) ?? "";
}

/** Added and removed lines of a diff chunk, and its hunk headers (which name the section they are in). */
function changedLines(chunk: string): string {
  return chunk
    .split("\n")
    .filter((l) => /^[-+@]/.test(l) && !l.startsWith("--- ") && !l.startsWith("+++ "))
    .join("\n");
}
