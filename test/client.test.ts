/** The TypeScript SDK end to end: a real server on 127.0.0.1, real sandboxes, no mocks. */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer, type RunningServer, type WorkspaceProvider } from "../src/server/index.js";
import {
  AuthError,
  CommandTimeoutError,
  ForbiddenError,
  InvalidInputError,
  NotImplementedError,
  LimitError,
  NotFoundError,
  RemoteSandbox,
  SandboxError,
  SessionError,
  TimeoutError,
} from "../src/client/index.js";
import { runOk } from "../src/util/run.js";
import type { Sandbox } from "../src/sandbox/sandbox.js";
import { Workspace } from "../src/env/workspace.js";
import { NotFoundError as CoreNotFound } from "../src/errors.js";
import { processesMatching, tempDir, tempHome } from "./helpers.js";

const KEY = "sdk-key";
const home = tempHome("msb-sdk-");
let srv: RunningServer;
const repo = tempDir();

before(async () => {
  await runOk("git", ["init", "-q", repo]);
  writeFileSync(join(repo, "app.py"), "VALUE = 1\n");
  await runOk("git", ["-C", repo, "add", "."]);
  await runOk("git", ["-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]);
  const provider: WorkspaceProvider = {
    async forInstance(id) {
      if (id !== "app-1") throw new CoreNotFound(`instance ${id} not found`);
      return { workspace: new Workspace({ kind: "instance", options: { dir: repo } }), meta: {} };
    },
    async evaluate(sb: Sandbox, id: string) {
      const r = await sb.exec(["python3", "-c", "import app; assert app.VALUE == 2"], { cwd: "/testbed" });
      return { instance_id: id, resolved: r.exitCode === 0 };
    },
    async diff(sb: Sandbox) {
      return (await sb.exec(["git", "-C", "/testbed", "diff"])).stdout;
    },
  };
  srv = await startServer({ home, authToken: KEY, provider, maxSandboxes: 4, allowDirs: [tmpdir()] });
});
after(() => srv?.close());

const conn = () => ({ url: srv.url, apiKey: KEY });

test("create from a directory; commands.run mirrors Sandbox.exec; await using deletes", async () => {
  const dir = tempDir();
  writeFileSync(join(dir, "data.txt"), "host data\n");
  let id = "";
  {
    await using sb = await RemoteSandbox.create({
      ...conn(),
      dir,
      env: { GREETING: "hi" },
      limits: { pids: 200, memoryBytes: 512 * 1024 ** 2 },
      labels: { who: "sdk" },
    });
    id = sb.id;
    assert.equal(sb.runtimeUrl, `${srv.url}/sandboxes/${sb.id}`);
    assert.equal(sb.info.limits.pids, 200);
    const r = await sb.commands.run("cat data.txt; echo $GREETING; pwd; echo err >&2; exit 3");
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, "host data\nhi\n/testbed\n");
    assert.equal(r.stderr, "err\n");
    assert.equal(r.timedOut, false);
    assert.equal((await sb.commands.run(["printf", "%s", "a b"])).stdout, "a b");
    assert.equal((await sb.commands.run("cat", { stdin: "piped" })).stdout, "piped");
    assert.equal((await sb.commands.run("pwd; echo $X", { cwd: "/tmp", env: { X: "y" } })).stdout, "/tmp\ny\n");
    const t = await sb.commands.run("echo before; sleep 30", { timeoutMs: 300 });
    assert.equal(t.timedOut, true);
    assert.equal(t.exitCode, 124);
    assert.equal(t.stdout, "before\n");
    assert.equal(await sb.isAlive(), true);
    assert.ok((await RemoteSandbox.list(conn())).some((s) => s.id === id && s.labels.who === "sdk"));
    const again = await RemoteSandbox.connect({ ...conn(), id });
    assert.equal((await again.commands.run("echo attached")).stdout, "attached\n");
  }
  await assert.rejects(RemoteSandbox.connect({ ...conn(), id }), NotFoundError);
  assert.deepEqual(processesMatching(id), []);
});

test("sessions: create / run / interrupt / close, with the in-process error classes", async () => {
  await using sb = await RemoteSandbox.create(conn());
  const { session, output } = await sb.sessions.create("main");
  assert.equal(output, "");
  assert.equal(session.name, "main");
  await session.run("cd /tmp && export V=1");
  assert.deepEqual(await session.run("pwd; echo $V"), { output: "/tmp\n1\n", exitCode: 0, expectString: "" });
  assert.equal((await sb.sessions.run("main", "(exit 4)", { check: "silent" })).exitCode, 4);
  await assert.rejects(
    session.run("false"),
    (e: unknown) =>
      e instanceof SessionError &&
      e.code === "non_zero_exit" &&
      e.swerexClass === "swerex.exceptions.NonZeroExitCodeError",
  );
  await assert.rejects(
    session.run("if then"),
    (e: unknown) =>
      e instanceof SessionError && e.code === "bash_syntax_error" && typeof e.extraInfo.bash_stderr === "string",
  );
  await assert.rejects(
    sb.sessions.create("main"),
    (e: unknown) => e instanceof SessionError && e.code === "session_exists",
  );
  await assert.rejects(
    sb.sessions.run("nope", "true"),
    (e: unknown) => e instanceof SessionError && e.code === "not_found",
  );
  await assert.rejects(
    session.run("sleep 30", { timeoutMs: 300 }),
    (e: unknown) =>
      e instanceof CommandTimeoutError && e instanceof TimeoutError && /timeout after 0.3 seconds/.test(e.message),
  );
  await session.interrupt();
  assert.equal((await session.run("echo back")).output, "back\n");
  const py = await session.run("python3 -i -q", { interactive: true, expect: [">>> "], timeoutMs: 10_000 });
  assert.equal(py.expectString, ">>> ");
  await session.run("exit()", { interactiveQuit: true, timeoutMs: 5000 });
  await sb.sessions.create("second");
  assert.deepEqual((await sb.refresh()).sessions.sort(), ["main", "second"]);
  await session.close();
  await sb.sessions.closeAll();
  assert.deepEqual((await sb.refresh()).sessions, []);
});

test("files: read / readBytes / write (text and binary) / upload file and directory / exists / remove", async () => {
  await using sb = await RemoteSandbox.create(conn());
  await sb.files.write("/tmp/a/b/c.txt", "line1\nline2\n");
  assert.equal(await sb.files.read("/tmp/a/b/c.txt"), "line1\nline2\n");
  const bin = Buffer.from([0, 255, 1, 254, 10, 13, 10]);
  await sb.files.write("/tmp/bin.dat", bin);
  assert.deepEqual(await sb.files.readBytes("/tmp/bin.dat"), bin);
  await assert.rejects(sb.files.read("/tmp/missing"), NotFoundError);
  await assert.rejects(sb.files.readBytes("/tmp/missing"), NotFoundError);
  const local = tempDir();
  mkdirSync(join(local, "pkg", "sub"), { recursive: true });
  writeFileSync(join(local, "pkg", "sub", "mod.py"), "X = 42\n");
  writeFileSync(join(local, "pkg", "run.sh"), "#!/bin/sh\necho run\n", { mode: 0o755 });
  await sb.files.upload(local, "/opt/bundle");
  assert.equal(await sb.files.read("/opt/bundle/pkg/sub/mod.py"), "X = 42\n");
  assert.equal((await sb.commands.run(["/opt/bundle/pkg/run.sh"])).stdout, "run\n");
  await sb.files.upload(join(local, "pkg", "sub", "mod.py"), "/opt/single/mod.py");
  assert.equal(await sb.files.exists("/opt/single/mod.py"), true);
  await sb.files.remove("/opt/single");
  assert.equal(await sb.files.exists("/opt/single/mod.py"), false);
  await sb.files.mkdir("/opt/new/dir");
  assert.equal(await sb.files.exists("/opt/new/dir"), true);
});

test("instances: evaluate and diff through the server's provider", async () => {
  await using sb = await RemoteSandbox.create({ ...conn(), instanceId: "app-1" });
  assert.equal(sb.info.instanceId, "app-1");
  assert.equal(await sb.diff(), "");
  assert.deepEqual(await sb.evaluate(), { instance_id: "app-1", resolved: false });
  await sb.files.write("/testbed/app.py", "VALUE = 2\n");
  assert.match(await sb.diff(), /^\+VALUE = 2$/m);
  assert.deepEqual(await sb.evaluate<{ resolved: boolean }>(), { instance_id: "app-1", resolved: true });
  await assert.rejects(RemoteSandbox.create({ ...conn(), instanceId: "missing" }), NotFoundError);
  await assert.rejects(
    RemoteSandbox.create({ ...conn(), envKey: "abc" }),
    (e: unknown) => e instanceof NotImplementedError && /environment keys/.test((e as Error).message),
  );
  await using plain = await RemoteSandbox.create(conn());
  await assert.rejects(plain.evaluate(), InvalidInputError);
});

test("typed errors: auth, limits, bad input, unreachable server, client timeouts", async () => {
  await assert.rejects(
    RemoteSandbox.create({ url: srv.url, apiKey: "wrong" }),
    (e: unknown) => e instanceof AuthError && e.status === 401,
  );
  await assert.rejects(
    RemoteSandbox.create({ url: srv.url }),
    (e: unknown) => e instanceof AuthError && e.status === 403,
  );
  await assert.rejects(RemoteSandbox.create({ ...conn(), dir: "/no/such/dir" }), ForbiddenError);
  const held: RemoteSandbox[] = [];
  try {
    for (let i = 0; i < 4; i++) held.push(await RemoteSandbox.create(conn()));
    await assert.rejects(
      RemoteSandbox.create(conn()),
      (e: unknown) => e instanceof LimitError && /max-sandboxes/.test((e as Error).message),
    );
  } finally {
    await Promise.all(held.map((s) => s.close()));
  }
  await assert.rejects(
    RemoteSandbox.create({ url: "http://127.0.0.1:1", apiKey: KEY }),
    (e: unknown) => e instanceof SandboxError && /cannot reach/.test((e as Error).message),
  );
  await using sb = await RemoteSandbox.create({ ...conn(), requestTimeoutMs: 1500 });
  await assert.rejects(
    sb.commands.run("sleep 10"),
    (e: unknown) => e instanceof TimeoutError && !(e instanceof CommandTimeoutError),
  );
  await sb.close();
  await sb.close(); // idempotent
});
