"""A pytest plugin that runs SWE-ReX's own test suite against ``minisandbox serve --dir``, without changing SWE-ReX.

SWE-ReX's ``tests/conftest.py`` starts its reference server in a thread (``uvicorn.run(swerex.server.app, port=…)``
with the token ``testkey``). Loaded with ``-p minisandbox.swerex_pytest`` (never as an entry point: it would load
into every pytest run of the venv), this plugin replaces, in that conftest module only:

- ``uvicorn``: its ``run`` starts ``minisandbox serve --dir $MINISANDBOX_SWEREX_DIR --port <port>
  --auth-token <the conftest's token> $MINISANDBOX_SERVE_ARGS`` instead (stopped when pytest ends);
  with ``MINISANDBOX_SWEREX_PORT`` set, an already running server on that port is used and nothing is started;
- the wait for the port: 30 s instead of 1 s (a node server starts slower than a thread).

    MINISANDBOX_SWEREX_DIR=/tmp/dir MINISANDBOX_SERVE_ARGS="--python 3.11 --bind /tmp/share" \\
        python -m pytest -p minisandbox.swerex_pytest --basetemp=/tmp/share/bt tests/test_execution.py
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
import time
import types
from typing import Any

from .command import require_cli

#: The server this plugin started (none when MINISANDBOX_SWEREX_PORT names a running one).
_started: list[subprocess.Popen[bytes]] = []


def _serve_command(host: str, port: int, token: str) -> list[str]:
    bin_ = require_cli()
    workdir = os.environ.get("MINISANDBOX_SWEREX_DIR") or tempfile.mkdtemp(prefix="msb-swerex-")
    extra = shlex.split(os.environ.get("MINISANDBOX_SERVE_ARGS", ""))
    return [
        *bin_,
        "serve",
        "--dir",
        workdir,
        "--host",
        host,
        "--port",
        str(port),
        "--auth-token",
        token,
        "--log-level",
        "warn",
        *extra,
    ]


def _uvicorn_for(conftest: Any) -> Any:
    def run(app: Any, host: str = "127.0.0.1", port: int = 0, **_: Any) -> None:  # in conftest's daemon thread
        if os.environ.get("MINISANDBOX_SWEREX_PORT"):
            return
        proc = subprocess.Popen(_serve_command(host, port, conftest.TEST_API_KEY), start_new_session=True)
        _started.append(proc)
        proc.wait()

    return types.SimpleNamespace(run=run)


def _patient_socket(real: Any) -> Any:
    def create_connection(addr: Any, timeout: Any = None, *a: Any, **k: Any) -> Any:
        end = time.time() + 30
        while True:
            try:
                return real.create_connection(addr, timeout, *a, **k)
            except ConnectionRefusedError:
                if time.time() > end or any(p.poll() is not None for p in _started):
                    raise
                time.sleep(0.1)

    return types.SimpleNamespace(create_connection=create_connection)


def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    name = getattr(plugin, "__name__", "")
    if not (name.endswith("conftest") and hasattr(plugin, "remote_server") and hasattr(plugin, "TEST_API_KEY")):
        return
    port = os.environ.get("MINISANDBOX_SWEREX_PORT")
    if port:
        plugin.find_free_port = lambda *a, **k: int(port)
    plugin.uvicorn = _uvicorn_for(plugin)
    plugin.socket = _patient_socket(plugin.socket)


def pytest_unconfigure(config: Any) -> None:
    for proc in _started:
        if proc.poll() is not None:
            continue
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
