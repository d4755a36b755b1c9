import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  builtinSpecTable,
  builtinTablePath,
  canonicalJson,
  knownVersions,
  parseOverrides,
  specForInstance,
  specKey,
  SWESMITH_DEFAULTS,
} from "../src/env/spec.js";
import type { EnvSpec } from "../src/env/types.js";
import { normalizeInstance, type Instance } from "../src/tasks/index.js";

let tmp: string;
before(() => {
  tmp = mkdtempSync(join(tmpdir(), "msb-spec-"));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

type Raw = Record<string, Record<string, Record<string, unknown>>>;
/** The shipped file, read independently of the code under test. */
const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const rawFile = JSON.parse(readFileSync(join(packageRoot, "data", "swebench-python-specs.json"), "utf8")) as {
  specs: Raw;
  reqs_paths: Record<string, string[]>;
};

function instance(repo: string, version: string | undefined, extra: Record<string, unknown> = {}): Instance {
  return normalizeInstance({
    instance_id: `${repo.replace("/", "__")}-${version ?? "x"}`,
    repo,
    base_commit: "a".repeat(40),
    version,
    ...extra,
  });
}

test("the built-in table ships in the package and is found from the compiled module", () => {
  assert.equal(builtinTablePath(), join(packageRoot, "data", "swebench-python-specs.json"));
  assert.equal(Object.keys(builtinSpecTable().specs).length, Object.keys(rawFile.specs).length);
});

test("real lookups: sympy 1.1 -> python 3.9 with the table's fields", () => {
  const spec = specForInstance(instance("sympy/sympy", "1.1"));
  const raw = rawFile.specs["sympy/sympy"]!["1.1"]!;
  assert.equal(spec.python, "3.9");
  assert.equal(spec.repo, "sympy/sympy");
  assert.equal(spec.commit, "a".repeat(40));
  assert.equal(spec.install, raw.install);
  assert.equal(spec.packages, raw.packages);
  assert.deepEqual(spec.pip_packages, raw.pip_packages);
  assert.equal(spec.test_cmd, raw.test_cmd);
  assert.deepEqual(spec.pre_install, []);
  assert.deepEqual(spec.eval_commands, []);
  assert.deepEqual(spec.env, {});
  assert.equal(spec.extra, undefined);
});

test("real lookups: requirement paths, env setup commit, eval commands and unknown fields go where they belong", () => {
  const django = specForInstance(instance("django/django", "3.0", { environment_setup_commit: "e".repeat(40) }));
  const raw = rawFile.specs["django/django"]!["3.0"]!;
  assert.equal(django.packages, "requirements.txt");
  assert.deepEqual(django.eval_commands, raw.eval_commands);
  assert.deepEqual(django.extra, {
    reqs_paths: rawFile.reqs_paths["django/django"],
    environment_setup_commit: "e".repeat(40),
  });

  const pylint = specForInstance(instance("pylint-dev/pylint", "2.14"));
  assert.equal(pylint.extra?.nano_cpus, rawFile.specs["pylint-dev/pylint"]!["2.14"]!.nano_cpus);

  // dbt-core has no test_cmd in the harness table.
  assert.equal(specForInstance(instance("dbt-labs/dbt-core", "1.7")).test_cmd, "");
});

test("every repo/version of the table maps to a valid EnvSpec", () => {
  let n = 0;
  for (const [repo, versions] of Object.entries(rawFile.specs)) {
    for (const [version, raw] of Object.entries(versions)) {
      const spec = specForInstance(instance(repo, version));
      assert.equal(spec.python, raw.python, `${repo} ${version}`);
      assert.equal(typeof spec.test_cmd, "string");
      assert.ok(Array.isArray(spec.pip_packages) && Array.isArray(spec.pre_install));
      assert.match(specKey(spec), /^[0-9a-f]{64}$/);
      n++;
    }
  }
  assert.equal(
    n,
    Object.values(rawFile.specs).reduce((sum, v) => sum + Object.keys(v).length, 0),
  );
  assert.ok(n >= 300);
});

test("unknown repo / version / missing version: clear errors listing what is known", () => {
  assert.throws(
    () => specForInstance(instance("sympy/sympy", "9.9")),
    (e: Error & { code?: string }) => {
      assert.equal(e.code, "not_found");
      assert.match(
        e.message,
        new RegExp(
          "no environment spec for sympy/sympy version 9\\.9 .*known versions of sympy/sympy: " +
            "0\\.7, 1\\.0, 1\\.1, 1\\.2, .*1\\.14; give one with --specs FILE",
        ),
      );
      return true;
    },
  );
  const repoCount = Object.keys(rawFile.specs).length;
  assert.throws(
    () => specForInstance(instance("acme/widgets", "1.0")),
    new RegExp(
      `no environment spec for acme/widgets .*knows ${repoCount} repositories \\(astropy/astropy, .*sympy/sympy\\)`,
    ),
  );
  assert.throws(() => specForInstance(instance("sympy/sympy", undefined)), /has no "version"/);
  assert.deepEqual(knownVersions("acme/widgets"), []);
});

test('overrides: table < repo "*" < repo version < instance entry < row spec, field by field', () => {
  const file = join(tmp, "specs.json");
  const id = "sympy__sympy-1.1";
  writeFileSync(
    file,
    JSON.stringify({
      _comment: "ignored",
      "sympy/sympy": {
        "*": { install: "pip install .", pre_install: ["echo star"], env: { A: "star" } },
        "1.1": { pre_install: ["echo version"], pip_packages: ["mpmath==1.2.1"], timeout: 60 },
      },
      [id]: { env: { A: "instance", B: 2 }, test_cmd: ["bin/test", "-C"] },
    }),
  );
  const inst = instance("sympy/sympy", "1.1", { spec: { test_cmd: "bin/test --row" } });
  const spec = specForInstance(inst, { specsFile: file });
  const raw = rawFile.specs["sympy/sympy"]!["1.1"]!;
  assert.equal(spec.python, raw.python, "table field kept when nobody overrides it");
  assert.equal(spec.install, "pip install .", "repo * over table");
  assert.deepEqual(spec.pre_install, ["echo version"], "repo version over repo *");
  assert.deepEqual(spec.pip_packages, ["mpmath==1.2.1"]);
  assert.deepEqual(spec.env, { A: "instance", B: "2" }, "instance entry over repo entries; values as strings");
  assert.equal(spec.test_cmd, "bin/test --row", "row spec over everything");
  assert.deepEqual(spec.extra, { timeout: 60 }, "unknown override fields land in extra");
  // Without the row spec, the instance entry's list test_cmd is joined.
  assert.equal(specForInstance(instance("sympy/sympy", "1.1"), { specsFile: file }).test_cmd, "bin/test && -C");

  // Editing the file is picked up (cache keyed on mtime and size).
  writeFileSync(file, JSON.stringify({ "sympy/sympy": { "1.1": { python: "3.10" } } }));
  utimesSync(file, new Date(), new Date(Date.now() + 5000));
  assert.equal(specForInstance(instance("sympy/sympy", "1.1"), { specsFile: file }).python, "3.10");
});

test("overrides can define repos and versions the table lacks; the table's own format is accepted", () => {
  const overrides = parseOverrides(
    { specs: { "acme/widgets": { "2.0": { python: 3.12, install: "pip install -e .", test_cmd: "pytest -rA" } } } },
    "mine.json",
  );
  const spec = specForInstance(instance("acme/widgets", "2.0"), { overrides });
  assert.equal(spec.python, "3.12");
  assert.equal(spec.test_cmd, "pytest -rA");
  assert.throws(
    () => specForInstance(instance("acme/widgets", "2.1"), { overrides }),
    /no environment spec for acme\/widgets version 2\.1/,
  );
  // Only a row spec.
  const rowOnly = specForInstance(
    instance("acme/gadgets", "0.1", { spec: { python: "3.11", commit: "b".repeat(40) } }),
  );
  assert.equal(rowOnly.python, "3.11");
  assert.equal(rowOnly.commit, "b".repeat(40), "commit can be pinned by a spec");
  // A spec source without python is an error naming the sources.
  assert.throws(
    () => specForInstance(instance("acme/gadgets", "0.1", { spec: { install: "x" } })),
    /no python version .*row spec of acme__gadgets-0\.1/,
  );
});

test("override files: clear errors for bad shapes and types", () => {
  assert.throws(
    () => parseOverrides({ "sympy/sympy": { python: "3.9" } }, "o.json"),
    /o\.json: "sympy\/sympy" -> "python" must be an object of spec fields .*"\*"/,
  );
  assert.throws(() => parseOverrides({ "some-id": "3.9" }, "o.json"), /instance entry "some-id" must be an object/);
  assert.throws(() => parseOverrides([1], "o.json"), /expected a JSON object/);
  const bad = parseOverrides({ "sympy/sympy": { "1.1": { pip_packages: "mpmath" } } }, "o.json");
  assert.throws(
    () => specForInstance(instance("sympy/sympy", "1.1"), { overrides: bad }),
    /"pip_packages" .*must be a list of strings \(from o\.json sympy\/sympy 1\.1\)/,
  );
  const missing = join(tmp, "nope.json");
  assert.throws(
    () => specForInstance(instance("sympy/sympy", "1.1"), { specsFile: missing }),
    (e: Error & { code?: string }) => e.code === "not_found",
  );
  const broken = join(tmp, "broken.json");
  writeFileSync(broken, "{ nope");
  assert.throws(
    () => specForInstance(instance("sympy/sympy", "1.1"), { specsFile: broken }),
    /broken\.json: invalid JSON/,
  );
});

test("SWE-smith instances start from SWE-smith defaults; snapshot overrides apply", () => {
  const smith = normalizeInstance({
    instance_id: "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc",
    repo: "swesmith/oauthlib__oauthlib.1fd52536",
    patch: "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n",
    FAIL_TO_PASS: ["tests/test_a.py::test_x"],
    PASS_TO_PASS: [],
    image_name: "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536",
  });
  const spec = specForInstance(smith);
  assert.equal(spec.repo, "swesmith/oauthlib__oauthlib.1fd52536");
  assert.equal(spec.commit, "main");
  assert.equal(spec.python, SWESMITH_DEFAULTS.python);
  assert.equal(spec.install, SWESMITH_DEFAULTS.install);
  const pinned = specForInstance(smith, {
    overrides: parseOverrides({
      "swesmith/oauthlib__oauthlib.1fd52536": { "*": { commit: "c".repeat(40), python: "3.11" } },
    }),
  });
  assert.equal(pinned.commit, "c".repeat(40));
  assert.equal(pinned.python, "3.11");
  // Every task of one snapshot shares one environment.
  const other = normalizeInstance({ ...smith, instance_id: "oauthlib__oauthlib.1fd52536.lm_rewrite__q9ve64pd" });
  assert.equal(specKey(specForInstance(other)), specKey(spec));
});

test("specKey: sha256 of canonical JSON, stable under key order, sensitive to build inputs only", () => {
  const base: EnvSpec = specForInstance(instance("django/django", "3.0", { environment_setup_commit: "e".repeat(40) }));
  const key = specKey(base);
  assert.match(key, /^[0-9a-f]{64}$/);
  assert.equal(specKey(structuredClone(base)), key, "same spec, same key");

  // Independent derivation: sorted keys at every level, no whitespace, undefined dropped.
  const canonical = (schema: string) =>
    JSON.stringify({
      commit: base.commit,
      env: {},
      extra: { environment_setup_commit: "e".repeat(40), reqs_paths: ["tests/requirements/py3.txt"] },
      install: base.install,
      packages: base.packages,
      pip_packages: base.pip_packages,
      pre_install: base.pre_install,
      python: base.python,
      repo: base.repo,
      schema,
    });
  const sha = (text: string) => createHash("sha256").update(text).digest("hex");
  assert.equal(key, sha(canonical("minisandbox-env-v2")), "chronological testbeds: the current schema");
  // Full history is the testbed layers had before: their keys are the old schema's, so old stores stay valid.
  assert.equal(specKey({ ...base, history: "full" }), sha(canonical("minisandbox-env-v1")));

  // Object key order does not matter.
  const a: EnvSpec = { ...base, env: { X: "1", Y: "2" }, extra: { p: 1, q: { z: 1, a: 2 } } };
  const b: EnvSpec = { ...base, extra: { q: { a: 2, z: 1 }, p: 1 }, env: { Y: "2", X: "1" } };
  assert.equal(specKey(a), specKey(b));
  assert.equal(canonicalJson({ b: 1, a: [{ d: 1, c: undefined }] }), '{"a":[{"d":1}],"b":1}');

  // Everything that changes the built trees changes the key…
  const variants: [string, EnvSpec][] = [
    ["repo", { ...base, repo: "django/django-fork" }],
    ["commit", { ...base, commit: "b".repeat(40) }],
    ["python", { ...base, python: "3.7" }],
    ["packages", { ...base, packages: "environment.yml" }],
    ["pip_packages", { ...base, pip_packages: [...base.pip_packages, "x==1"] }],
    ["pre_install", { ...base, pre_install: ["apt-get install -y foo"] }],
    ["install", { ...base, install: "pip install ." }],
    ["env", { ...base, env: { LANG: "C" } }],
    ["extra", { ...base, extra: { ...base.extra, nano_cpus: 1 } }],
  ];
  const keys = new Set([key]);
  for (const [field, spec] of variants) {
    const k = specKey(spec);
    assert.notEqual(k, key, `${field} must change the key`);
    keys.add(k);
  }
  assert.equal(keys.size, variants.length + 1);
  // …but evaluation-time commands do not.
  assert.equal(specKey({ ...base, test_cmd: "pytest -x", eval_commands: ["echo"] }), key);
  // Empty extra is the same as none.
  assert.equal(specKey({ ...base, extra: {} }), specKey({ ...base, extra: undefined }));
});
