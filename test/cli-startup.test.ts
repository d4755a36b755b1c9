/**
 * The CLI loads only what the command needs: `--version` reads the package file and nothing else, declaring the
 * commands (help, usage errors) loads no product code beyond the parser, and a directory sandbox (`exec --dir`)
 * loads the door and the sandbox, never the environments' store, images or datasets, the server, the evaluation, the
 * rollouts or any package but the parser.
 * Checked by the modules the real process resolves (a loader hook), not by timing.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { realpathSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { namedCommand } from "../src/cli/named-command.js";
import { CLI, tempDir, tempHome } from "./helpers.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
/** Where packages really are (node_modules may be a link to another checkout's): shown as `node_modules/…`. */
const PACKAGES = realpathSync(join(ROOT, "node_modules"));
const scratch = tempDir();
const home = tempHome("msb-cli-startup-");

/** A preload that registers a resolve hook printing each module the process loads (`MODULE <path>` on stderr). */
function modulePreload(): string {
  const hook = join(scratch, "hook.mjs");
  writeFileSync(
    hook,
    "export async function resolve(specifier, context, next) {\n" +
      "  const r = await next(specifier, context);\n" +
      '  if (r.url.startsWith("file:")) process.stderr.write("MODULE " + r.url + "\\n");\n' +
      "  return r;\n}\n",
  );
  const preload = join(scratch, "preload.mjs");
  writeFileSync(
    preload,
    `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(hook).href)});\n`,
  );
  return preload;
}
const PRELOAD = modulePreload();

function packageRelative(file: string): string {
  const inPackages = relative(PACKAGES, file);
  if (!inPackages.startsWith("..")) return join("node_modules", inPackages);
  return relative(ROOT, file).replace(/^dist\//, "");
}

/** Run the CLI; its exit status, output and the modules it loaded, as package-relative paths (dist/ removed). */
function loaded(args: string[]): { status: number | null; stdout: string; stderr: string; modules: string[] } {
  const r = spawnSync(process.execPath, ["--import", PRELOAD, CLI, ...args], {
    encoding: "utf8",
    env: { ...process.env, MINISANDBOX_HOME: home },
  });
  const modules = new Set<string>();
  const rest: string[] = [];
  for (const line of r.stderr.split("\n")) {
    if (!line.startsWith("MODULE ")) rest.push(line);
    else modules.add(packageRelative(fileURLToPath(line.slice(7))));
  }
  modules.delete(relative(ROOT, PRELOAD));
  return { status: r.status, stdout: r.stdout, stderr: rest.join("\n"), modules: [...modules].sort() };
}

/** What declaring every command may load: the parser and the CLI's own option helpers. */
const DECLARING = [/^src\/cli\//, /^src\/util\//, /^src\/errors\.js$/, /^src\/env\/build-diagnosis\.js$/];
const PARSER = /^node_modules\/commander\//;
/** Never loaded for a directory sandbox (it goes through the door, src/env/workspace.ts, and no further). */
const NOT_FOR_A_DIR_SANDBOX =
  /^(src\/(server|eval|rollout|client|fixtures|wire|view|dashboard)\/|node_modules\/(?!commander))/;
/** Of the environments, a directory sandbox loads the door and what it is declared with: no store, image, dataset. */
const ENV_FOR_A_DIR_SANDBOX = ["build-diagnosis", "instance-image", "task-setup", "types", "workspace"].map(
  (m) => `src/env/${m}.js`,
);

test("--version loads the entry and the version file only", () => {
  for (const flag of ["--version", "-V"]) {
    const r = loaded([flag]);
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(r.modules, ["src/cli/index.js", "src/cli/version.js"]);
  }
});

test("help and usage errors load the parser and the command declarations, no product code", () => {
  for (const args of [["--help"], ["exec", "--help"], ["serve", "--help"], ["exec", "--no-such-flag"]]) {
    const r = loaded(args);
    assert.ok(
      r.modules.some((m) => PARSER.test(m)),
      `${args.join(" ")}: the parser was loaded`,
    );
    const extra = r.modules.filter((m) => !PARSER.test(m) && !DECLARING.some((d) => d.test(m)));
    assert.deepEqual(extra, [], `${args.join(" ")} loaded more than the declarations`);
  }
  assert.equal(loaded(["exec", "--no-such-flag"]).status, 2);
});

test("exec --dir runs a real sandbox and loads neither the server, the evaluation nor the parquet reader", () => {
  const dir = tempDir();
  writeFileSync(join(dir, "marker"), "here\n");
  const r = loaded(["--home", home, "exec", "--dir", dir, "--", "cat", "marker"]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, "here\n");
  assert.ok(r.modules.includes("src/sandbox/sandbox.js"));
  assert.deepEqual(
    r.modules.filter((m) => m.startsWith("src/cli/")),
    ["common", "exec", "index", "named-command", "program", "version", "workspace"].map((m) => `src/cli/${m}.js`),
    "exec declared alone: no other command's module",
  );
  assert.deepEqual(
    r.modules.filter((m) => NOT_FOR_A_DIR_SANDBOX.test(m)),
    [],
  );
  assert.deepEqual(
    r.modules.filter((m) => m.startsWith("src/env/") && !ENV_FOR_A_DIR_SANDBOX.includes(m)),
    [],
    "exec --dir loaded environment machinery",
  );
  assert.ok(!r.modules.some((m) => m.startsWith("src/tasks/") && m !== "src/tasks/types.js"), "no dataset reader");
});

test("the command a run names is read past the global options; help, the version or none name no command", () => {
  const names = ["exec", "serve"];
  assert.equal(namedCommand(["exec", "--dir", "d", "--", "serve"], names), "exec");
  assert.equal(namedCommand(["--home", "serve", "exec"], names), "exec", "--home's value is not the command");
  assert.equal(namedCommand(["--home=h", "serve", "--help"], names), "serve", "a command's own help is its own");
  for (const args of [[], ["--help", "exec"], ["-V"], ["help", "exec"], ["exce"], ["--no-such", "exec"]])
    assert.equal(namedCommand(args, names), undefined, args.join(" "));
});
