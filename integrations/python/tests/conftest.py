"""Fixtures of the package's tests: a real ``minisandbox serve`` (the repository's built CLI) with the fixture dataset
of src/fixtures, its environments built.

Given by ``test/python-package.test.ts`` (``npm test``): ``MINISANDBOX_TEST_DATASET``, ``MINISANDBOX_TEST_REPOS`` and
``MINISANDBOX_TEST_HOME`` (a fresh home of this run that already holds the dataset's first environments: the server
runs there). Without them (``pytest`` run by
hand after ``npm run build``) the fixture dataset is generated here and its first instance built, which takes a minute.
``MINISANDBOX_TEST_CLI`` / ``MINISANDBOX_TEST_NODE``: the CLI module and node (default: the checkout's dist, ``node``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from minisandbox import Client

REPO = Path(__file__).resolve().parents[3]
TOKEN = "pytest-admin-token-0123456789"
#: A second principal that may hold one sandbox at a time (limits and ownership).
CAPPED = {"name": "capped", "token": "pytest-capped-token-0123456789", "max_sandboxes": 1}


@dataclass
class Server:
    """A running ``minisandbox serve``."""

    url: str
    token: str
    home: Path
    dataset: Path
    rows: list[dict[str, Any]]
    proc: subprocess.Popen[bytes]

    @property
    def instance(self) -> dict[str, Any]:
        """The dataset's first instance (its environment is built)."""
        return self.rows[0]

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, self.token if token is None else token)


def node() -> str:
    return os.environ.get("MINISANDBOX_TEST_NODE") or shutil.which("node") or "node"


def cli() -> list[str]:
    module = os.environ.get("MINISANDBOX_TEST_CLI") or str(REPO / "dist" / "src" / "cli" / "index.js")
    if not Path(module).exists():
        pytest.exit(f"{module} not found: run `npm run build` in {REPO} first", returncode=2)
    return [node(), module]


def node_eval(code: str, env: dict[str, str] | None = None, *, inherit: bool = True) -> str:
    """Run an ES module snippet with node (the repository's compiled modules importable by absolute path); its
    stdout. ``env`` is added to this process's environment, or (``inherit=False``) is all of it."""
    r = subprocess.run(
        [node(), "--input-type=module", "-e", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**(os.environ if inherit else {}), **(env or {})},
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _generated_fixture(base: Path) -> tuple[Path, Path, Path]:
    """The fixture dataset of src/fixtures (one instance) and a home with its environment built."""
    generate = REPO / "dist" / "src" / "fixtures" / "generate.js"
    out = node_eval(
        f"const m = await import({json.dumps(str(generate))});"
        f"const f = await m.makeFixtureDataset({json.dumps(str(base / 'fx'))}, {{ instances: 1 }});"
        "console.log(JSON.stringify({ dataset: f.datasetPath, repos: f.reposDir }));"
    )
    paths = json.loads(out.strip().splitlines()[-1])
    home = base / "built-home"
    subprocess.run(
        [*cli(), "--home", str(home), "prepare", "--dataset", paths["dataset"], "--repos", paths["repos"]],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return Path(paths["dataset"]), Path(paths["repos"]), home


def _fixture_dataset(base: Path) -> tuple[Path, Path, Path]:
    given = [os.environ.get(f"MINISANDBOX_TEST_{k}") for k in ("DATASET", "REPOS", "HOME")]
    if all(given):
        return Path(given[0] or ""), Path(given[1] or ""), Path(given[2] or "")
    return _generated_fixture(base)


def start_serve(home: Path, args: list[str], base: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """``minisandbox --home HOME serve --port 0 ARGS``; returns its URL once it listens. It stops (closing its
    sandboxes) when its stdin closes: see ``stop_serve``."""
    ready = base / f"ready-{time.monotonic_ns()}.json"
    log = (base / "serve.log").open("ab")
    argv = [*cli(), "--home", str(home), "serve", "--port", "0", "--ready-file", str(ready), "--exit-with-stdin"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINISANDBOX_")}
    proc = subprocess.Popen([*argv, *args], stdin=subprocess.PIPE, stdout=log, stderr=log, env=env)
    log.close()
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_serve(proc)
            pytest.fail(f"minisandbox serve did not start: {(base / 'serve.log').read_text()[-2000:]}")
        time.sleep(0.05)
    return json.loads(ready.read_text())["url"], proc


def stop_serve(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server as its supervisor would (stdin closed: every sandbox closed); SIGKILL only if that hangs."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        pytest.fail("minisandbox serve did not stop within 30 s of its stdin closing")


def processes_mentioning(needle: str) -> list[str]:
    """Host processes whose command line mentions ``needle`` (a home, a sandbox id)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd and int(pid) != os.getpid():
            found.append(f"{pid}: {cmd[:200]}")
    return found


@pytest.fixture(scope="session")
def base() -> Iterator[Path]:
    """The session's scratch directory (directories given to sandboxes live here: the server allows it)."""
    path = Path(tempfile.mkdtemp(prefix="msb-pytest-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def server(base: Path) -> Iterator[Server]:
    dataset, repos, home = _fixture_dataset(base)
    tokens = base / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [CAPPED]}))
    tokens.chmod(0o600)
    args = ["--dataset", str(dataset), "--repos", str(repos), "--auth-token", TOKEN, "--tokens-file", str(tokens)]
    url, proc = start_serve(home, [*args, "--allow-dir", str(base), "--log-level", "warn"], base)
    rows = json.loads(dataset.read_text())
    yield Server(url, TOKEN, home, dataset, rows, proc)
    stop_serve(proc)
    left = processes_mentioning(str(home))
    assert left == [], f"processes outlived the server: {left}"
    sandboxes = home / "sandboxes"
    assert not sandboxes.exists() or list(sandboxes.iterdir()) == [], "sandbox directories outlived the server"


@pytest.fixture
def client(server: Server) -> Client:
    return server.client()


@pytest.fixture
def workdir(base: Path, request: pytest.FixtureRequest) -> Path:
    """A fresh directory under the server's allowed root, for ``dir`` sandboxes."""
    path = Path(tempfile.mkdtemp(prefix=f"{request.node.name[:40]}-", dir=base))
    return path
