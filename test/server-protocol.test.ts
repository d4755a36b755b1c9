/**
 * Conformance of the HTTP server with the SWE-ReX remote-runtime protocol (swe-rex 1.4) and of its native
 * lifecycle API: real HTTP on 127.0.0.1, real sandboxes, a real provider (temp git repos), a real `serve` child.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { startServer, type RunningServer, type WorkspaceProvider } from "../src/server/index.js";
import { buildZip, zipDirectory } from "../src/client/zip.js";
import { NotFoundError } from "../src/errors.js";
import { runOk } from "../src/util/run.js";
import type { Sandbox } from "../src/sandbox/sandbox.js";
import { Workspace } from "../src/env/workspace.js";
import { cgroupsLeft, processesMatching, scratchDirs, tempDir, tempHome } from "./helpers.js";

const TOKEN = "s3cret-token";
const home = tempHome("msb-srv-");
let srv: RunningServer;
/** Runtime prefix of the shared sandbox. */
let P = "";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
// biome-ignore lint/suspicious/noExplicitAny: test bodies are read loosely
type Json = any;
interface Res {
  status: number;
  json: Json;
  text: string;
  headers: Headers;
}

async function call(
  method: string,
  path: string,
  body?: unknown,
  o: { key?: string | null; headers?: Record<string, string>; base?: string } = {},
): Promise<Res> {
  const headers: Record<string, string> = {};
  if (o.key !== null) headers["X-API-Key"] = o.key ?? TOKEN;
  let payload: FormData | string | undefined;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) {
    headers["content-type"] = "application/json";
    payload = typeof body === "string" ? body : JSON.stringify(body);
  }
  Object.assign(headers, o.headers ?? {});
  const res = await fetch((o.base ?? srv.url) + path, { method, headers, body: payload });
  const text = await res.text();
  let json: Json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, headers: res.headers };
}

async function waitFor(cond: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const post = (path: string, body?: unknown, o?: Parameters<typeof call>[3]) => call("POST", path, body, o);

function is511(r: Res, classPath: string, message?: RegExp | string): void {
  assert.equal(r.status, 511, r.text);
  const x = r.json.swerexception;
  assert.deepEqual(Object.keys(x).sort(), ["class_path", "extra_info", "message", "traceback"]);
  assert.equal(x.class_path, classPath, x.message);
  // No stack of the server's: the exception's line, as Python's format_exception_only prints it.
  assert.equal(x.traceback, `${classPath.slice(classPath.lastIndexOf(".") + 1)}: ${x.message}\n`);
  if (typeof message === "string") assert.equal(x.message, message);
  else if (message) assert.match(x.message, message);
}

function form(fields: Record<string, string>, file?: { data: Buffer; name: string }): FormData {
  const f = new FormData();
  if (file) f.append("file", new Blob([file.data]), file.name);
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  return f;
}

async function newSandbox(body: Record<string, unknown> = {}, base?: string): Promise<Json> {
  const r = await post("/sandboxes", body, base ? { base } : undefined);
  assert.equal(r.status, 201, r.text);
  return r.json;
}

before(async () => {
  srv = await startServer({ home, authToken: TOKEN, maxSandboxes: 8, allowDirs: [tmpdir()] });
  const sb = await newSandbox();
  P = `/sandboxes/${sb.id}`;
});
after(() => srv?.close());

// ------------------------------------------------------------------------------------------------- auth

test("auth: missing key 403, wrong key 401, checked before routing; /healthz is open", async () => {
  for (const [method, path] of [
    ["GET", "/"],
    ["GET", "/create_session"],
    ["GET", `${P}/run_in_session`],
    ["POST", `${P}/execute`],
    ["GET", "/sandboxes"],
    ["GET", "/metrics"],
    ["DELETE", "/no/such/route"],
  ] as const) {
    const missing = await call(method, path, undefined, { key: null });
    assert.equal(missing.status, 403, `${method} ${path}`);
    assert.deepEqual(missing.json, { detail: "Not authenticated" });
    const wrong = await call(method, path, undefined, { key: "nope" });
    assert.equal(wrong.status, 401, `${method} ${path}`);
    assert.deepEqual(wrong.json, { detail: "Invalid API Key" });
  }
  const health = await call("GET", "/healthz", undefined, { key: null });
  assert.equal(health.status, 200);
  assert.equal(health.json.status, "ok");
  // With the key: a wrong method is 405 (FastAPI), an unknown path 404.
  assert.equal((await call("GET", `${P}/run_in_session`)).status, 405);
  assert.deepEqual((await call("GET", `${P}/run_in_session`)).json, { detail: "Method Not Allowed" });
  assert.equal((await call("GET", "/no/such/route")).status, 404);
  await assert.rejects(startServer({ home, host: "0.0.0.0", noAuth: true }), /loopback only/);
});

test("probes: GET / and /is_alive answer exactly; unknown sandbox is 404", async () => {
  assert.deepEqual((await call("GET", "/")).json, { message: "hello world" });
  assert.deepEqual((await call("GET", `${P}/`)).json, { message: "hello world" });
  const alive = await call("GET", `${P}/is_alive`);
  assert.equal(alive.status, 200);
  assert.deepEqual(alive.json, { is_alive: true, message: "" });
  const gone = await call("GET", "/sandboxes/sb-000000000000/is_alive");
  assert.equal(gone.status, 404);
  assert.match(gone.json.detail, /not found/);
  assert.equal((await post("/sandboxes/sb-000000000000/execute", { command: "true" })).status, 404);
});

// -------------------------------------------------------------------------------------------- sessions

test("create_session: defaults, startup_source, output shape, duplicates, validation", async () => {
  const r = await post(`${P}/create_session`, {});
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { output: "", session_type: "bash" });
  is511(
    await post(`${P}/create_session`, { session: "default" }),
    "swerex.exceptions.SessionExistsError",
    "session default already exists",
  );
  await post(`${P}/write_file`, { path: "/root/.bashrc", content: "export FROM_RC=yes\nPS1='custom> '\n" });
  const rc = await post(`${P}/create_session`, {
    session: "rc",
    startup_source: ["/root/.bashrc"],
    startup_timeout: 10,
    session_type: "bash",
  });
  assert.deepEqual(rc.json, { output: "", session_type: "bash" });
  const echo = await post(`${P}/run_in_session`, { session: "rc", command: "echo $FROM_RC" });
  assert.equal(echo.json.output, "yes\n");
  const bad = await post(`${P}/create_session`, { session_type: "zsh" });
  assert.equal(bad.status, 422);
  assert.equal(bad.json.detail[0].type, "union_tag_invalid");
  const badTypes = await post(`${P}/create_session`, { startup_source: "x", startup_timeout: "soon" });
  assert.equal(badTypes.status, 422);
  assert.deepEqual(
    badTypes.json.detail.map((d: Json) => [d.type, d.loc.join(".")]),
    [
      ["list_type", "body.bash.startup_source"],
      ["float_parsing", "body.bash.startup_timeout"],
    ],
  );
  assert.deepEqual((await post(`${P}/close_session`, { session: "rc" })).json, { session_type: "bash" });
});

test("run_in_session: state persists; observation shape; check raise/silent/ignore; error_msg", async () => {
  await post(`${P}/create_session`, { session: "run" });
  const s = (body: Record<string, unknown>) => post(`${P}/run_in_session`, { session: "run", ...body });
  const a = await s({ command: "cd /tmp && export FOO=bar && greet() { echo hi $1; }" });
  assert.deepEqual(a.json, { output: "", exit_code: 0, failure_reason: "", expect_string: "", session_type: "bash" });
  assert.equal((await s({ command: "pwd; echo $FOO; greet you" })).json.output, "/tmp\nbar\nhi you\n");
  assert.equal((await s({ command: "(exit 7)", check: "silent" })).json.exit_code, 7);
  assert.equal((await s({ command: "false", check: "ignore" })).json.exit_code, null);
  is511(
    await s({ command: "echo out; false" }),
    "swerex.exceptions.NonZeroExitCodeError",
    "Command 'echo out; false' failed with exit code 1. Here is the output:\n'out\\n'",
  );
  is511(
    await s({ command: "exit_three() { return 3; }; exit_three", error_msg: "setup failed" }),
    "swerex.exceptions.NonZeroExitCodeError",
    /^setup failed: Command /,
  );
  // Every field has its default; the discriminator may be given or not.
  const explicit = await s({
    command: "echo x",
    timeout: null,
    is_interactive_command: false,
    is_interactive_quit: false,
    check: "raise",
    error_msg: "",
    expect: [],
    action_type: "bash",
  });
  assert.equal(explicit.json.output, "x\n");
  is511(
    await post(`${P}/run_in_session`, { session: "nope", command: "true" }),
    "swerex.exceptions.SessionDoesNotExistError",
    "session 'nope' does not exist",
  );
  const missing = await post(`${P}/run_in_session`, { session: "run" });
  assert.equal(missing.status, 422);
  assert.deepEqual(missing.json.detail, [
    { type: "missing", loc: ["body", "bash", "command"], msg: "Field required", input: { session: "run" } },
  ]);
  const badCheck = await s({ command: "true", check: "loud" });
  assert.equal(badCheck.json.detail[0].msg, "Input should be 'silent', 'raise' or 'ignore'");
});

test("run_in_session: syntax errors raise BashIncorrectSyntaxError with extra_info and run nothing", async () => {
  await post(`${P}/create_session`, { session: "syn" });
  const r = await post(`${P}/run_in_session`, { session: "syn", command: "touch /tmp/ran; if true; then echo" });
  is511(
    r,
    "swerex.exceptions.BashIncorrectSyntaxError",
    /^Error \(exit code 2\) while checking bash command \n'touch \/tmp\/ran; if true; then echo'\n---- Stderr ----\n/,
  );
  assert.deepEqual(Object.keys(r.json.swerexception.extra_info).sort(), ["bash_stderr", "bash_stdout"]);
  assert.match(r.json.swerexception.extra_info.bash_stderr, /syntax error/);
  const ran = await post(`${P}/run_in_session`, { session: "syn", command: "test -e /tmp/ran", check: "silent" });
  assert.equal(ran.json.exit_code, 1);
});

test("timeout raises CommandTimeoutError (float seconds), interrupt brings the session back", async () => {
  await post(`${P}/create_session`, { session: "slow" });
  const t = await post(`${P}/run_in_session`, { session: "slow", command: "sleep 30", timeout: 1 });
  is511(t, "swerex.exceptions.CommandTimeoutError", "timeout after 1.0 seconds while running command 'sleep 30'");
  const t2 = await post(`${P}/run_in_session`, { session: "slow", command: "sleep 31", timeout: 0.3 });
  is511(t2, "swerex.exceptions.CommandTimeoutError", "timeout after 0.3 seconds while running command 'sleep 31'");
  const i = await post(`${P}/run_in_session`, { session: "slow", action_type: "bash_interrupt" });
  assert.equal(i.status, 200, i.text);
  assert.deepEqual(Object.keys(i.json).sort(), [
    "exit_code",
    "expect_string",
    "failure_reason",
    "output",
    "session_type",
  ]);
  assert.equal(i.json.exit_code, 0);
  assert.equal((await post(`${P}/run_in_session`, { session: "slow", command: "echo back" })).json.output, "back\n");
  // A command that ignores SIGINT is stopped by stronger means.
  await post(`${P}/run_in_session`, {
    session: "slow",
    command: "python3 -c 'import signal,time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)'",
    timeout: 0.5,
  });
  const i2 = await post(`${P}/run_in_session`, {
    session: "slow",
    action_type: "bash_interrupt",
    timeout: 0.2,
    n_retry: 2,
    expect: [],
  });
  assert.equal(i2.status, 200, i2.text);
  assert.equal(
    (await post(`${P}/run_in_session`, { session: "slow", command: "echo recovered", timeout: 5 })).json.output,
    "recovered\n",
  );
});

test("expect patterns and interactive programs", async () => {
  await post(`${P}/create_session`, { session: "py" });
  const s = (body: Record<string, unknown>) => post(`${P}/run_in_session`, { session: "py", ...body });
  const start = await s({ command: "python3 -i -q", is_interactive_command: true, expect: [">>> "], timeout: 10 });
  assert.equal(start.json.expect_string, ">>> ");
  assert.equal(start.json.exit_code, 0);
  assert.match(
    (await s({ command: "print(6 * 7)", is_interactive_command: true, expect: [">>> "], timeout: 5 })).json.output,
    /42/,
  );
  assert.equal((await s({ command: "exit()", is_interactive_quit: true, timeout: 5 })).status, 200);
  assert.equal((await s({ command: "echo shell" })).json.output, "shell\n");
  const e = await s({ command: "echo ready-now; sleep 5", expect: ["ready-\\w+"], timeout: 5 });
  assert.equal(e.json.expect_string, "ready-\\w+");
  assert.equal(e.json.exit_code, null);
  await s({ action_type: "bash_interrupt" });
  assert.equal((await s({ command: "echo ok" })).json.output, "ok\n");
});

test("large outputs come back whole up to the limit, then head and tail with a marker", async () => {
  await post(`${P}/create_session`, { session: "big" });
  const mid = await post(`${P}/run_in_session`, { session: "big", command: "seq 1 50000" });
  assert.equal(mid.json.output, Array.from({ length: 50000 }, (_, i) => `${i + 1}\n`).join(""));
  const huge = await post(`${P}/run_in_session`, {
    session: "big",
    command: "echo START; seq 1 1500000; echo END",
    timeout: 60,
  });
  assert.ok(huge.json.output.startsWith("START\n1\n2\n"));
  assert.ok(huge.json.output.endsWith("1500000\nEND\n"));
  assert.match(huge.json.output, /characters of output omitted/);
  const ex = await post(`${P}/execute`, { command: ["seq", "1", "300000"] });
  assert.equal(ex.json.stdout.length, Array.from({ length: 300000 }, (_, i) => `${i + 1}\n`).join("").length);
});

test("sessions and sandboxes are independent: a long command delays nothing else", async () => {
  const other = await newSandbox();
  const Q = `/sandboxes/${other.id}`;
  await post(`${P}/create_session`, { session: "long" });
  await post(`${P}/create_session`, { session: "quick" });
  await post(`${Q}/create_session`, {});
  // Ordering, not wall-clock budgets: the host may be loaded. Blocked requests would finish after the long one.
  let longDone = 0;
  const long = post(`${P}/run_in_session`, { session: "long", command: "sleep 5; echo done" }).then((r) => {
    longDone = Date.now();
    return r;
  });
  await new Promise((r) => setTimeout(r, 200));
  const results = await Promise.all([
    ...Array.from({ length: 10 }, (_, i) => post(`${P}/run_in_session`, { session: "quick", command: `echo q${i}` })),
    ...Array.from({ length: 10 }, (_, i) => post(`${Q}/run_in_session`, { command: `echo o${i}` })),
    ...Array.from({ length: 5 }, () => post(`${P}/execute`, { command: "true" })),
    call("GET", `${P}/is_alive`),
    post("/sandboxes", {}),
  ]);
  assert.equal(longDone, 0, "the other requests finished while the long command was still running");
  for (const [i, r] of results.slice(0, 10).entries()) assert.equal(r.json.output, `q${i}\n`);
  for (const [i, r] of results.slice(10, 20).entries()) assert.equal(r.json.output, `o${i}\n`);
  assert.equal((await long).json.output, "done\n");
  await call("DELETE", `/sandboxes/${results[results.length - 1]!.json.id}`);
  await call("DELETE", `/sandboxes/${other.id}`);
});

test("close_session and close: sessions end, the sandbox stays", async () => {
  const sb = await newSandbox();
  const Q = `/sandboxes/${sb.id}`;
  await post(`${Q}/create_session`, { session: "a" });
  await post(`${Q}/create_session`, { session: "b" });
  assert.deepEqual((await call("GET", Q)).json.sessions.sort(), ["a", "b"]);
  assert.deepEqual((await post(`${Q}/close_session`, { session: "a", session_type: "bash" })).json, {
    session_type: "bash",
  });
  is511(await post(`${Q}/close_session`, { session: "a" }), "swerex.exceptions.SessionDoesNotExistError");
  // SWE-ReX's client POSTs /close with no body at all.
  const res = await fetch(`${srv.url}${Q}/close`, { method: "POST", headers: { "X-API-Key": TOKEN } });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), {});
  assert.deepEqual((await call("GET", Q)).json.sessions, []);
  assert.deepEqual((await call("GET", `${Q}/is_alive`)).json, { is_alive: true, message: "" });
  assert.equal((await post(`${Q}/create_session`, { session: "a" })).status, 200);
  await call("DELETE", Q);
});

// --------------------------------------------------------------------------------------------- execute

test("execute: shlex split, shell, lists, env replaces, cwd, merged streams, exit codes", async () => {
  const x = (body: Record<string, unknown>) => post(`${P}/execute`, body);
  assert.deepEqual((await x({ command: `printf '%s|' 'a b' "c d" e\\ f` })).json, {
    stdout: "a b|c d|e f|",
    stderr: "",
    exit_code: 0,
  });
  const sh = await x({ command: "echo $HOME; echo err >&2; exit 3", shell: true });
  assert.deepEqual(sh.json, { stdout: "/root\n", stderr: "err\n", exit_code: 3 });
  assert.deepEqual((await x({ command: ["sh", "-c", "echo $0 $1", "zero", "one"] })).json.stdout, "zero one\n");
  assert.equal((await x({ command: ["echo $0-$1", "a", "b"], shell: true })).json.stdout, "a-b\n");
  const env = await x({ command: ["/usr/bin/env"], env: { ONLY: "this" } });
  assert.equal(env.json.stdout, "ONLY=this\n");
  assert.match((await x({ command: "env" })).json.stdout, /^PATH=/m);
  assert.equal((await x({ command: "pwd", cwd: "/tmp" })).json.stdout, "/tmp\n");
  const merged = await x({ command: ["sh", "-c", "echo a; echo b >&2; echo c"], merge_output_streams: true });
  assert.deepEqual(merged.json, { stdout: "a\nb\nc\n", stderr: "", exit_code: 0 });
  assert.equal((await x({ command: ["sh", "-c", "kill -9 $$"] })).json.exit_code, -9);
  assert.equal((await x({ command: ["cat"] })).json.stdout, "", "stdin is closed");
  assert.equal(
    (await x({ command: ["sh", "-c", "printf 'ok\\377\\n'"] })).json.stdout,
    "ok\\xff\n",
    "bytes.decode(errors='backslashreplace')",
  );
});

test("execute: errors are Python's (FileNotFoundError, ValueError...) and SWE-ReX's (timeout, check)", async () => {
  const x = (body: Record<string, unknown>) => post(`${P}/execute`, body);
  is511(
    await x({ command: ["no-such-program", "x"] }),
    "builtins.FileNotFoundError",
    "[Errno 2] No such file or directory: 'no-such-program'",
  );
  is511(
    await x({ command: "ls", cwd: "/no/dir" }),
    "builtins.FileNotFoundError",
    "[Errno 2] No such file or directory: '/no/dir'",
  );
  is511(
    await x({ command: ["/etc/passwd"] }),
    "builtins.PermissionError",
    "[Errno 13] Permission denied: '/etc/passwd'",
  );
  is511(
    await x({ command: ["no-such-program"], merge_output_streams: true }),
    "builtins.FileNotFoundError",
    "[Errno 2] No such file or directory: 'no-such-program'",
  );
  assert.equal(
    (await x({ command: ["sh", "-c", "echo $A >&2"], env: { A: "z" }, merge_output_streams: true })).json.stdout,
    "z\n",
  );
  is511(await x({ command: "echo 'unterminated" }), "builtins.ValueError", "No closing quotation");
  is511(await x({ command: "" }), "builtins.IndexError");
  is511(
    await x({ command: ["true"], env: { "A=B": "1" } }),
    "builtins.ValueError",
    "illegal environment variable name",
  );
  const t0 = Date.now();
  is511(
    await x({ command: ["sleep", "30"], timeout: 0.5 }),
    "swerex.exceptions.CommandTimeoutError",
    "Timeout (0.5s) exceeded while running command",
  );
  assert.ok(Date.now() - t0 < 5000);
  is511(
    await x({ command: "sleep 30", shell: true, timeout: 1 }),
    "swerex.exceptions.CommandTimeoutError",
    "Timeout (1.0s) exceeded while running command",
  );
  is511(
    await x({ command: ["sh", "-c", "echo o; echo e >&2; exit 2"], check: true }),
    "swerex.exceptions.NonZeroExitCodeError",
    "Command ['sh', '-c', 'echo o; echo e >&2; exit 2'] failed with exit code 2. Stdout:\n'o\\n'\nStderr:\n'e\\n'",
  );
  is511(
    await x({ command: "false", check: true, error_msg: "oops" }),
    "swerex.exceptions.NonZeroExitCodeError",
    /^oops: Command 'false' failed/,
  );
  assert.equal((await x({ command: "false", check: false })).json.exit_code, 1);
  const v = await x({ command: 5, timeout: "x", env: ["a"] });
  assert.equal(v.status, 422);
  assert.deepEqual(
    v.json.detail.map((d: Json) => d.loc.join(".")),
    ["body.command.str", "body.command.list[str]", "body.timeout", "body.env"],
  );
});

// ----------------------------------------------------------------------------------------------- files

test("read_file / write_file: parents created, text semantics, encodings, OSError classes", async () => {
  assert.deepEqual(
    (await post(`${P}/write_file`, { path: "/tmp/w/deep/f.txt", content: "héllo\r\nworld\r" })).json,
    {},
  );
  assert.deepEqual((await post(`${P}/read_file`, { path: "/tmp/w/deep/f.txt" })).json, { content: "héllo\nworld\n" });
  assert.equal(
    (await post(`${P}/execute`, { command: ["od", "-An", "-c", "/tmp/w/deep/f.txt"] })).json.stdout.includes("\\r"),
    true,
    "written as given",
  );
  await post(`${P}/execute`, { command: ["sh", "-c", "printf 'a\\377b' > /tmp/w/bin"] });
  is511(
    await post(`${P}/read_file`, { path: "/tmp/w/bin" }),
    "builtins.UnicodeDecodeError",
    /can't decode byte 0xff in position 1/,
  );
  assert.equal((await post(`${P}/read_file`, { path: "/tmp/w/bin", errors: "replace" })).json.content, "a\ufffdb");
  assert.equal((await post(`${P}/read_file`, { path: "/tmp/w/bin", encoding: "latin-1" })).json.content, "a\u00ffb");
  assert.equal(
    (await post(`${P}/read_file`, { path: "/tmp/w/bin", errors: "backslashreplace" })).json.content,
    "a\\xffb",
  );
  is511(
    await post(`${P}/read_file`, { path: "/tmp/w/bin", encoding: "klingon" }),
    "builtins.LookupError",
    "unknown encoding: klingon",
  );
  is511(
    await post(`${P}/read_file`, { path: "/tmp/none" }),
    "builtins.FileNotFoundError",
    "[Errno 2] No such file or directory: '/tmp/none'",
  );
  is511(
    await post(`${P}/read_file`, { path: "/tmp/w" }),
    "builtins.IsADirectoryError",
    "[Errno 21] Is a directory: '/tmp/w'",
  );
  is511(
    await post(`${P}/write_file`, { path: "/usr/x.txt", content: "x" }),
    "builtins.OSError",
    "[Errno 30] Read-only file system: '/usr/x.txt'",
  );
  is511(await post(`${P}/write_file`, { path: "/tmp/w", content: "x" }), "builtins.IsADirectoryError");
  const v = await post(`${P}/write_file`, { path: "/tmp/x" });
  assert.equal(v.status, 422);
  assert.deepEqual(v.json.detail, [
    { type: "missing", loc: ["body", "content"], msg: "Field required", input: { path: "/tmp/x" } },
  ]);
  assert.equal((await post(`${P}/read_file`, {})).json.detail[0].loc.join("."), "body.path");
});

test("upload: single files land at target_path; zipped directories unpack with modes and inner symlinks", async () => {
  const f = await post(
    `${P}/upload`,
    form(
      { target_path: "/root/tools/one/bin/tool.sh", unzip: "false" },
      { data: Buffer.from("#!/bin/sh\necho tool\n"), name: "tool.sh" },
    ),
  );
  assert.equal(f.status, 200, f.text);
  assert.deepEqual(f.json, {});
  assert.equal(
    (await post(`${P}/read_file`, { path: "/root/tools/one/bin/tool.sh" })).json.content,
    "#!/bin/sh\necho tool\n",
  );
  // unzip defaults to false
  assert.equal(
    (await post(`${P}/upload`, form({ target_path: "/root/plain.bin" }, { data: Buffer.from([0, 1, 2]), name: "x" })))
      .status,
    200,
  );
  assert.equal(
    (await post(`${P}/execute`, { command: ["wc", "-c", "/root/plain.bin"] })).json.stdout,
    "3 /root/plain.bin\n",
  );
  const dir = tempDir();
  mkdirSync(join(dir, "bin"));
  mkdirSync(join(dir, "lib", "deep"), { recursive: true });
  writeFileSync(join(dir, "bin", "run"), "#!/bin/sh\necho ran\n", { mode: 0o755 });
  writeFileSync(join(dir, "lib", "deep", "data.txt"), "x".repeat(10_000));
  writeFileSync(join(dir, "README"), "hi\n");
  await runOk("ln", ["-s", "../lib/deep/data.txt", join(dir, "bin", "data")]);
  const z = await post(
    `${P}/upload`,
    form(
      { target_path: "/root/tools/bundle", unzip: "true" },
      { data: zipDirectory(dir), name: "zipped_transfer.zip" },
    ),
  );
  assert.equal(z.status, 200, z.text);
  assert.equal((await post(`${P}/execute`, { command: ["/root/tools/bundle/bin/run"] })).json.stdout, "ran\n");
  assert.equal(
    (await post(`${P}/execute`, { command: ["wc", "-c", "/root/tools/bundle/bin/data"] })).json.stdout,
    "10000 /root/tools/bundle/bin/data\n",
  );
  assert.equal(
    (await post(`${P}/execute`, { command: ["readlink", "/root/tools/bundle/bin/data"] })).json.stdout,
    "../lib/deep/data.txt\n",
  );
  const missing = await post(`${P}/upload`, form({ unzip: "true" }));
  assert.equal(missing.status, 422);
  assert.deepEqual(
    missing.json.detail.map((d: Json) => d.loc.join(".")),
    ["body.file", "body.target_path"],
  );
  const notForm = await post(`${P}/upload`, { target_path: "/x" });
  assert.equal(notForm.status, 422);
});

test("upload: archives escaping the target are rejected before anything is written", async () => {
  const evil: Record<string, Parameters<typeof buildZip>[0]> = {
    dotdot: [
      { name: "ok.txt", data: "fine" },
      { name: "../escape.txt", data: "bad" },
    ],
    nested: [
      { name: "a/", type: "dir" },
      { name: "a/../../escape.txt", data: "bad" },
    ],
    absolute: [
      { name: "ok.txt", data: "fine" },
      { name: "/tmp/escape.txt", data: "bad" },
    ],
    linkOut: [
      { name: "ok.txt", data: "fine" },
      { name: "out", type: "symlink", data: "../../.." },
    ],
    linkAbs: [{ name: "etc", type: "symlink", data: "/etc" }],
    linkThenFile: [
      { name: "sub", type: "symlink", data: "." },
      { name: "sub/x.txt", data: "bad" },
    ],
    linkChain: [
      { name: "d/", type: "dir" },
      { name: "d/self", type: "symlink", data: "." },
      { name: "hop", type: "symlink", data: "d/self/../.." },
    ],
    duplicate: [
      { name: "x.txt", data: "1" },
      { name: "x.txt", data: "2" },
    ],
  };
  for (const [name, entries] of Object.entries(evil)) {
    const target = `/root/evil-${name}`;
    const r = await post(
      `${P}/upload`,
      form({ target_path: target, unzip: "true" }, { data: buildZip(entries), name: "z.zip" }),
    );
    is511(r, "builtins.ValueError", /^upload rejected, nothing was extracted: /);
    const ls = await post(`${P}/execute`, {
      command: ["sh", "-c", `ls -A ${target} /root/escape.txt /escape.txt /tmp/escape.txt 2>/dev/null; true`],
    });
    assert.equal(ls.json.stdout, "", `${name}: nothing may be written (${ls.json.stdout})`);
  }
  is511(
    await post(
      `${P}/upload`,
      form({ target_path: "/root/nz", unzip: "true" }, { data: Buffer.from("not a zip at all"), name: "z.zip" }),
    ),
    "zipfile.BadZipFile",
  );
});

// ----------------------------------------------------------------------------------------- idempotency

test("X-Request-ID: a repeated id replays the stored response, also while the first is still running", async () => {
  await post(`${P}/create_session`, { session: "idem" });
  const bump = { session: "idem", command: "n=$((n+1)); echo $n" };
  const a = await post(`${P}/run_in_session`, bump, { headers: { "X-Request-ID": "req-1" } });
  const b = await post(`${P}/run_in_session`, bump, { headers: { "X-Request-ID": "req-1" } });
  assert.equal(a.json.output, "1\n");
  assert.equal(b.text, a.text);
  assert.equal((await post(`${P}/run_in_session`, bump, { headers: { "X-Request-ID": "req-2" } })).json.output, "2\n");
  const slow = { session: "idem", command: "sleep 0.5; n=$((n+1)); echo $n" };
  const [c, d] = await Promise.all([
    post(`${P}/run_in_session`, slow, { headers: { "X-Request-ID": "req-3" } }),
    new Promise((r) => setTimeout(r, 100)).then(() =>
      post(`${P}/run_in_session`, slow, { headers: { "X-Request-ID": "req-3" } }),
    ),
  ]);
  assert.equal(c.json.output, "3\n");
  assert.equal(d.text, c.text);
  // A client that lost its connection and retries gets the result of the first attempt (run once).
  const lost = fetch(`${srv.url}${P}/run_in_session`, {
    method: "POST",
    headers: { "X-API-Key": TOKEN, "content-type": "application/json", "X-Request-ID": "req-5" },
    body: JSON.stringify(slow),
    signal: AbortSignal.timeout(150),
  }).catch((e: Error) => e.name);
  await new Promise((r) => setTimeout(r, 300));
  const retried = await post(`${P}/run_in_session`, slow, { headers: { "X-Request-ID": "req-5" } });
  assert.equal(await lost, "TimeoutError");
  assert.equal(retried.json.output, "4\n");
  // Errors are replayed too.
  const e1 = await post(
    `${P}/run_in_session`,
    { session: "idem", command: "n=$((n+1)); false" },
    { headers: { "X-Request-ID": "req-4" } },
  );
  const e2 = await post(
    `${P}/run_in_session`,
    { session: "idem", command: "n=$((n+1)); false" },
    { headers: { "X-Request-ID": "req-4" } },
  );
  assert.equal(e1.status, 511);
  assert.equal(e2.status, 511);
  assert.equal((await post(`${P}/run_in_session`, { session: "idem", command: "echo $n" })).json.output, "5\n");
});

test("validation: JSON errors, wrong body types, extra fields ignored", async () => {
  const bad = await fetch(`${srv.url}${P}/execute`, {
    method: "POST",
    headers: { "X-API-Key": TOKEN, "content-type": "application/json" },
    body: "{nope",
  });
  assert.equal(bad.status, 422);
  assert.equal(((await bad.json()) as Json).detail[0].type, "json_invalid");
  const arr = await post(`${P}/execute`, [1, 2]);
  assert.equal(arr.status, 422);
  assert.equal(arr.json.detail[0].type, "model_attributes_type");
  const none = await fetch(`${srv.url}${P}/run_in_session`, { method: "POST", headers: { "X-API-Key": TOKEN } });
  assert.equal(none.status, 422);
  assert.deepEqual(((await none.json()) as Json).detail, [
    { type: "missing", loc: ["body"], msg: "Field required", input: null },
  ]);
  assert.equal((await post(`${P}/execute`, { command: "true", unknown_field: 1 })).status, 200);
  const lax = await post(`${P}/execute`, { command: "echo x", timeout: "5", merge_output_streams: "yes" });
  assert.equal(lax.status, 200, "pydantic coerces numeric strings and yes/no");
});

// ----------------------------------------------------------------------------------------- lifecycle

test("lifecycle: create from a directory, inspect, list, delete; errors have clear statuses", async () => {
  const dir = tempDir();
  writeFileSync(join(dir, "hello.txt"), "from host\n");
  const sb = await newSandbox({
    dir,
    network: false,
    limits: { memory_bytes: 512 * 1024 ** 2, pids: 200 },
    labels: { run: "t1" },
    env: { MY: "var" },
  });
  assert.match(sb.id, /^sb-[0-9a-f]{12}$/);
  assert.equal(sb.runtime_url, `${srv.url}/sandboxes/${sb.id}`);
  assert.equal(sb.source, "dir");
  assert.deepEqual(sb.limits, {
    memory_bytes: 512 * 1024 ** 2,
    pids: 200,
    cpu_seconds: null,
    disk_bytes: 8 * 1024 ** 3,
    cpus: null,
  });
  const Q = `/sandboxes/${sb.id}`;
  const cat = await post(`${Q}/execute`, { command: "cat hello.txt; echo $MY; pwd", shell: true });
  assert.equal(cat.json.stdout, "from host\nvar\n/testbed\n");
  await post(`${Q}/execute`, { command: "echo changed > hello.txt", shell: true });
  assert.equal((await call("GET", Q)).json.labels.run, "t1");
  assert.ok((await call("GET", "/sandboxes")).json.sandboxes.some((s: Json) => s.id === sb.id));
  assert.deepEqual((await call("DELETE", Q)).json, { id: sb.id, deleted: true });
  assert.equal((await call("GET", Q)).status, 404);
  assert.equal((await call("DELETE", Q)).status, 404);
  const { readFileSync } = await import("node:fs");
  assert.equal(readFileSync(join(dir, "hello.txt"), "utf8"), "from host\n", "copy-on-write: the host dir is untouched");
  const notDir = await post("/sandboxes", { dir: "/no/such/dir" });
  assert.equal(notDir.status, 403);
  assert.match(notDir.json.detail, /not a directory under the directories this server may mount/);
  const inst = await post("/sandboxes", { instance_id: "x" });
  assert.equal(inst.status, 501);
  assert.match(inst.json.detail, /provider/);
  assert.equal((await post("/sandboxes", { env_key: "k" })).status, 501);
  const both = await post("/sandboxes", { dir, instance_id: "x" });
  assert.equal(both.status, 422);
  const badLimits = await post("/sandboxes", { limits: { memory_bytes: -1, cores: 2 } });
  assert.equal(badLimits.status, 422);
  assert.deepEqual(
    badLimits.json.detail.map((d: Json) => d.loc.join(".")),
    ["body.limits.memory_bytes", "body.limits.cores"],
  );
  const ev = await post(`${P}/evaluate`);
  assert.equal(ev.status, 501);
  assert.equal((await call("GET", `${P}/diff`)).status, 501);
});

test("provider: instance sandboxes, evaluate and diff through a real provider; release on close", async () => {
  const repo = tempDir();
  await runOk("git", ["init", "-q", repo]);
  writeFileSync(join(repo, "calc.py"), "def add(a, b):\n    return a - b\n");
  writeFileSync(join(repo, "run_tests.sh"), "python3 -c 'import calc; assert calc.add(2, 3) == 5' && echo PASSED\n");
  await runOk("git", ["-C", repo, "add", "."]);
  await runOk("git", ["-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]);
  let [released, asked] = [0, 0];
  const provider: WorkspaceProvider = {
    async forInstance(id) {
      asked++;
      if (id !== "calc-1") throw new NotFoundError(`instance ${id} not in the dataset`);
      const options = { dir: repo, env: { PYTHONDONTWRITEBYTECODE: "1" } };
      return {
        workspace: new Workspace({ kind: "instance", options, release: () => void released++ }),
        meta: { repo: "calc" },
      };
    },
    async evaluate(sb: Sandbox, id: string) {
      const r = await sb.exec(["bash", "/testbed/run_tests.sh"], { cwd: "/testbed", timeoutMs: 30_000 });
      return { instance_id: id, resolved: r.exitCode === 0, log: r.stdout + r.stderr };
    },
    async diff(sb: Sandbox) {
      return (await sb.exec(["git", "-C", "/testbed", "diff"])).stdout;
    },
  };
  const s2 = await startServer({ home, authToken: TOKEN, provider, allowDirs: [repo] });
  try {
    const o = { base: s2.url };
    const unknown = await post("/sandboxes", { instance_id: "nope" }, o);
    assert.equal(unknown.status, 404);
    assert.match(unknown.json.detail, /nope/);
    assert.equal((await post("/sandboxes", { env_key: "abc" }, o)).status, 501);
    const python = await post("/sandboxes", { instance_id: "calc-1", python: "3.11" }, o);
    const refused = `${python.status} ${python.json.detail} asked:${asked}`;
    assert.match(refused, /^400 python is for a sandbox on a directory.* asked:1$/, "refused before the provider");
    const sb = await newSandbox({ instance_id: "calc-1" }, s2.url);
    assert.equal(sb.instance_id, "calc-1");
    assert.deepEqual(sb.meta, { repo: "calc" });
    const Q = `/sandboxes/${sb.id}`;
    assert.equal((await call("GET", `${Q}/diff`, undefined, o)).json.diff, "");
    const before = await post(`${Q}/evaluate`, undefined, o);
    assert.equal(before.status, 200, before.text);
    assert.equal(before.json.result.resolved, false);
    await post(`${Q}/write_file`, { path: "/testbed/calc.py", content: "def add(a, b):\n    return a + b\n" }, o);
    const diff = (await call("GET", `${Q}/diff`, undefined, o)).json.diff;
    assert.match(diff, /^- {4}return a - b\n\+ {4}return a \+ b$/m);
    const afterEv = await post(`${Q}/evaluate`, undefined, o);
    assert.equal(afterEv.json.result.resolved, true);
    assert.match(afterEv.json.result.log, /PASSED/);
    const dirSb = await newSandbox({ dir: repo }, s2.url);
    assert.equal((await post(`/sandboxes/${dirSb.id}/evaluate`, undefined, o)).status, 400);
    await call("DELETE", Q, undefined, o);
    assert.equal(released, 1);
    const metrics = (await call("GET", "/metrics", undefined, o)).text;
    assert.match(metrics, /^minisandbox_evaluations_total\{result="ok"\} 2$/m);
  } finally {
    await s2.close();
  }
});

test("429 over --max-sandboxes; body and upload size limits", async () => {
  const s3 = await startServer({
    home,
    authToken: TOKEN,
    maxSandboxes: 2,
    maxBodyBytes: 64 * 1024,
    maxUploadBytes: 100_000,
    maxReadBytes: 1000,
  });
  try {
    const o = { base: s3.url };
    const created = await Promise.all([
      post("/sandboxes", {}, o),
      post("/sandboxes", {}, o),
      post("/sandboxes", {}, o),
    ]);
    const statuses = created.map((r) => r.status).sort();
    assert.deepEqual(statuses, [201, 201, 429]);
    const limited = created.find((r) => r.status === 429)!;
    assert.match(limited.json.detail, /sandbox limit reached: .* at most 2 \(--max-sandboxes\)/);
    const id = created.find((r) => r.status === 201)!.json.id;
    await call("DELETE", `/sandboxes/${id}`, undefined, o);
    assert.equal((await post("/sandboxes", {}, o)).status, 201);
    const big = await post(`/sandboxes/${id}/write_file`, { path: "/tmp/x", content: "x".repeat(100_000) }, o);
    assert.equal(big.status, 413);
    const other = created.find((r) => r.status === 201 && r.json.id !== id)!.json.id;
    const up = await post(
      `/sandboxes/${other}/upload`,
      form({ target_path: "/tmp/big" }, { data: Buffer.alloc(200_000), name: "big" }),
      o,
    );
    assert.equal(up.status, 413, up.text);
    await post(`/sandboxes/${other}/execute`, { command: "head -c 2000 /dev/zero > /tmp/big.bin", shell: true }, o);
    is511(
      await post(`/sandboxes/${other}/read_file`, { path: "/tmp/big.bin" }, o),
      "builtins.OSError",
      /^\[Errno 27\] File too large: '\/tmp\/big.bin'/,
    );
    assert.equal((await call("GET", `/sandboxes/${other}/files?path=/tmp/big.bin`, undefined, o)).status, 429);
    const m = (await call("GET", "/metrics", undefined, o)).text;
    assert.match(m, /^minisandbox_sandbox_creations_total\{result="rejected"\} 1$/m);
    assert.match(m, /^minisandbox_sandboxes_live 2$/m);
  } finally {
    await s3.close();
  }
});

test("TTL and idle timeouts reap sandboxes (a busy sandbox is not idle); processes are gone", async () => {
  // Long enough that a loaded machine starts the session before the TTL ends.
  const ttl = await newSandbox({ ttl_seconds: 3 });
  const idle = await newSandbox({ idle_timeout_seconds: 2 });
  await post(`/sandboxes/${ttl.id}/create_session`, {});
  await post(`/sandboxes/${ttl.id}/run_in_session`, {
    command: "exec -a msb-ttl-marker sleep 1000 &",
    check: "ignore",
  });
  await waitFor(async () => processesMatching("msb-ttl-marker").length > 0, 5000, "the background process");
  let busyDone = 0;
  const busy = post(`/sandboxes/${idle.id}/execute`, { command: ["sleep", "4"] }).then((r) => {
    busyDone = Date.now();
    return r;
  });
  await waitFor(async () => (await call("GET", `/sandboxes/${ttl.id}`)).status === 404, 12000, "ttl reaping");
  assert.ok(Date.now() >= Date.parse(ttl.expires_at), "not before its ttl");
  assert.ok(Date.parse(ttl.expires_at) - Date.parse(ttl.created_at) >= 3000);
  assert.equal((await busy).json.exit_code, 0, "not reaped while busy (its idle timeout is shorter than the command)");
  assert.equal((await call("GET", `/sandboxes/${idle.id}`)).status, 200);
  await waitFor(async () => (await call("GET", `/sandboxes/${idle.id}`)).status === 404, 8000, "idle reaping");
  assert.ok(Date.now() - busyDone >= 1900, "idle counted from the end of the last request");
  assert.deepEqual(processesMatching("msb-ttl-marker"), []);
  assert.deepEqual(processesMatching(ttl.id), []);
  const m = (await call("GET", "/metrics")).text;
  assert.match(m, /^minisandbox_sandbox_closes_total\{reason="ttl"\} 1$/m);
  assert.match(m, /^minisandbox_sandbox_closes_total\{reason="idle"\} 1$/m);
});

test("metrics: Prometheus text with sandboxes, sessions, creations and command latency", async () => {
  const r = await call("GET", "/metrics");
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  for (const name of [
    "minisandbox_sandboxes_live",
    "minisandbox_sessions_live",
    "minisandbox_sandbox_creations_total",
    "minisandbox_evaluations_total",
    "minisandbox_command_duration_seconds_bucket",
    "minisandbox_command_duration_seconds_count",
  ])
    assert.match(r.text, new RegExp(`^# TYPE ${name.replace(/_(bucket|count)$/, "")} `, "m"), name);
  assert.match(r.text, /^minisandbox_command_duration_seconds_count\{kind="session"\} \d+$/m);
  assert.match(r.text, /^minisandbox_sessions_live [1-9]\d*$/m);
});

test("serve --dir: the SWE-ReX routes answer at the root for the default sandbox", async () => {
  const dir = tempDir();
  writeFileSync(join(dir, "marker.txt"), "root mode\n");
  const s4 = await startServer({ home, authToken: TOKEN, defaultDir: dir });
  try {
    const o = { base: s4.url };
    assert.deepEqual((await call("GET", "/is_alive", undefined, o)).json, { is_alive: true, message: "" });
    assert.equal((await post("/execute", { command: "cat marker.txt", shell: true }, o)).json.stdout, "root mode\n");
    await post("/create_session", {}, o);
    assert.equal((await post("/run_in_session", { command: "pwd" }, o)).json.output, "/testbed\n");
    const list = (await call("GET", "/sandboxes", undefined, o)).json.sandboxes;
    assert.equal(list.length, 1);
    assert.equal(list[0].default, true);
    assert.equal(list[0].runtime_url, s4.url);
    assert.equal((await call("DELETE", `/sandboxes/${s4.defaultSandboxId}`, undefined, o)).status, 400);
    assert.equal((await call("GET", "/is_alive", undefined, { base: s4.url, key: null })).status, 403);
  } finally {
    await s4.close();
  }
});

test("SIGTERM to a real `serve` process closes every sandbox: no process, scratch dir or cgroup left", async (t) => {
  const h = tempHome("msb-serve-");
  const dir = tempDir();
  const serveJs = pathToFileURL(join(import.meta.dirname, "..", "src", "cli", "serve.js")).href;
  const code = `
    const { Command } = await import("commander");
    const { registerServeCommand } = await import(${JSON.stringify(serveJs)});
    const p = new Command().option("--home <DIR>").enablePositionalOptions();
    registerServeCommand(p, () => p.opts().home);
    await p.parseAsync(process.argv.slice(1), { from: "user" });`;
  const child = spawn(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      code,
      "--",
      "--home",
      h,
      "serve",
      "--port",
      "0",
      "--dir",
      dir,
      "--log-level",
      "silent",
    ],
    {
      cwd: join(import.meta.dirname, ".."),
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, MINISANDBOX_AUTH_TOKEN: TOKEN },
    },
  );
  // A failed check must not leave the server running (it would keep this file's test process alive).
  t.after(() => void (child.exitCode === null && child.signalCode === null && child.kill("SIGKILL")));
  let stderr = "";
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on("data", (b: Buffer) => {
      stderr += b.toString();
      const m = /serving on (http:\/\/\S+?)[ ;]/.exec(stderr);
      if (m) resolve(m[1]!);
    });
    child.on("exit", (c) => reject(new Error(`serve exited early (${c}): ${stderr}`)));
  });
  const o = { base: url };
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const sb = await newSandbox({ limits: { pids: 100 } }, url);
    ids.push(sb.id);
    await post(`/sandboxes/${sb.id}/create_session`, {}, o);
    await post(
      `/sandboxes/${sb.id}/run_in_session`,
      { command: `exec -a msb-sigterm-marker-${i} sleep 1000 &`, check: "ignore" },
      o,
    );
  }
  const root = (await call("GET", "/sandboxes", undefined, o)).json.sandboxes.find((s: Json) => s.default).id;
  ids.push(root);
  await post("/create_session", {}, o);
  // The background jobs exec their `sleep` a moment after the session's command returned.
  for (let i = 0; i < 250 && processesMatching("msb-sigterm-marker").length < 3; i++)
    await new Promise((r) => setTimeout(r, 20));
  assert.equal(processesMatching("msb-sigterm-marker").length, 3);
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  child.kill("SIGTERM");
  assert.equal(await exited, 0, stderr);
  assert.match(stderr, /SIGTERM: closing 4 sandbox/);
  assert.deepEqual(processesMatching("msb-sigterm-marker"), []);
  for (const id of ids) assert.deepEqual(processesMatching(id), [], id);
  assert.deepEqual(processesMatching(h), []);
  assert.deepEqual(scratchDirs(h), []);
  assert.deepEqual(cgroupsLeft(ids), []);
});
