/**
 * SWE-ReX's own `RemoteRuntime` (unmodified, from a SWE-ReX checkout or git repository named by SWEREX_REPO, else
 * its git mirror) against a real `serve` process with a token: the protocol works unchanged, with `X-API-Key`.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runOk, run } from "../src/util/run.js";
import { cachedVenv, tempDir, tempHome } from "./helpers.js";
import { call, startServe } from "./serve-process.js";
import { mirror } from "./agent-clients.js";

const REPO = process.env.SWEREX_REPO ?? mirror("SWE-agent/SWE-ReX", "SWEREX_MIRROR");
const skip = REPO
  ? false
  : "SKIPPED LOUDLY: no SWE-ReX source: set SWEREX_REPO (a checkout or git repository) or provide its mirror " +
    "(SWEREX_MIRROR or MINISANDBOX_MIRRORS)";

/** SWE-ReX's `src/` from a checkout or (bare) git repository, extracted into a fresh directory. */
async function swerexSource(repo: string): Promise<string> {
  if (existsSync(join(repo, "src", "swerex", "runtime", "remote.py"))) return join(repo, "src");
  const out = tempDir("msb-swerex-src-");
  const tar = join(out, "src.tar");
  await runOk("git", [
    "--git-dir",
    existsSync(join(repo, ".git")) ? join(repo, ".git") : repo,
    "archive",
    "-o",
    tar,
    "HEAD",
    "src/swerex",
  ]);
  await runOk("tar", ["-xf", tar, "-C", out]);
  return join(out, "src");
}

test("SWE-ReX's RemoteRuntime drives a sandbox of a token-protected server unchanged", { skip }, async () => {
  const src = await swerexSource(REPO!);
  const venv = await cachedVenv("swerex-client", ["aiohttp", "pydantic", "rich", "typing_extensions"]);
  const home = tempHome("msb-swerex-");
  const token = "swerex-client-token-0123456789";
  const s = await startServe(home, ["--auth-token", token]);
  const sb = await call(s.url, "POST", "/sandboxes", { key: token, body: {} });
  assert.equal(sb.status, 201, sb.text);
  const work = tempDir("msb-swerex-work-");
  mkdirSync(join(work, "bundle", "bin"), { recursive: true });
  writeFileSync(join(work, "bundle", "bin", "hi"), "#!/bin/sh\necho hi from bundle\n", { mode: 0o755 });
  const script = join(work, "drive.py");
  writeFileSync(
    script,
    `
import asyncio, sys
from swerex.runtime.remote import RemoteRuntime
from swerex.runtime.abstract import *
from swerex.exceptions import CommandTimeoutError, NonZeroExitCodeError

url, token, bundle = sys.argv[1:4]

async def main():
    rt = RemoteRuntime(host=url, port=None, auth_token=token)
    assert (await rt.is_alive()).is_alive
    assert not (await RemoteRuntime(host=url, port=None, auth_token="wrong").is_alive()).is_alive
    await rt.create_session(CreateBashSessionRequest(startup_timeout=10))
    obs = await rt.run_in_session(BashAction(command="cd /tmp && export V=1", check="silent"))
    assert obs.exit_code == 0, obs
    assert (await rt.run_in_session(BashAction(command="pwd; echo $V"))).output == "/tmp\\n1\\n"
    try:
        await rt.run_in_session(BashAction(command="sleep 20", timeout=0.5))
        raise AssertionError("no timeout")
    except CommandTimeoutError:
        pass
    await rt.run_in_session(BashInterruptAction())
    try:
        await rt.run_in_session(BashAction(command="false"))
        raise AssertionError("no error")
    except NonZeroExitCodeError:
        pass
    r = await rt.execute(Command(command=["sh", "-c", "echo out; echo err >&2; exit 3"]))
    assert (r.stdout, r.stderr, r.exit_code) == ("out\\n", "err\\n", 3), r
    await rt.write_file(WriteFileRequest(path="/root/state.json", content="{}"))
    assert (await rt.read_file(ReadFileRequest(path="/root/state.json"))).content == "{}"
    await rt.upload(UploadRequest(source_path=bundle, target_path="/root/tools/bundle"))
    r = await rt.execute(Command(command="/root/tools/bundle/bin/hi", shell=True))
    assert r.stdout == "hi from bundle\\n", r
    await rt.close()
    print("OK")

asyncio.run(main())
`,
  );
  const r = await run(join(venv, "bin", "python"), [script, sb.json.runtime_url, token, join(work, "bundle")], {
    env: { PATH: process.env.PATH, PYTHONPATH: src, PYTHONDONTWRITEBYTECODE: "1", NO_PROXY: "*" },
    timeoutMs: 120_000,
  });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /OK\n$/);
});
