/**
 * SWE-ReX's own test suite (`tests/test_execution.py`, `tests/test_server.py`, unmodified, from its git mirror)
 * against `minisandbox serve --dir DIR --python 3.11`, through the package's pytest plugin
 * (`-p minisandbox.swerex_pytest`), which points the suite's conftest at our server instead of its own.
 *
 * Deselected, each with its reason:
 * - `test_read_write_file`, `test_read_large_file`: the file is written on one side and read on the other (pytest's
 *   tmp_path on the host, the same path through the runtime), which assumes the runtime shares the host's /tmp.
 *   A sandbox has a private /tmp by design; pytest makes tmp_path 0700, which the sandbox's unprivileged root could
 *   not enter even through `serve --bind`.
 * - `test_interrupt_pager` expects the shell's "Killed" job notice in the output of the command after an interrupt;
 *   on this kind of host (bash 5.2, no TERM) SWE-ReX's own server prints it in the interrupt's output, so the test
 *   fails against the reference implementation too.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { run, runOk } from "../src/util/run.js";
import { CLI, cachedVenv, tempDir, tempHome } from "./helpers.js";
import { checkout, mirror, skipUnlessMirrors } from "./agent-clients.js";

const ADAPTERS = join(import.meta.dirname, "..", "..", "integrations", "python");
const SOURCES = { "SWE-agent/SWE-ReX": "SWEREX_MIRROR", "idank/bashlex": "BASHLEX_MIRROR" };
const skip = skipUnlessMirrors(SOURCES);
const DESELECTED = ["test_read_write_file", "test_read_large_file", "test_interrupt_pager"].map(
  (name) => `tests/test_execution.py::${name}`,
);

async function swerexVenv(): Promise<string> {
  const swerex = mirror("SWE-agent/SWE-ReX", SOURCES["SWE-agent/SWE-ReX"])!;
  const bashlex = mirror("idank/bashlex", SOURCES["idank/bashlex"])!;
  const heads = await Promise.all([swerex, bashlex].map((g) => runOk("git", ["--git-dir", g, "rev-parse", "HEAD"])));
  // aiohttp: imported by SWE-ReX's remote runtime but not declared in its metadata.
  return cachedVenv("swerex-suite", ["aiohttp", "pytest", "pytest-asyncio", "setuptools>=61", "wheel"], {
    recipe: JSON.stringify({ heads, ADAPTERS }),
    setup: async (venv) => {
      const pip = (...args: string[]) =>
        runOk(join(venv, "bin", "python"), ["-m", "pip", "install", "--quiet", "--retries", "0", ...args], {
          timeoutMs: 240_000,
        });
      await pip(await checkout(bashlex, join(venv, "src", "bashlex")));
      await pip("-e", await checkout(swerex, join(venv, "src", "SWE-ReX")));
      await pip("--no-deps", "-e", ADAPTERS);
    },
  });
}

test("SWE-ReX's own execution and server tests pass against serve --dir --python", { skip }, async (t) => {
  const venv = await swerexVenv();
  const workdir = tempDir("msb-swerex-dir-");
  const src = join(venv, "src", "SWE-ReX");
  const args = ["-m", "pytest", "-p", "minisandbox.swerex_pytest", "-q", "-p", "no:cacheprovider"];
  args.push("tests/test_execution.py", "tests/test_server.py");
  for (const d of DESELECTED) args.push("--deselect", d);
  const started = performance.now();
  const r = await run(join(venv, "bin", "python"), args, {
    cwd: src,
    timeoutMs: 600_000,
    env: {
      PATH: `${join(venv, "bin")}:${process.env.PATH}`,
      MINISANDBOX_CLI: `${process.execPath} ${CLI} --home ${tempHome("msb-swerex-home-")}`,
      MINISANDBOX_SWEREX_DIR: workdir,
      MINISANDBOX_SERVE_ARGS: "--python 3.11",
      PYTHONDONTWRITEBYTECODE: "1",
      NO_PROXY: "*",
    },
  });
  const seconds = (performance.now() - started) / 1000;
  const summary = r.stdout.trim().split("\n").pop() ?? "";
  assert.equal(r.code, 0, r.stdout.slice(-6000) + r.stderr.slice(-3000));
  assert.match(summary, /\d+ passed/);
  assert.doesNotMatch(summary, /\d+ (failed|errors?)\b/);
  const passed = Number(/(\d+) passed/.exec(summary)![1]);
  assert.ok(passed >= 48, summary);
  t.diagnostic(`SWE-ReX suite: ${summary} in ${seconds.toFixed(1)} s (deselected: ${DESELECTED.join(", ")})`);
});
