"""The mini-swe-agent environment against a real server: fresh bash per command, merged output, cwd and env,
timeouts, submissions, the ways a workspace is selected, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from minisandbox import MinisandboxError, ServerUnreachableError
from minisandbox.minisweagent import MinisandboxEnvironment, Submitted, instance_from_image

from .conftest import Server


def _gone(server: Server, sandbox_id: str) -> bool:
    return all(s["id"] != sandbox_id for s in server.client().list_sandboxes())


def test_each_command_is_a_fresh_bash_with_merged_output_cwd_env_and_timeout(
    server: Server, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / "main.py").write_text("print('hi')\n")
    monkeypatch.setenv("FORWARDED", "fwd")
    monkeypatch.delenv("UNSET", raising=False)
    env = MinisandboxEnvironment(
        url=server.url,
        api_key=server.token,
        dir=str(workdir),
        env={"MY_VAR": "42"},
        forward_env=["FORWARDED", "UNSET"],
        timeout=10,
        interpreter=["bash", "-c"],
        executable="docker",
        run_args=["--rm"],
        container_timeout="2h",
        pull_timeout=120,
    )
    r = env.execute("python3 main.py; echo err >&2; echo $MY_VAR $FORWARDED; pwd")
    assert r == {"output": "hi\nerr\n42 fwd\n/testbed\n", "returncode": 0, "exception_info": ""}
    assert env.execute({"command": "cd /tmp && export X=1"})["returncode"] == 0
    assert env.execute({"command": "pwd; echo x$X"})["output"] == "/testbed\nx\n", "each command is a fresh bash"
    assert env.execute("exit 3")["returncode"] == 3
    assert env.execute("pwd", cwd="/tmp")["output"] == "/tmp\n"
    r = env.execute("echo start; sleep 20", timeout=1)
    assert r["returncode"] == -1
    assert "timed out after 1 seconds" in r["exception_info"]
    assert r["output"] == "start\n", "partial output kept"
    assert r["extra"]["exception_type"] == "TimeoutExpired"
    r = env.execute("ls", cwd="/no/such/dir")
    assert r["returncode"] != 0
    assert "No such file or directory" in r["output"]
    with pytest.raises(Submitted) as s:
        env.execute("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the patch")
    assert s.value.args[0]["extra"]["submission"] == "the patch\n"
    sid = env.serialize()["info"]["minisandbox"]["sandbox_id"]
    assert env.get_template_vars()["sandbox"]["id"] == sid
    info = env.serialize()["info"]
    assert "api_key" not in info["config"]["environment"]
    assert server.token not in str(info)
    assert info["minisandbox"]["selection"] == {"dir": str(workdir)}
    env.cleanup()
    env.close()
    assert env.sandbox is None
    assert _gone(server, sid)


def test_the_first_command_or_the_image_selects_the_instance(server: Server) -> None:
    iid = server.instance["instance_id"]
    lazy = MinisandboxEnvironment(url=server.url, api_key=server.token)
    assert lazy.sandbox is None, "nothing is created before the selection"
    first = lazy.execute(f"minisandbox-instance {iid}")
    assert first["returncode"] == 0
    assert iid in first["output"]
    r = lazy.execute("cd /testbed && git rev-parse HEAD")
    assert r["output"].strip() == server.instance["base_commit"]
    assert lazy.serialize()["info"]["minisandbox"]["selection"] == {"instance_id": iid}
    lazy.cleanup()
    with MinisandboxEnvironment(url=server.url, api_key=server.token) as both:
        r = both.execute(f"minisandbox-instance {iid}\ncd /testbed && git status --short && echo clean")
        assert r["output"] == "clean\n", "a selection followed by commands runs them"
    image = f"docker.io/swebench/sweb.eval.x86_64.{iid.replace('__', '_1776_')}:latest"
    assert instance_from_image(image) == iid
    assert instance_from_image("python:3.11") is None
    with MinisandboxEnvironment(url=server.url, api_key=server.token, image=image) as by_image:
        assert by_image.selection == {"instance_id": iid}
        assert by_image.sandbox is not None


def test_without_a_selection_the_first_command_says_how_in_one_line(server: Server) -> None:
    lazy = MinisandboxEnvironment(url=server.url, api_key=server.token)
    with pytest.raises(MinisandboxError) as e:
        lazy.execute("ls /testbed")
    text = str(e.value)
    assert "no workspace selected" in text
    assert "minisandbox-instance" in text
    assert "\n" not in text
    assert e.value.code == "invalid_input"
    with MinisandboxEnvironment(url=server.url, api_key=server.token, allow_empty=True) as empty:
        assert empty.execute("echo ctx")["output"] == "ctx\n"
        sid = empty.serialize()["info"]["minisandbox"]["sandbox_id"]
    assert _gone(server, sid), "leaving the context deletes the sandbox"


def test_unknown_options_and_an_unreachable_server_are_refused_clearly(server: Server) -> None:
    with pytest.raises(TypeError) as unknown:
        MinisandboxEnvironment(url=server.url, api_key=server.token, no_such_option=1)
    assert "no_such_option" in str(unknown.value)
    assert "interpreter" in str(unknown.value)
    with pytest.raises(ServerUnreachableError) as e:
        MinisandboxEnvironment(url="http://127.0.0.1:9", api_key="x", allow_empty=True)
    assert "no answer from minisandbox at http://127.0.0.1:9" in str(e.value)
    assert "\n" not in str(e.value)
