"""``minisandbox.Client`` against a real server: sandboxes, commands, files, labels, instances, typed refusals."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from minisandbox import (
    Client,
    ForbiddenError,
    InvalidInputError,
    LimitError,
    NotFoundError,
    RequestValidationError,
    SandboxNotFoundError,
    ServerUnreachableError,
    UnauthorizedError,
)

from .conftest import CAPPED, Server


def test_commands_run_in_a_fresh_process_with_their_env_cwd_stdin_and_exit_status(client: Client) -> None:
    sb = client.create_sandbox(env={"GREETING": "hi"}, limits={"pids": 64})
    try:
        r = client.exec(sb["id"], "echo $GREETING; echo oops >&2; exit 3")
        assert (r["exit_code"], r["stdout"], r["stderr"], r["timed_out"]) == (3, "hi\n", "oops\n", False)
        assert client.exec(sb["id"], ["sh", "-c", 'echo "$0|$1"', "a b", "c"])["stdout"] == "a b|c\n"
        assert client.exec(sb["id"], "cat", stdin="from stdin")["stdout"] == "from stdin"
        assert client.exec(sb["id"], "pwd; echo $X", cwd="/tmp", env={"X": "1"})["stdout"] == "/tmp\n1\n"
        merged = client.exec(sb["id"], "echo out; echo err >&2", merge_output=True)
        assert (merged["stdout"], merged["stderr"]) == ("out\nerr\n", "")
        client.exec(sb["id"], "export LEFT=1; cd /tmp")
        assert client.exec(sb["id"], "echo x$LEFT; pwd")["stdout"] != "x1\n/tmp\n", "no state between commands"
    finally:
        client.delete_sandbox(sb["id"])


def test_a_command_out_of_time_is_killed_and_keeps_its_output_so_far(client: Client) -> None:
    sb = client.create_sandbox()
    try:
        r = client.exec(sb["id"], "echo partial; sleep 30; echo never", timeout=1)
        assert r["timed_out"], r
        assert r["stdout"] == "partial\n"
        assert client.exec(sb["id"], "pgrep -x sleep || echo none")["stdout"] == "none\n", "its process tree is gone"
    finally:
        client.delete_sandbox(sb["id"])


def test_a_directory_is_mounted_copy_on_write(client: Client, workdir: Path) -> None:
    (workdir / "main.py").write_text("print('hi')\n")
    sb = client.create_sandbox(dir=str(workdir))
    try:
        assert client.exec(sb["id"], "python3 main.py")["stdout"] == "hi\n"
        client.exec(sb["id"], "echo changed > main.py && printf 'a\\0b' > /tmp/bin")
        assert client.read_file(sb["id"], "/testbed/main.py") == b"changed\n"
        assert client.read_file(sb["id"], "/tmp/bin") == b"a\x00b"
        assert (workdir / "main.py").read_text() == "print('hi')\n", "the host directory is untouched"
    finally:
        client.delete_sandbox(sb["id"])


def test_an_instance_sandbox_is_its_repository_at_the_base_commit_and_grades_its_work(server: Server) -> None:
    c, inst = server.client(), server.instance
    sb = c.create_sandbox(instance_id=inst["instance_id"])
    try:
        assert c.exec(sb["id"], "cd /testbed && git rev-parse HEAD")["stdout"].strip() == inst["base_commit"]
        assert c.diff(sb["id"]) == ""
        r = c.exec(sb["id"], "cd /testbed && git apply", stdin=inst["patch"])
        assert r["exit_code"] == 0, r
        assert c.diff(sb["id"]).startswith("diff --git")
        assert c.evaluate(sb["id"])["resolved"] is True
    finally:
        c.delete_sandbox(sb["id"])
    with pytest.raises(NotFoundError):
        c.create_sandbox(instance_id="no-such-instance")


def test_labels_select_sandboxes_to_list_and_delete(client: Client) -> None:
    a = client.create_sandbox(labels={"run": "labels-test", "part": "a"})
    b = client.create_sandbox(labels={"run": "labels-test", "part": "b"})
    other = client.create_sandbox(labels={"run": "elsewhere"})
    try:
        assert {s["id"] for s in client.list_sandboxes(run="labels-test")} == {a["id"], b["id"]}
        assert [s["id"] for s in client.list_sandboxes(run="labels-test", part="b")] == [b["id"]]
        assert sorted(client.delete_sandboxes(run="labels-test")) == sorted([a["id"], b["id"]])
        assert client.list_sandboxes(run="labels-test") == []
        assert any(s["id"] == other["id"] for s in client.list_sandboxes())
        with pytest.raises(ValueError, match="at least one label"):
            client.delete_sandboxes()
    finally:
        client.delete_sandbox(other["id"])


def test_deleted_sandboxes_are_gone_and_their_processes_too(server: Server, client: Client) -> None:
    sb = client.create_sandbox()
    client.exec(sb["id"], "sleep 300 >/dev/null 2>&1 &")
    assert client.delete_sandbox(sb["id"]) is True
    assert client.delete_sandbox(sb["id"]) is False
    with pytest.raises(SandboxNotFoundError) as e:
        client.get_sandbox(sb["id"])
    assert (e.value.status, e.value.code) == (404, "sandbox_not_found")
    assert isinstance(e.value, NotFoundError)
    assert isinstance(e.value, LookupError)
    left = subprocess.run(["pgrep", "-f", sb["id"]], capture_output=True, text=True, check=False).stdout
    assert left == "", "no process of the sandbox is left"


def test_refusals_raise_the_class_of_their_code(server: Server, client: Client, base: Path) -> None:
    with pytest.raises(RequestValidationError) as v:
        client.create_sandbox(limits={"pids": 1.5})
    assert v.value.status == 422
    assert "pids" in str(v.value)
    assert isinstance(v.value, InvalidInputError)
    assert isinstance(v.value.detail, list)
    assert v.value.detail[0]["loc"][-1] == "pids"
    with pytest.raises(UnauthorizedError) as u:
        server.client("wrong").list_sandboxes()
    assert u.value.status == 401
    with pytest.raises(ForbiddenError) as f:
        server.client("").list_sandboxes()
    assert f.value.status == 403
    with pytest.raises(ForbiddenError, match="may mount"):
        client.create_sandbox(dir=str(base.parent))
    sb = client.create_sandbox()
    try:
        with pytest.raises(InvalidInputError, match="only instance sandboxes can be evaluated"):
            client.evaluate(sb["id"])
    finally:
        client.delete_sandbox(sb["id"])


def test_a_principal_over_its_limit_gets_a_limit_error(server: Server) -> None:
    capped = server.client(str(CAPPED["token"]))
    first = capped.create_sandbox()
    try:
        with pytest.raises(LimitError) as e:
            capped.create_sandbox()
        assert e.value.status == 429
        assert e.value.code == "limit_reached"
        with pytest.raises(NotFoundError):
            capped.get_sandbox(server.client().create_sandbox(labels={"owner": "admin"})["id"])
    finally:
        capped.delete_sandbox(first["id"])
        server.client().delete_sandboxes(owner="admin")


def test_no_answer_at_all_is_server_unreachable_with_the_url_and_the_fix() -> None:
    c = Client("http://127.0.0.1:9", "x")
    assert c.healthy() is False
    with pytest.raises(ServerUnreachableError) as e:
        c.list_sandboxes()
    text = str(e.value)
    assert "http://127.0.0.1:9" in text
    assert "minisandbox serve" in text
    assert "\n" not in text
    assert e.value.code == "unreachable"
    assert isinstance(e.value, ConnectionError)


def test_healthy_and_the_context_manager(server: Server) -> None:
    with server.client() as c:
        assert c.healthy() is True
