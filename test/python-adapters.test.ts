/**
 * The Python adapters (integrations/python) against a real server on 127.0.0.1: the SWE-ReX-style deployment and
 * runtime client (aiohttp + pydantic, from the local package index into a cached venv) and the mini-swe-agent
 * environment (standard library only).
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer, type RunningServer } from "../src/server/index.js";
import { run } from "../src/util/run.js";
import { tempDir, tempHome, cachedVenv } from "./helpers.js";

const TOKEN = "py-token";
const ADAPTERS = join(import.meta.dirname, "..", "..", "integrations", "python");
const home = tempHome("msb-py-");
const work = tempDir("msb-py-work-");
let srv: RunningServer;

const VENV_PACKAGES = ["aiohttp", "pydantic", "jsonschema"];

const adapterVenv = (): Promise<string> => cachedVenv("pyadapters", VENV_PACKAGES);

let python = "";

before(async () => {
  python = join(await adapterVenv(), "bin", "python");
  srv = await startServer({ home, authToken: TOKEN, allowDirs: [tmpdir()] });
});
after(() => srv?.close());

/** Run a Python snippet with the adapters importable; it must print "OK" last. */
async function py(name: string, code: string, args: string[] = [], env: Record<string, string> = {}): Promise<string> {
  const file = join(work, `${name}.py`);
  writeFileSync(file, code);
  const r = await run(python, [file, srv.url, TOKEN, ...args], {
    env: { PATH: process.env.PATH, PYTHONPATH: ADAPTERS, PYTHONDONTWRITEBYTECODE: "1", NO_PROXY: "*", ...env },
    timeoutMs: 60_000,
  });
  assert.equal(r.code, 0, `python ${name} failed:\n${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /OK\n$/, r.stdout + r.stderr);
  return r.stdout;
}

test("deployment + runtime: sessions, timeout -> interrupt -> recovery, execute, files, 511 classes", async () => {
  const dir = tempDir();
  writeFileSync(join(dir, "README.md"), "fixture\n");
  const upload = join(work, "bundle");
  mkdirSync(join(upload, "bin"), { recursive: true });
  writeFileSync(join(upload, "bin", "hello"), "#!/bin/sh\necho hello from tool\n", { mode: 0o755 });
  writeFileSync(join(work, "single.txt"), "single file\n");
  const out = await py(
    "deployment",
    `
import asyncio, sys
from minisandbox.swerex.deployment import MinisandboxDeployment
from minisandbox.swerex.runtime import *

url, token, src, bundle, single = sys.argv[1:6]

async def main():
    d = MinisandboxDeployment(url=url, auth_token=token, dir=src, limits={"pids": 300})
    try:
        d.runtime
        raise AssertionError("runtime before start")
    except DeploymentNotStartedError:
        pass
    await d.start()
    rt = d.runtime
    assert rt.host == f"{url}/sandboxes/{d.sandbox_id}", rt.host
    assert (await d.is_alive()).is_alive
    await rt.write_file(WriteFileRequest(path="/root/.bashrc", content="export FROM_RC=1\\n"))
    r = await rt.create_session(CreateBashSessionRequest(startup_source=["/root/.bashrc"], startup_timeout=10))
    assert r.output == "", r
    obs = await rt.run_in_session(BashAction(command="cat README.md; echo $FROM_RC; cd /tmp"))
    assert obs.output == "fixture\\n1\\n" and obs.exit_code == 0, obs
    assert (await rt.run_in_session(BashAction(command="pwd"))).output == "/tmp\\n"
    assert (await rt.run_in_session(BashAction(command="false", check="silent"))).exit_code == 1
    try:
        await rt.run_in_session(BashAction(command="false"))
        raise AssertionError("no error")
    except NonZeroExitCodeError as e:
        assert "failed with exit code 1" in str(e)
    try:
        await rt.run_in_session(BashAction(command="sleep 30", timeout=0.5))
        raise AssertionError("no timeout")
    except CommandTimeoutError as e:
        assert isinstance(e, TimeoutError)
        assert str(e) == "timeout after 0.5 seconds while running command 'sleep 30'", str(e)
    i = await rt.run_in_session(BashInterruptAction())
    assert i.exit_code == 0
    assert (await rt.run_in_session(BashAction(command="echo recovered"))).output == "recovered\\n"
    try:
        await rt.run_in_session(BashAction(command="if then"))
        raise AssertionError("no syntax error")
    except BashIncorrectSyntaxError as e:
        assert "syntax error" in e.extra_info["bash_stderr"], e.extra_info
    try:
        await rt.create_session(CreateBashSessionRequest())
        raise AssertionError("duplicate session")
    except SessionExistsError:
        pass
    try:
        await rt.run_in_session(BashAction(command="true", session="nope"))
        raise AssertionError("missing session")
    except SessionDoesNotExistError:
        pass
    c = await rt.execute(Command(command=["sh", "-c", "echo out; echo err >&2; exit 4"]))
    assert (c.stdout, c.stderr, c.exit_code) == ("out\\n", "err\\n", 4), c
    c = await rt.execute(Command(command="echo $0", shell=True, cwd="/tmp"))
    assert c.stdout == "/bin/sh\\n", c
    try:
        await rt.execute(Command(command=["sleep", "20"], timeout=0.5))
        raise AssertionError("no timeout")
    except CommandTimeoutError as e:
        assert str(e) == "Timeout (0.5s) exceeded while running command", str(e)
    try:
        await rt.execute(Command(command=["false"], check=True))
        raise AssertionError("no check")
    except NonZeroExitCodeError:
        pass
    await rt.write_file(WriteFileRequest(path="/root/state/s.json", content='{"a": 1}'))
    assert (await rt.read_file(ReadFileRequest(path="/root/state/s.json"))).content == '{"a": 1}'
    try:
        await rt.read_file(ReadFileRequest(path="/root/missing"))
        raise AssertionError("no error")
    except FileNotFoundError as e:
        assert str(e) == "[Errno 2] No such file or directory: '/root/missing'", str(e)
    try:
        await rt.read_file(ReadFileRequest(path="/root"))
        raise AssertionError("no error")
    except IsADirectoryError:
        pass
    await rt.upload(UploadRequest(source_path=bundle, target_path="/root/tools/bundle"))
    tool = "/root/tools/bundle/bin"
    c = await rt.execute(Command(command=f"chmod +x {tool}/* && {tool}/hello", shell=True))
    assert c.stdout == "hello from tool\\n", c
    await rt.upload(UploadRequest(source_path=single, target_path="/root/deep/dir/single.txt"))
    assert (await rt.read_file(ReadFileRequest(path="/root/deep/dir/single.txt"))).content == "single file\\n"
    await rt.close()
    try:
        await rt.run_in_session(BashAction(command="true"))
        raise AssertionError("sessions survived close")
    except SessionDoesNotExistError:
        pass
    sid = d.sandbox_id
    await d.stop()
    assert d.sandbox_id is None
    print("STOPPED", sid)
    print("OK")

asyncio.run(main())
`,
    [dir, upload, join(work, "single.txt")],
  );
  const id = /STOPPED (\S+)/.exec(out)![1]!;
  const res = await fetch(`${srv.url}/sandboxes/${id}`, { headers: { "X-API-Key": TOKEN } });
  assert.equal(res.status, 404, "stop() deleted the sandbox");
});

test("runtime client: 401 / 403 are HTTP errors, not alive; unknown class paths become SwerexException", async () => {
  const sb = (await (
    await fetch(`${srv.url}/sandboxes`, {
      method: "POST",
      headers: { "X-API-Key": TOKEN, "content-type": "application/json" },
      body: "{}",
    })
  ).json()) as { runtime_url: string; id: string };
  try {
    await py(
      "auth",
      `
import asyncio, sys
import aiohttp
from minisandbox.swerex.runtime import *

url, token, rt_url = sys.argv[1:4]

async def main():
    good = MinisandboxRuntime(host=rt_url, auth_token=token)
    assert (await good.is_alive(timeout=5)).is_alive
    for key, status, detail in (("wrong", 401, "Invalid API Key"), ("", 403, "Not authenticated")):
        rt = MinisandboxRuntime(host=rt_url, auth_token=key)
        alive = await rt.is_alive(timeout=5)
        assert not alive.is_alive and str(status) in alive.message and detail in alive.message, alive
        try:
            await rt.execute(Command(command="true"))
            raise AssertionError("no error")
        except aiohttp.ClientResponseError as e:
            assert e.status == status, e
    # A class path that cannot be imported falls back to SwerexException, with extra_info kept.
    try:
        good._raise_transferred({"message": "m", "class_path": "nowhere.SomeError", "extra_info": {"k": 1}})
    except SwerexException as e:
        assert str(e) == "m" and e.extra_info == {"k": 1}
    dead = MinisandboxRuntime(host="http://127.0.0.1:1")
    assert not (await dead.is_alive(timeout=1)).is_alive
    print("OK")

asyncio.run(main())
`,
      [sb.runtime_url],
    );
  } finally {
    await fetch(`${srv.url}/sandboxes/${sb.id}`, { method: "DELETE", headers: { "X-API-Key": TOKEN } });
  }
});

test("mini-swe-agent environment: fresh bash per command, merged output, cwd, env, timeout, submission", async () => {
  const dir = tempDir();
  writeFileSync(join(dir, "main.py"), "print('hi')\n");
  const out = await py(
    "env",
    `
import os, sys
from minisandbox.minisweagent import MinisandboxEnvironment, Submitted, instance_from_image
from minisandbox import MinisandboxError, ServerUnreachableError

url, token, src = sys.argv[1:4]
os.environ["FORWARDED"] = "fwd"
env = MinisandboxEnvironment(url=url, api_key=token, dir=src, env={"MY_VAR": "42"}, forward_env=["FORWARDED", "UNSET"],
                             timeout=10, interpreter=["bash", "-c"], executable="docker", run_args=["--rm"],
                             container_timeout="2h", pull_timeout=120)
r = env.execute("python3 main.py; echo err >&2; echo $MY_VAR $FORWARDED; pwd")
assert r == {"output": "hi\\nerr\\n42 fwd\\n/testbed\\n", "returncode": 0, "exception_info": ""}, r
assert env.execute({"command": "cd /tmp && export X=1"})["returncode"] == 0
r = env.execute({"command": "pwd; echo x$X"})
assert r["output"] == "/testbed\\nx\\n", "each command is a fresh bash: %r" % r
assert env.execute("exit 3")["returncode"] == 3
assert env.execute("pwd", cwd="/tmp")["output"] == "/tmp\\n"
r = env.execute("echo start; sleep 20", timeout=1)
assert r["returncode"] == -1 and "timed out after 1 seconds" in r["exception_info"], r
assert r["output"] == "start\\n", "partial output kept: %r" % r
assert r["extra"]["exception_type"] == "TimeoutExpired", r
r = env.execute("ls", cwd="/no/such/dir")
assert r["returncode"] != 0 and "No such file or directory" in r["output"], r
try:
    env.execute("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the patch")
    raise AssertionError("not submitted")
except Submitted as s:
    assert s.args[0]["extra"]["submission"] == "the patch\\n", s.args
assert env.get_template_vars()["sandbox"]["id"] == env.sandbox["id"]
assert "api_key" not in env.serialize()["info"]["config"]["environment"]
assert env.serialize()["info"]["minisandbox"]["selection"] == {"dir": src}
sid = env.sandbox["id"]
env.cleanup()
env.close()
print("CLOSED", sid)
with MinisandboxEnvironment(url=url, api_key=token, allow_empty=True) as e2:
    assert e2.execute("echo ctx")["output"] == "ctx\\n"
    sid2 = e2.sandbox["id"]
print("CLOSED", sid2)
# No selection: nothing is created, and the first command that does not select says how in one line.
lazy = MinisandboxEnvironment(url=url, api_key=token)
assert lazy.sandbox is None
try:
    lazy.execute("ls /testbed")
    raise AssertionError("ran without a workspace")
except MinisandboxError as e:
    assert "no workspace selected" in str(e) and "minisandbox-instance" in str(e) and "\\n" not in str(e), str(e)
try:
    MinisandboxEnvironment(url=url, api_key=token, no_such_option=1)
    raise AssertionError("unknown option accepted")
except TypeError as e:
    assert "no_such_option" in str(e) and "interpreter" in str(e), str(e)
try:
    MinisandboxEnvironment(url="http://127.0.0.1:9", api_key=token, allow_empty=True)
    raise AssertionError("no error")
except ServerUnreachableError as e:
    assert "no answer from minisandbox at http://127.0.0.1:9" in str(e) and "\\n" not in str(e), str(e)
image = "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
assert instance_from_image(image) == "django__django-11099"
assert instance_from_image("python:3.11") is None
print("OK")
`,
    [dir],
  );
  for (const m of out.matchAll(/CLOSED (\S+)/g)) {
    const res = await fetch(`${srv.url}/sandboxes/${m[1]}`, { headers: { "X-API-Key": TOKEN } });
    assert.equal(res.status, 404, `${m[1]} deleted`);
  }
});

test("the adapters agree with the wire contract (fields, defaults, types, the bodies they send)", async () => {
  const r = await run(python, [join(ADAPTERS, "contract_check.py")], {
    env: { PATH: process.env.PATH, PYTHONPATH: ADAPTERS, PYTHONDONTWRITEBYTECODE: "1" },
    timeoutMs: 60_000,
  });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^CONTRACT OK$/m);
});

test("without a token the adapters read the server's token file (same home resolution as the CLI)", async () => {
  const h = tempHome("msb-py-tokenfile-");
  const s2 = await startServer({ home: h });
  try {
    const out = await py(
      "tokenfile",
      `
import asyncio, sys
from minisandbox import default_token
from minisandbox.minisweagent import MinisandboxEnvironment
from minisandbox.swerex.deployment import MinisandboxDeployment
from minisandbox.swerex.runtime import MinisandboxRuntime

url = sys.argv[3]

async def main():
    d = MinisandboxDeployment(url=url)
    await d.start()
    from minisandbox.swerex.runtime import Command
    assert (await d.runtime.execute(Command(command="true"))).exit_code == 0
    bare = MinisandboxRuntime(host=d.runtime.host, auth_token="")
    assert not (await bare.is_alive(timeout=5)).is_alive, "an explicit empty token sends none"
    await d.stop()
    with MinisandboxEnvironment(url=url, allow_empty=True) as e:
        assert e.execute("echo ok")["output"] == "ok\\n"
    assert default_token("/nowhere") == ""
    print("OK")

asyncio.run(main())
`,
      [s2.url],
      { MINISANDBOX_HOME: h },
    );
    assert.match(out, /OK/);
  } finally {
    await s2.close();
  }
});

test("the package's stdlib client: sandboxes, exec with partial output on timeout, files, typed errors", async () => {
  await py(
    "client",
    `
import sys
from minisandbox import Client, NotFoundError, AuthError, InvalidInputError, ServerUnreachableError

url, token = sys.argv[1:3]
c = Client(url, token)
assert c.healthy()
sb = c.create_sandbox(env={"GREETING": "hi"}, limits={"pids": 64})
r = c.exec(sb["id"], "echo $GREETING; echo oops >&2; exit 3")
assert (r["exit_code"], r["stdout"], r["stderr"]) == (3, "hi\\n", "oops\\n"), r
r = c.exec(sb["id"], "echo partial; sleep 30", timeout=1)
assert r["timed_out"] and r["stdout"] == "partial\\n", r
c.exec(sb["id"], ["sh", "-c", "printf 'a\\\\0b' > /tmp/bin"])
assert c.read_file(sb["id"], "/tmp/bin") == b"a\\x00b"
assert any(s["id"] == sb["id"] for s in c.list_sandboxes())
assert c.delete_sandbox(sb["id"]) is True and c.delete_sandbox(sb["id"]) is False
try:
    c.get_sandbox(sb["id"]); raise SystemExit("no error")
except NotFoundError as e:
    assert e.status == 404 and e.code == "sandbox_not_found", (e.status, e.code)
try:
    c.create_sandbox(limits={"pids": 1.5}); raise SystemExit("no error")
except InvalidInputError as e:
    assert e.status == 422 and "pids" in str(e), str(e)
try:
    Client(url, "wrong").list_sandboxes(); raise SystemExit("no error")
except AuthError as e:
    assert e.status == 401
try:
    Client("http://127.0.0.1:9", "x").list_sandboxes(); raise SystemExit("no error")
except ServerUnreachableError as e:
    assert "minisandbox serve" in str(e), str(e)
print("OK")
`,
  );
});
