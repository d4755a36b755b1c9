import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { runOk } from "../src/util/run.js";
import { findToolchain, listToolchains, type Toolchain } from "../src/env/toolchains.js";

const pyenvRoot = process.env.PYENV_ROOT || join(homedir(), ".pyenv");
/** What pyenv has installed here, read straight from the directory (X.Y.Z names only). */
const pyenvVersions = existsSync(join(pyenvRoot, "versions"))
  ? readdirSync(join(pyenvRoot, "versions")).filter((v) => /^\d+\.\d+\.\d+$/.test(v))
  : [];
const newestOf = (minor: string) =>
  pyenvVersions
    .filter((v) => v.startsWith(`${minor}.`))
    .sort((a, b) => Number(b.split(".")[2]) - Number(a.split(".")[2]))[0];

let tmp: string;
before(() => {
  tmp = mkdtempSync(join(tmpdir(), "msb-toolchains-"));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

/** Options that see nothing but what a test sets up (no real pyenv/conda/PATH, no real config). */
function isolated(extra: { env?: NodeJS.ProcessEnv; condaRoots?: string[]; configFile?: string } = {}) {
  const empty = join(tmp, "empty");
  mkdirSync(empty, { recursive: true });
  return {
    userHome: empty,
    configFile: extra.configFile ?? join(empty, "toolchains.json"),
    condaRoots: extra.condaRoots ?? [],
    env: { PYENV_ROOT: empty, PATH: "", ...extra.env },
  };
}

async function reportedVersion(t: Toolchain): Promise<string> {
  const out = await runOk(t.python, ["-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))"]);
  return out.trim();
}

test("detects this machine's pyenv interpreters (2.7 and 3.6-3.13)", async () => {
  const all = await listToolchains({ configFile: join(tmp, "none.json") });
  const pyenv = all.filter((t) => t.source === "pyenv");
  assert.deepEqual(pyenv.map((t) => t.version).sort(), [...pyenvVersions].sort());
  const minors = new Set(pyenv.map((t) => t.version.split(".").slice(0, 2).join(".")));
  for (const m of ["2.7", "3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13"])
    assert.ok(minors.has(m), `pyenv ${m} found`);
  for (const t of pyenv) {
    assert.equal(t.prefix, join(pyenvRoot, "versions", t.version));
    assert.ok(t.python.startsWith(`${t.prefix}/bin/`));
    assert.deepEqual(t.mounts, [t.prefix], "a pyenv build needs only its prefix");
  }
  assert.ok(!all.some((t) => t.python.includes("/shims/")), "pyenv shims are not interpreters");
});

test("findToolchain('3.9') is the newest 3.9.x, and it really is that interpreter", async () => {
  const t = await findToolchain("3.9", { configFile: join(tmp, "none.json") });
  assert.equal(t.version, newestOf("3.9"));
  assert.equal(await reportedVersion(t), t.version);
  assert.ok(t.mounts.includes(t.prefix));
  const exact = await findToolchain(t.version, { configFile: join(tmp, "none.json") });
  assert.equal(exact.python, t.python);
  const py2 = await findToolchain("2.7", { configFile: join(tmp, "none.json") });
  assert.equal(await runOk(py2.python, ["-c", "import sys; print(sys.version_info[0])"]).then((s) => s.trim()), "2");
});

test("not installed: the error names the versions that are available", async () => {
  await assert.rejects(findToolchain("3.5", { configFile: join(tmp, "none.json") }), (e: Error & { code?: string }) => {
    assert.equal(e.code, "not_found");
    assert.match(e.message, /Python 3\.5 is not installed; available: .*3\.9\.\d+.*3\.13\.\d+/);
    assert.match(e.message, /map it in .*none\.json/);
    return true;
  });
  await assert.rejects(findToolchain("3.9", isolated()), /Python 3\.9 is not installed; available: none/);
  await assert.rejects(findToolchain("three", isolated()), /invalid Python version "three"/);
});

test("toolchains.json overrides detection; bad entries are clear errors", async () => {
  const v310 = newestOf("3.10")!;
  const prefix310 = join(pyenvRoot, "versions", v310);
  const home = join(tmp, "home");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "toolchains.json"), JSON.stringify({ "3.10": prefix310 }));
  const t = await findToolchain("3.10", { home });
  assert.equal(t.source, "config");
  assert.equal(t.prefix, prefix310);
  assert.equal(t.version, v310);

  // A symlinked prefix: sandboxes need both the link path (venvs record it) and its target.
  const link = join(tmp, "py310-link");
  symlinkSync(prefix310, link);
  writeFileSync(join(home, "toolchains.json"), JSON.stringify({ "3.10": link }));
  const viaLink = await findToolchain("3.10", { home });
  assert.equal(viaLink.python, join(link, "bin", "python3.10"));
  assert.deepEqual(viaLink.mounts.sort(), [link, prefix310].sort());

  const wrong = join(tmp, "wrong.json");
  writeFileSync(wrong, JSON.stringify({ "3.9": prefix310 }));
  await assert.rejects(
    findToolchain("3.9", { configFile: wrong }),
    new RegExp(`"3\\.9" -> .* is Python ${v310.replace(/\./g, "\\.")}`),
  );
  writeFileSync(wrong, JSON.stringify({ "3.9": join(tmp, "nowhere") }));
  await assert.rejects(findToolchain("3.9", { configFile: wrong }), /no python interpreter there/);
  writeFileSync(wrong, "{");
  await assert.rejects(findToolchain("3.9", { configFile: wrong }), /wrong\.json: invalid JSON/);
});

test("conda envs found by conda-meta; a binary symlinked elsewhere brings its real prefix in", async () => {
  const v311 = newestOf("3.11")!;
  const realPrefix = join(pyenvRoot, "versions", v311);
  const root = join(tmp, "miniconda3");
  const env = join(root, "envs", "py311");
  mkdirSync(join(env, "bin"), { recursive: true });
  mkdirSync(join(env, "conda-meta"), { recursive: true });
  writeFileSync(join(env, "conda-meta", `python-${v311}-h955ad1f_0.json`), "{}");
  symlinkSync(join(realPrefix, "bin", "python3.11"), join(env, "bin", "python3.11"));
  mkdirSync(join(root, "conda-meta"), { recursive: true }); // a base env without python: skipped

  const t = await findToolchain("3.11", isolated({ condaRoots: [root] }));
  assert.equal(t.source, "conda");
  assert.equal(t.version, v311);
  assert.equal(t.prefix, env);
  assert.deepEqual(t.mounts.sort(), [env, realPrefix].sort());
  assert.equal(await reportedVersion(t), v311);
});

test("pythonX.Y on PATH: version asked from the interpreter, duplicates and shims skipped", async () => {
  const v38 = newestOf("3.8")!;
  const bin = join(tmp, "bin");
  mkdirSync(bin, { recursive: true });
  symlinkSync(join(pyenvRoot, "versions", v38, "bin", "python3.8"), join(bin, "python3.8"));
  const twin = join(tmp, "bin2");
  mkdirSync(twin, { recursive: true });
  symlinkSync(join(bin, "python3.8"), join(twin, "python3.8"));
  const shims = join(tmp, "fakepyenv", "shims");
  mkdirSync(shims, { recursive: true });
  writeFileSync(join(shims, "python3.7"), "#!/bin/sh\nexit 1\n", { mode: 0o755 });

  const all = await listToolchains(isolated({ env: { PATH: [shims, bin, twin].join(":") } }));
  assert.equal(all.length, 1, JSON.stringify(all));
  const [t] = all;
  assert.equal(t!.source, "path");
  assert.equal(t!.version, v38);
  assert.equal(t!.prefix, join(pyenvRoot, "versions", v38));
  assert.deepEqual(t!.mounts, [join(pyenvRoot, "versions", v38)]);

  // A system interpreter under /usr needs no mounts of its own.
  if (existsSync("/usr/bin/python3")) {
    const sys = await listToolchains(isolated({ env: { PATH: "/usr/bin" } }));
    for (const s of sys) {
      assert.equal(s.prefix, "/usr");
      assert.deepEqual(s.mounts, []);
    }
  }
});
