"""The SWE-ReX runtime and deployment adapters (``swerex`` extra) against a real server: sessions, timeouts and
recovery, commands, files and uploads, the exception classes of 511 answers, authentication."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from minisandbox import Client

from .conftest import Server

pytest.importorskip("aiohttp")
pytest.importorskip("pydantic")

from minisandbox.swerex.deployment import MinisandboxDeployment
from minisandbox.swerex.runtime import (
    BashAction,
    BashIncorrectSyntaxError,
    BashInterruptAction,
    Command,
    CommandTimeoutError,
    CreateBashSessionRequest,
    DeploymentNotStartedError,
    MinisandboxRuntime,
    NonZeroExitCodeError,
    ReadFileRequest,
    SessionDoesNotExistError,
    SessionExistsError,
    SwerexException,
    UploadRequest,
    WriteFileRequest,
)


async def _sessions(rt: MinisandboxRuntime) -> None:
    await rt.write_file(WriteFileRequest(path="/root/.bashrc", content="export FROM_RC=1\n"))
    r = await rt.create_session(CreateBashSessionRequest(startup_source=["/root/.bashrc"], startup_timeout=10))
    assert r.output == "", r
    obs = await rt.run_in_session(BashAction(command="cat README.md; echo $FROM_RC; cd /tmp"))
    assert (obs.output, obs.exit_code) == ("fixture\n1\n", 0)
    assert (await rt.run_in_session(BashAction(command="pwd"))).output == "/tmp\n"
    assert (await rt.run_in_session(BashAction(command="false", check="silent"))).exit_code == 1
    with pytest.raises(NonZeroExitCodeError, match="failed with exit code 1"):
        await rt.run_in_session(BashAction(command="false"))
    with pytest.raises(CommandTimeoutError) as timeout:
        await rt.run_in_session(BashAction(command="sleep 30", timeout=0.5))
    assert isinstance(timeout.value, TimeoutError)
    assert str(timeout.value) == "timeout after 0.5 seconds while running command 'sleep 30'"
    assert (await rt.run_in_session(BashInterruptAction())).exit_code == 0
    assert (await rt.run_in_session(BashAction(command="echo recovered"))).output == "recovered\n"
    with pytest.raises(BashIncorrectSyntaxError) as syntax:
        await rt.run_in_session(BashAction(command="if then"))
    assert "syntax error" in syntax.value.extra_info["bash_stderr"]
    with pytest.raises(SessionExistsError):
        await rt.create_session(CreateBashSessionRequest())
    with pytest.raises(SessionDoesNotExistError):
        await rt.run_in_session(BashAction(command="true", session="nope"))


async def _commands(rt: MinisandboxRuntime) -> None:
    c = await rt.execute(Command(command=["sh", "-c", "echo out; echo err >&2; exit 4"]))
    assert (c.stdout, c.stderr, c.exit_code) == ("out\n", "err\n", 4), c
    c = await rt.execute(Command(command="echo $0", shell=True, cwd="/tmp"))
    assert c.stdout == "/bin/sh\n", c
    with pytest.raises(CommandTimeoutError, match=r"^Timeout \(0.5s\) exceeded while running command$"):
        await rt.execute(Command(command=["sleep", "20"], timeout=0.5))
    with pytest.raises(NonZeroExitCodeError):
        await rt.execute(Command(command=["false"], check=True))


async def _files(rt: MinisandboxRuntime, bundle: Path, single: Path) -> None:
    await rt.write_file(WriteFileRequest(path="/root/state/s.json", content='{"a": 1}'))
    assert (await rt.read_file(ReadFileRequest(path="/root/state/s.json"))).content == '{"a": 1}'
    with pytest.raises(FileNotFoundError) as missing:
        await rt.read_file(ReadFileRequest(path="/root/missing"))
    assert str(missing.value) == "[Errno 2] No such file or directory: '/root/missing'"
    with pytest.raises(IsADirectoryError):
        await rt.read_file(ReadFileRequest(path="/root"))
    await rt.upload(UploadRequest(source_path=str(bundle), target_path="/root/tools/bundle"))
    tool = "/root/tools/bundle/bin"
    c = await rt.execute(Command(command=f"chmod +x {tool}/* && {tool}/hello", shell=True))
    assert c.stdout == "hello from tool\n", c
    await rt.upload(UploadRequest(source_path=str(single), target_path="/root/deep/dir/single.txt"))
    assert (await rt.read_file(ReadFileRequest(path="/root/deep/dir/single.txt"))).content == "single file\n"
    with pytest.raises(ValueError, match="is not a file or directory"):
        await rt.upload(UploadRequest(source_path=str(single.parent / "absent"), target_path="/root/x"))


def test_deployment_and_runtime_sessions_commands_files_and_stop(server: Server, workdir: Path, base: Path) -> None:
    (workdir / "README.md").write_text("fixture\n")
    bundle = base / "bundle"
    (bundle / "bin").mkdir(parents=True, exist_ok=True)
    (bundle / "bin" / "hello").write_text("#!/bin/sh\necho hello from tool\n")
    single = base / "single.txt"
    single.write_text("single file\n")

    async def main() -> str:
        d = MinisandboxDeployment(url=server.url, auth_token=server.token, dir=str(workdir), limits={"pids": 300})
        with pytest.raises(DeploymentNotStartedError):
            _ = d.runtime
        await d.start()
        rt = d.runtime
        assert rt.host == f"{server.url}/sandboxes/{d.sandbox_id}"
        assert (await d.is_alive()).is_alive
        await _sessions(rt)
        await _commands(rt)
        await _files(rt, bundle, single)
        await rt.close()
        with pytest.raises(SessionDoesNotExistError):
            await rt.run_in_session(BashAction(command="true"))
        sid = d.sandbox_id
        assert sid is not None
        await d.stop()
        assert d.sandbox_id is None
        return sid

    sid = asyncio.run(main())
    assert all(s["id"] != sid for s in server.client().list_sandboxes()), "stop() deleted the sandbox"


def test_runtime_auth_failures_are_http_errors_and_not_alive(server: Server, client: Client) -> None:
    import aiohttp

    sb = client.create_sandbox()

    async def main() -> None:
        good = MinisandboxRuntime(host=sb["runtime_url"], auth_token=server.token)
        assert (await good.is_alive(timeout=5)).is_alive
        for key, status, detail in (("wrong", 401, "Invalid API Key"), ("", 403, "Not authenticated")):
            rt = MinisandboxRuntime(host=sb["runtime_url"], auth_token=key)
            alive = await rt.is_alive(timeout=5)
            assert not alive.is_alive
            assert str(status) in alive.message
            assert detail in alive.message
            with pytest.raises(aiohttp.ClientResponseError) as e:
                await rt.execute(Command(command="true"))
            assert e.value.status == status
        dead = MinisandboxRuntime(host="http://127.0.0.1:1")
        assert not (await dead.is_alive(timeout=1)).is_alive
        with pytest.raises(TimeoutError, match="did not start within"):
            await dead.wait_until_alive(timeout=0.5)

    try:
        asyncio.run(main())
    finally:
        client.delete_sandbox(sb["id"])


def test_an_unknown_remote_exception_class_becomes_swerex_exception_with_its_extra_info() -> None:
    rt = MinisandboxRuntime(host="http://127.0.0.1:1")
    with pytest.raises(SwerexException) as e:
        rt._raise_transferred({"message": "m", "class_path": "nowhere.SomeError", "extra_info": {"k": 1}})
    assert str(e.value) == "m"
    assert getattr(e.value, "extra_info", None) == {"k": 1}
    with pytest.raises(KeyError) as builtin:
        rt._raise_transferred({"message": "gone", "class_path": "builtins.KeyError"})
    assert getattr(builtin.value, "extra_info", None) == {}


def test_a_refused_deployment_says_why(server: Server) -> None:
    from minisandbox.swerex.runtime import DeploymentStartupError

    async def main() -> None:
        d = MinisandboxDeployment(url=server.url, auth_token=server.token, instance_id="no-such-instance")
        with pytest.raises(DeploymentStartupError, match="refused to create a sandbox \\(HTTP 404\\)"):
            await d.start()

    asyncio.run(main())
