"""Where the home and the server's token are: the same answer as the CLI's own resolution, and every adapter finds the
token a real ``serve`` generated there."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from minisandbox import Client, ForbiddenError, UnauthorizedError, default_token, resolve_home, token_file
from minisandbox.minisweagent import MinisandboxEnvironment
from minisandbox.rl import RolloutClient

from .conftest import REPO, node_eval, start_serve, stop_serve

HOME_VARS = ("MINISANDBOX_HOME", "XDG_DATA_HOME", "HOME")


def _typescript_home(env: dict[str, str]) -> str:
    """``resolveHome()`` of the compiled TypeScript, under exactly these variables (and PATH)."""
    module = REPO / "dist" / "src" / "util" / "home.js"
    code = f"const m = await import({json.dumps(str(module))}); process.stdout.write(m.resolveHome());"
    return node_eval(code, {"PATH": os.environ.get("PATH", ""), **env}, inherit=False)


@pytest.mark.parametrize(
    "env",
    [
        {"HOME": "/home/u"},
        {"HOME": "/home/u", "XDG_DATA_HOME": "/data"},
        {"HOME": "/home/u", "XDG_DATA_HOME": "/data", "MINISANDBOX_HOME": "/srv/msb"},
        {"HOME": "/home/u", "MINISANDBOX_HOME": "relative/msb"},
        {"HOME": "/home/u", "XDG_DATA_HOME": "rel-data"},
        {"HOME": "/home/u", "MINISANDBOX_HOME": ""},
    ],
    ids=["user-home", "xdg", "minisandbox-home-first", "relative-home", "relative-xdg", "empty-is-unset"],
)
def test_the_home_is_resolved_exactly_as_the_cli_resolves_it(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in HOME_VARS:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ours = resolve_home()
    assert ours == _typescript_home(env)
    assert os.path.isabs(ours)
    assert resolve_home("explicit/dir") == os.path.abspath("explicit/dir"), "an explicit home wins"


def test_the_token_file_is_read_stripped_and_missing_means_none(tmp_path: Path) -> None:
    assert token_file(str(tmp_path)) == str(tmp_path / "server" / "token")
    assert default_token(str(tmp_path)) == ""
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "token").write_text("secret-token\n")
    assert default_token(str(tmp_path)) == "secret-token"


@pytest.fixture(scope="module")
def generated(base: Path) -> Iterator[tuple[str, Path]]:
    """A server started without a token: it generates one in its home's token file."""
    home = base / "tokenfile-home"
    url, proc = start_serve(home, ["--log-level", "warn"], base)
    yield url, home
    stop_serve(proc)


def test_the_generated_token_is_private_and_found_by_every_client(
    generated: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, home = generated
    path = Path(token_file(str(home)))
    assert path.stat().st_mode & 0o077 == 0, "the token file is readable by its owner only"
    for k in ("MINISANDBOX_API_KEY", "MINISANDBOX_HOME"):
        monkeypatch.delenv(k, raising=False)
    assert Client(url, home=str(home)).list_sandboxes() == []
    monkeypatch.setenv("MINISANDBOX_HOME", str(home))
    assert Client(url).healthy()
    assert Client(url).list_sandboxes() == []
    assert RolloutClient(url).client.token == path.read_text().strip()
    with MinisandboxEnvironment(url=url, allow_empty=True) as env:
        assert env.execute("echo ok")["output"] == "ok\n"
    monkeypatch.setenv("MINISANDBOX_API_KEY", "an-explicit-key-wins-over-the-file")
    with pytest.raises(UnauthorizedError):
        Client(url).list_sandboxes()
    with pytest.raises(ForbiddenError):
        Client(url, "").list_sandboxes()


def test_the_swerex_adapters_find_the_token_too(generated: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("aiohttp")
    from minisandbox.swerex.deployment import MinisandboxDeployment
    from minisandbox.swerex.runtime import Command, MinisandboxRuntime

    url, home = generated
    monkeypatch.delenv("MINISANDBOX_API_KEY", raising=False)
    monkeypatch.setenv("MINISANDBOX_HOME", str(home))

    async def main() -> None:
        d = MinisandboxDeployment(url=url)
        await d.start()
        try:
            assert (await d.runtime.execute(Command(command="true"))).exit_code == 0
            bare = MinisandboxRuntime(host=d.runtime.host, auth_token="")
            assert not (await bare.is_alive(timeout=5)).is_alive, "an explicit empty token sends none"
            assert (await MinisandboxRuntime(host=d.runtime.host, home=str(home)).is_alive(timeout=5)).is_alive
        finally:
            await d.stop()

    asyncio.run(main())
