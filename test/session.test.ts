import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { SessionError } from "../src/errors.js";
import { tempHome } from "./helpers.js";

const home = tempHome();

async function withSession<T>(fn: (sb: Sandbox) => Promise<T>): Promise<T> {
  await using sb = await Sandbox.create({ home });
  await sb.sessions.create("default");
  return await fn(sb);
}

const swerexClass = (cls: string) => (e: unknown) =>
  e instanceof SessionError && e.swerexClass === `swerex.exceptions.${cls}`;

test("cwd, exports and functions persist between commands; exit codes are returned", () =>
  withSession(async (sb) => {
    const s = sb.sessions.get();
    await s.run("cd /tmp && export FOO=bar && greet() { echo hi $1; }");
    const r = await s.run("pwd; echo $FOO; greet you");
    assert.deepEqual(r, { output: "/tmp\nbar\nhi you\n", exitCode: 0, expectString: "" });
    assert.equal((await s.run("(exit 7)", { check: "silent" })).exitCode, 7);
    assert.equal((await s.run("false", { check: "ignore" })).exitCode, null);
    await assert.rejects(
      s.run("echo out; false"),
      (e: unknown) => swerexClass("NonZeroExitCodeError")(e) && /out/.test((e as Error).message),
    );
  }));

test("syntax errors are reported without running anything", () =>
  withSession(async (sb) => {
    const s = sb.sessions.get();
    await assert.rejects(s.run("touch /tmp/ran; if true; then echo"), swerexClass("BashIncorrectSyntaxError"));
    await assert.rejects(s.run("echo 'unterminated"), swerexClass("BashIncorrectSyntaxError"));
    await assert.rejects(s.run("touch /tmp/ran2\nif true; then echo"), swerexClass("BashIncorrectSyntaxError"));
    assert.equal((await s.run("test -e /tmp/ran || test -e /tmp/ran2", { check: "silent" })).exitCode, 1);
    // A command that fails with status 2 (and says "syntax error" itself) is not a syntax error of ours.
    const two = await s.run("echo 'line 1: syntax error'; ls /nonexistent", { check: "silent" });
    assert.equal(two.exitCode, 2);
  }));

test("multi-line commands, heredocs and long commands (beyond the 4 KiB tty line) work", () =>
  withSession(async (sb) => {
    const s = sb.sessions.get();
    const r = await s.run("cat <<'EOF' > /tmp/f.py\nprint('x' * 3)\nEOF\npython3 /tmp/f.py");
    assert.equal(r.output, "xxx\n");
    const long = `echo ${"a".repeat(20_000)}`;
    assert.equal((await s.run(long)).output, `${"a".repeat(20_000)}\n`);
  }));

test("output is cleaned: no ANSI escapes, no \\r\\n, no sentinels; isatty holds", () =>
  withSession(async (sb) => {
    const s = sb.sessions.get();
    const r = await s.run("printf '\\033[31mred\\033[0m\\n'; test -t 1 && echo tty");
    assert.equal(r.output, "red\ntty\n");
    assert.ok(!/\x1e/.test(r.output));
  }));

test("a timeout leaves the command running; interrupt brings the session back", () =>
  withSession(async (sb) => {
    const s = sb.sessions.get();
    await assert.rejects(
      s.run("sleep 30", { timeoutMs: 300 }),
      (e: unknown) =>
        swerexClass("CommandTimeoutError")(e) &&
        /timeout after 0.3 seconds while running command 'sleep 30'/.test((e as Error).message),
    );
    const ps = await sb.exec(["pgrep", "-c", "-f", "-x", "sleep 30"]);
    assert.equal(ps.stdout, "1\n", "the timed-out command keeps running");
    await s.interrupt();
    assert.equal((await s.run("echo back")).output, "back\n");
  }));

test("a command that ignores SIGINT is stopped by stronger means", () =>
  withSession(async (sb) => {
    const s = sb.sessions.get();
    await assert.rejects(
      s.run(
        "trap '' INT; python3 -c 'import signal,time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)'",
        { timeoutMs: 300 },
      ),
    );
    await s.interrupt({ timeoutMs: 200, retries: 2 });
    assert.equal((await s.run("echo recovered", { timeoutMs: 5000 })).output, "recovered\n");
  }));

test("a late prompt from a timed-out command is not mistaken for the next one", () =>
  withSession(async (sb) => {
    const s = sb.sessions.get();
    await assert.rejects(s.run("sleep 1; echo late", { timeoutMs: 200 }));
    const r = await s.run("echo next", { timeoutMs: 5000 });
    assert.equal(r.output, "next\n");
  }));

test("expect patterns and interactive programs", () =>
  withSession(async (sb) => {
    const s = sb.sessions.get();
    const r = await s.run("python3 -i -q", { interactive: true, expect: [">>> "], timeoutMs: 10_000 });
    assert.equal(r.expectString, ">>> ");
    const r2 = await s.run("print(6 * 7)", { interactive: true, expect: [">>> "], timeoutMs: 5000 });
    assert.match(r2.output, /42/);
    await s.run("exit()", { interactiveQuit: true, timeoutMs: 5000 });
    assert.equal((await s.run("echo shell")).output, "shell\n");
    const e = await s.run("echo ready-now; sleep 5", { expect: ["ready-\\w+"], timeoutMs: 5000 });
    assert.equal(e.expectString, "ready-\\w+");
    assert.equal(e.exitCode, null);
    await s.interrupt();
  }));

test("large output keeps head and tail with a marker; binary output does not break the session", async () => {
  await using sb = await Sandbox.create({ home });
  const { session: s } = await sb.sessions.create("big", { outputLimitBytes: 100_000 });
  const r = await s.run("echo START; seq 1 2000000; echo END", { timeoutMs: 60_000 });
  assert.ok(r.output.startsWith("START\n1\n2\n"));
  assert.ok(r.output.endsWith("2000000\nEND\n"));
  assert.match(r.output, /characters of output omitted/);
  assert.ok(r.output.length < 110_000);
  const b = await s.run("head -c 5000 /dev/urandom; echo; echo fine", { timeoutMs: 10_000 });
  assert.ok(b.output.endsWith("fine\n"));
  assert.equal((await s.run("echo ok")).output, "ok\n");
});

test("sessions are independent and run concurrently; names are unique", async () => {
  await using sb = await Sandbox.create({ home });
  await sb.sessions.create("a");
  await sb.sessions.create("b");
  await assert.rejects(sb.sessions.create("a"), swerexClass("SessionExistsError"));
  assert.throws(() => sb.sessions.get("nope"), swerexClass("SessionDoesNotExistError"));
  await sb.sessions.run("a", "cd /tmp");
  const slow = sb.sessions.run("a", "sleep 1; pwd");
  const started = Date.now();
  const fast = await sb.sessions.run("b", "pwd");
  assert.ok(Date.now() - started < 900, "session b must not wait for session a");
  assert.equal(fast.output, "/testbed\n".replace("/testbed", "/"));
  assert.equal((await slow).output, "/tmp\n");
  await sb.sessions.close("a");
  assert.ok(!sb.sessions.has("a"));
});

test("startup files are sourced; the shell exiting is reported", async () => {
  await using sb = await Sandbox.create({ home });
  await sb.files.write("/root/.bashrc", "export FROM_RC=yes\nPS1='custom> '\n");
  const { session, output } = await sb.sessions.create("rc", {
    startupSource: ["/root/.bashrc"],
    startupTimeoutMs: 5000,
  });
  assert.equal(output, "");
  assert.equal((await session.run("echo $FROM_RC")).output, "yes\n");
  await assert.rejects(session.run("exit 3", { timeoutMs: 5000 }), swerexClass("SessionNotInitializedError"));
  assert.equal(session.alive, false);
});
