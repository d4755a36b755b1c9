/**
 * What the npm package ships: the product (compiled src/, the dashboard's browser modules, the native helper, the
 * spec table, the Python package), never the bench, the tests or their fixtures; and every module it ships imports
 * only modules it ships.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { runOk } from "../src/util/run.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

async function packedFiles(): Promise<string[]> {
  const out = await runOk("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: ROOT, timeoutMs: 60_000 });
  const [pack] = JSON.parse(out) as { files: { path: string }[] }[];
  return pack!.files.map((f) => f.path);
}

/** Relative `import` / `export … from` / `import()` specifiers of a compiled module. */
function relativeImports(source: string): string[] {
  const found = source.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^import\s*)["'](\.{1,2}\/[^"']+)["']/gm);
  return [...found].map((m) => m[1]!);
}

test("the npm package ships the product and nothing of the bench or the tests", async () => {
  const files = await packedFiles();
  const has = new Set(files);
  for (const needed of [
    "dist/src/index.js",
    "dist/src/index.d.ts",
    "dist/src/cli/index.js",
    "dist/web/src/dashboard/app.js",
    "dist/native/msb-helper",
    "data/swebench-python-specs.json",
    "cjs/index.cjs",
    "integrations/python/pyproject.toml",
    "integrations/python/minisandbox/__init__.py",
    "integrations/python/minisandbox/py.typed",
  ])
    assert.ok(has.has(needed), `${needed} is packed`);
  const unwanted = files.filter((f) =>
    /^(bench|test|dist\/bench|dist\/test|src)\/|__pycache__|\.pyc$|\/tests\//.test(f),
  );
  assert.deepEqual(unwanted, [], "nothing of the bench, the tests or bytecode is packed");
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { exports: Record<string, unknown> };
  assert.deepEqual(Object.keys(pkg.exports).sort(), [".", "./package.json"], "no deep imports into dist/");
});

test("every shipped module imports only shipped modules", async () => {
  const files = await packedFiles();
  const has = new Set(files);
  const missing: string[] = [];
  let checked = 0;
  for (const file of files.filter((f) => f.endsWith(".js"))) {
    for (const spec of relativeImports(readFileSync(join(ROOT, file), "utf8"))) {
      checked++;
      const target = normalize(join(dirname(file), spec));
      if (!has.has(target)) missing.push(`${file} -> ${target}`);
    }
  }
  assert.ok(checked > 500, `the compiled modules' imports were found (${checked})`);
  assert.deepEqual(relativeImports('import { a } from "./a.js";\nconst m = await import("../b/c.js");'), [
    "./a.js",
    "../b/c.js",
  ]);
  assert.deepEqual(missing, [], "imports of modules the package does not ship");
});
