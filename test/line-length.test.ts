/** No tracked source line is longer than 120 characters (the formatter does not split long strings or test names). */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const MAX_CHARS = 120;
const FOLDERS = ["src", "bench/src", "test", "native", "scripts", "integrations/python"];
const EXTENSIONS = [".ts", ".mjs", ".c", ".h", ".py", ".sh"];

const EXCEPTIONS = new Set<string>([]);

function trackedFiles(): string[] {
  const out = execFileSync("git", ["ls-files", "-z", "--", ...FOLDERS], { cwd: ROOT, encoding: "utf8" });
  return out
    .split("\0")
    .filter((path) => EXTENSIONS.some((ext) => path.endsWith(ext)))
    .filter((path) => existsSync(join(ROOT, path)));
}

/** `path:line: length` for each line over the limit, counted in characters (code points), not bytes. */
function longLines(path: string): string[] {
  return readFileSync(join(ROOT, path), "utf8")
    .split("\n")
    .map((line, i) => ({ n: i + 1, chars: [...line.replace(/\r$/, "")].length }))
    .filter(({ chars }) => chars > MAX_CHARS)
    .map(({ n, chars }) => `${path}:${n}: ${chars} characters`);
}

test(`tracked source lines are at most ${MAX_CHARS} characters long`, () => {
  const files = trackedFiles();
  assert.ok(
    files.some((path) => path.startsWith("src/")),
    `no source file found under ${ROOT}`,
  );
  const long = files.filter((path) => !EXCEPTIONS.has(path)).flatMap(longLines);
  assert.deepEqual(long, [], `lines over ${MAX_CHARS} characters:\n${long.join("\n")}`);
});
