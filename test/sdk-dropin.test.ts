/**
 * The TypeScript SDK as its users meet it: the README examples compiled (as a consumer project importing
 * "minisandbox") and run against real sandboxes and a real server; ESM only, said clearly to CommonJS; every public
 * name at the package root; options validated before sending; and parity with the in-process API and E2B's:
 * streaming output, background commands with wait/kill, files.list/exists/remove, setTimeout, kill, camelCase.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import ts from "typescript";
import * as root from "../src/index.js";
import { InvalidInputError, RemoteSandbox, SandboxNotFoundError } from "../src/index.js";
import { startServer, type RunningServer } from "../src/server/index.js";
import { run } from "../src/util/run.js";
import { tempDir, tempHome } from "./helpers.js";
import { preparedFixture } from "./agent-clients.js";
import { startServe } from "./serve-process.js";

const REPO = join(import.meta.dirname, "..", "..");
const TOKEN = "sdk-dropin-token";
// Made at the top: a home made inside the `before` hook was never removed (its `after` did not run).
const home = tempHome("msb-sdk-");
let srv: RunningServer;

before(async () => {
  srv = await startServer({ home, authToken: TOKEN, allowDirs: [tmpdir()] });
});
after(() => srv?.close());

/** The ```ts blocks of a Markdown file. */
function tsBlocks(file: string): string[] {
  return [...readFileSync(file, "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

/** A consumer project: `minisandbox` resolved through the package's own exports, as after `npm install`. */
function consumerProject(): string {
  const dir = tempDir("msb-consumer-");
  mkdirSync(join(dir, "node_modules"));
  symlinkSync(REPO, join(dir, "node_modules", "minisandbox"));
  writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
  return dir;
}

/** Type-check files of a consumer project with the repository's TypeScript, as a user's tsconfig would. */
function typeCheck(dir: string, files: string[]): string[] {
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    lib: ["lib.es2022.d.ts", "lib.esnext.disposable.d.ts"],
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: ["node"],
    typeRoots: [join(REPO, "node_modules", "@types")],
  };
  const program = ts.createProgram(
    files.map((f) => join(dir, f)),
    options,
  );
  return ts
    .getPreEmitDiagnostics(program)
    .map((d) => `${d.file?.fileName ?? ""}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`);
}

function transpile(dir: string, file: string): string {
  const out = file.replace(/\.ts$/, ".mjs");
  const js = ts.transpileModule(readFileSync(join(dir, file), "utf8"), {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
  }).outputText;
  writeFileSync(join(dir, out), js);
  return out;
}

test("the README examples compile as a consumer's code and run as written", async (t) => {
  const fx = await preparedFixture();
  const dir = consumerProject();
  const [inProcess] = tsBlocks(join(REPO, "README.md"));
  const [remote] = tsBlocks(join(REPO, "src", "client", "README.md"));
  assert.ok(inProcess && remote, "both READMEs have a TypeScript example");
  writeFileSync(join(dir, "in-process.ts"), inProcess);
  writeFileSync(join(dir, "remote.ts"), remote);
  assert.deepEqual(typeCheck(dir, ["in-process.ts", "remote.ts"]), []);
  // What the in-process example expects next to it: a repository with tests, and the dataset of its instance.
  mkdirSync(join(dir, "repo"));
  writeFileSync(join(dir, "repo", "test_ok.py"), "def test_ok():\n    assert 1 + 1 == 2\n");
  copyFileSync(fx.dataset, join(dir, "dataset.json"));
  const env = { PATH: process.env.PATH, MINISANDBOX_HOME: fx.home, NO_PROXY: "*" };
  const a = await run(process.execPath, [transpile(dir, "in-process.ts")], { cwd: dir, env, timeoutMs: 120_000 });
  assert.equal(a.code, 0, a.stdout + a.stderr);
  // The operator's memory maximum: the examples ask for 512 MiB, above what a busy small machine derives.
  const server = await startServe(fx.home, ["--dataset", fx.dataset, "--memory", "1G"]);
  const b = await run(process.execPath, [transpile(dir, "remote.ts")], {
    cwd: dir,
    env: { ...env, MINISANDBOX_URL: server.url },
    timeoutMs: 240_000,
  });
  assert.equal(b.code, 0, b.stdout + b.stderr);
  assert.match(b.stdout, /passed/, "the streamed pytest output reached onStdout");
  assert.match(b.stdout, /"resolved"|resolved: /, "evaluate answered");
  t.diagnostic(`remote example printed ${b.stdout.length} characters`);
});

test("ESM only: require() gets one line saying how to import; import gets every public name at the root", async () => {
  const dir = consumerProject();
  const r = await run(process.execPath, ["-e", 'require("minisandbox")'], { cwd: dir });
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /minisandbox is an ES module \(ESM only\).*import \{ Sandbox \} from "minisandbox"/);
  const names = await run(
    process.execPath,
    ["--input-type=module", "-e", 'console.log(Object.keys(await import("minisandbox")).join(" "))'],
    {
      cwd: dir,
    },
  );
  assert.equal(names.code, 0, names.stderr);
  for (const name of ["Sandbox", "RemoteSandbox", "RemoteSession", "InvalidInputError", "startServer", "runEvaluation"])
    assert.ok(names.stdout.split(" ").includes(name), `${name} at the root: ${names.stdout}`);
  assert.equal(typeof root.RemoteSandbox.create, "function");
});

test("bad options are refused before anything is sent, each naming the option", async () => {
  const url = srv.url;
  const bad: [string, () => Promise<unknown>, RegExp][] = [
    [
      "2 << 31 bytes",
      () => RemoteSandbox.create({ url, apiKey: TOKEN, limits: { memoryBytes: 2 << 31 } }),
      /limits\.memoryBytes/,
    ],
    ["NaN pids", () => RemoteSandbox.create({ url, apiKey: TOKEN, limits: { pids: Number.NaN } }), /limits\.pids/],
    ["fractional pids", () => RemoteSandbox.create({ url, apiKey: TOKEN, limits: { pids: 1.5 } }), /limits\.pids/],
    ["negative TTL", () => RemoteSandbox.create({ url, apiKey: TOKEN, timeoutMs: -1 }), /timeoutMs/],
    ["infinite idle", () => RemoteSandbox.create({ url, apiKey: TOKEN, idleTimeoutMs: Infinity }), /idleTimeoutMs/],
    [
      "unknown limit",
      () => RemoteSandbox.create({ url, apiKey: TOKEN, limits: { memory: 1 } as never }),
      /limits\.memory/,
    ],
  ];
  for (const [what, fn, re] of bad)
    await assert.rejects(fn, (e: Error) => e instanceof InvalidInputError && re.test(e.message), what);
  assert.equal(srv.registry.size + srv.registry.pendingCreations, 0, "nothing reached the server");
  await using sb = await RemoteSandbox.create({ url, apiKey: TOKEN });
  await assert.rejects(sb.commands.run("true", { timeoutMs: 0 }), /timeoutMs must be a positive number/);
  await assert.rejects(
    sb.commands.run("true", { outputLimitBytes: 1.5 }),
    /outputLimitBytes must be a positive integer/,
  );
  await assert.rejects(sb.setTimeout(Number.NaN), InvalidInputError);
  await assert.rejects(sb.commands.run([]), /command: empty argv/);
});

test("remote parity: streaming, background handle with wait/kill, files, setTimeout, kill, camelCase", async () => {
  const quiet = await RemoteSandbox.create({ url: srv.url, apiKey: TOKEN });
  const silent = await quiet.commands.run("sleep 300", { background: true });
  assert.equal(silent.stdout, "", "a command that prints nothing still starts at once");
  assert.equal(await silent.kill(), true);
  await quiet.kill();
  const url = srv.url;
  const sb = await RemoteSandbox.create({ url, apiKey: TOKEN, python: "3.11" });
  assert.equal(typeof sb.info.runtimeUrl, "string");
  assert.ok(!("runtime_url" in sb.info), "answers are camelCase");
  assert.match((await sb.commands.run("python --version")).stdout, /^Python 3\.11\./);

  const chunks: string[] = [];
  const errs: string[] = [];
  const r = await sb.commands.run("echo one; echo warn >&2; echo two", {
    onStdout: (s) => chunks.push(s),
    onStderr: (s) => errs.push(s),
  });
  assert.equal(r.exitCode, 0);
  assert.equal(chunks.join(""), "one\ntwo\n");
  assert.equal(r.stdout, "one\ntwo\n");
  assert.equal(errs.join(""), "warn\n");
  const merged = await sb.commands.run("echo a; echo b >&2", { mergeOutput: true, onStdout: () => {}, cwd: "/tmp" });
  assert.equal(merged.stdout, "a\nb\n");
  const slow = await sb.commands.run("echo partial; sleep 30", { timeoutMs: 500, onStdout: () => {} });
  assert.deepEqual([slow.timedOut, slow.exitCode, slow.stdout], [true, 124, "partial\n"]);

  // A background command streams while it runs; kill() stops its whole tree.
  const h = await sb.commands.run("echo started; sleep 300 & wait", { background: true });
  for (let i = 0; i < 200 && !h.stdout.includes("started"); i++) await new Promise((res) => setTimeout(res, 25));
  assert.equal(h.stdout, "started\n", "output arrived while the command was still running");
  assert.equal((await sb.commands.run("pgrep -c -x sleep")).stdout.trim(), "1");
  assert.equal(await h.kill(), true);
  const killed = await h.wait();
  assert.deepEqual([killed.exitCode, killed.signal, killed.stdout], [137, "SIGKILL", "started\n"]);
  let left = "1";
  for (let i = 0; i < 100 && left !== "0"; i++) {
    left = (await sb.commands.run("pgrep -c -x sleep || true")).stdout.trim();
    if (left !== "0") await new Promise((res) => setTimeout(res, 50));
  }
  assert.equal(left, "0", "the killed command's processes are gone");
  const done = await sb.commands.run("echo fast", { background: true });
  assert.equal((await done.wait()).stdout, "fast\n");
  assert.equal(await done.kill(), false, "nothing to kill once it ended");

  await sb.files.write("/tmp/d/a.txt", "A");
  await sb.files.mkdir("/tmp/d/sub");
  const entries = await sb.files.list("/tmp/d");
  assert.deepEqual(entries.map((e) => [e.name, e.type]).sort(), [
    ["a.txt", "file"],
    ["sub", "dir"],
  ]);
  assert.equal(entries.find((e) => e.name === "a.txt")!.size, 1);
  assert.equal(await sb.files.exists("/tmp/d/a.txt"), true);
  await sb.files.remove("/tmp/d/a.txt");
  assert.equal(await sb.files.exists("/tmp/d/a.txt"), false);
  await assert.rejects(sb.files.list("/no/such/dir"), /no\/such\/dir/);

  // `info` follows what the server said last: after setTimeout, and after a refresh, the new expiry is there.
  const later = await sb.setTimeout(60_000);
  assert.ok(later.expiresAt !== null && sb.info.expiresAt === later.expiresAt, JSON.stringify(sb.info));
  const fresh = await sb.refresh();
  assert.equal(fresh.expiresAt, later.expiresAt);
  assert.equal(sb.info, fresh);
  const info = await sb.setTimeout(800);
  assert.ok(Date.parse(info.expiresAt!) - Date.now() <= 800);
  let gone = false;
  for (let i = 0; i < 100 && !gone; i++) {
    gone = !(await sb.isAlive());
    if (!gone) await new Promise((res) => setTimeout(res, 50));
  }
  assert.ok(gone, "the sandbox ended at its new deadline");
  await assert.rejects(sb.refresh(), SandboxNotFoundError);

  const other = await RemoteSandbox.create({ url, apiKey: TOKEN });
  await other.kill();
  await assert.rejects(RemoteSandbox.connect({ url, apiKey: TOKEN, id: other.id }), SandboxNotFoundError);
});
