/**
 * The Python package's copy of the TypeScript declarations it must agree with (minisandbox/_generated.py: the error
 * tree of src/errors.ts, the home and token file of src/util/home.ts and src/wire/token-file.ts) is what
 * scripts/generate-python.mjs makes of them now.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import * as errors from "../src/errors.js";
import { run } from "../src/util/run.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const SCRIPT = join(ROOT, "scripts", "generate-python.mjs");

// Regenerate with: npm run build && node scripts/generate-python.mjs
test("the committed minisandbox/_generated.py is what the generator makes of the TypeScript declarations", async () => {
  const r = await run(process.execPath, [SCRIPT, "--check"], { timeoutMs: 30_000 });
  assert.equal(r.code, 0, r.stderr);
});

test("the generated module has every code and every error class, each code answered by its own class", async () => {
  const gen = (await import(pathToFileURL(SCRIPT).href)) as { generatePython(): Promise<string> };
  const text = await gen.generatePython();
  const section = (name: string): string => text.split(`${name}: `)[1]!.split("\n}\n")[0]!;
  for (const [code, status] of Object.entries(errors.HTTP_STATUS))
    assert.ok(section("HTTP_STATUS").includes(`"${code}": ${status},`), code);
  const classes = Object.entries(errors).filter(
    ([, v]) =>
      typeof v === "function" && (v === errors.MinisandboxError || v.prototype instanceof errors.MinisandboxError),
  );
  assert.ok(classes.length >= 20, "the error classes were found");
  for (const [name, cls] of classes) {
    const parent = cls === errors.MinisandboxError ? "None" : `"${Object.getPrototypeOf(cls).name}"`;
    assert.ok(section("ERROR_PARENTS").includes(`"${name}": ${parent},`), name);
  }
  const codeClasses = section("CODE_CLASSES");
  for (const [code, cls] of [
    ["sandbox_not_found", "SandboxNotFoundError"],
    ["validation_failed", "RequestValidationError"],
    ["sandbox_error", "SandboxError"],
    ["peer_not_allowed", "PeerNotAllowedError"],
    ["non_zero_exit", "SessionError"],
    ["internal_error", "MinisandboxError"],
  ])
    assert.ok(codeClasses.includes(`"${code}": "${cls}",`), `${code} -> ${cls}`);
  assert.match(text, /^HOME_ENV: .*\("MINISANDBOX_HOME", None\), \("XDG_DATA_HOME", "minisandbox"\)\)$/m);
  assert.match(text, /^TOKEN_FILE: tuple\[str, \.\.\.\] = \("server", "token"\)$/m);
});
