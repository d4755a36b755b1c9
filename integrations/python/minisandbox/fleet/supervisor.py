"""``NodeSupervisor``: a Ray actor pinned to one node that runs that node's ``minisandbox serve``, with its own home.

The server binds the node's IP with a token of its own (handed out only through Ray: whoever can reach the cluster
can already run code on every node), is told the number of slots the node advertises, writes a ready file and its
log in its home, and exits (closing its sandboxes) when the supervisor goes, however it goes.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import ray

from ..client import Client
from ..command import require_cli
from ..token import resolve_home
from .procs import Child

__all__ = ["NodeSupervisor"]

# Only what the server needs from the worker's environment (never the driver's secrets, never Ray's own variables).
_PASS_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_RETRIES",
    "PYENV_ROOT",
    "XDG_DATA_HOME",
    "NO_PROXY",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
)


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=4)
class NodeSupervisor:
    """Start it with ``NodeAffinitySchedulingStrategy(node_id, soft=False)``."""

    def __init__(
        self,
        *,
        home: str | None,
        token: str,
        command: list[str],
        slots: int,
        host: str,
        repos_dir: str | None = None,
        dataset: str | None = None,
        shared_stores: list[str] | None = None,
        serve_args: list[str] | None = None,
    ) -> None:
        self.node_id = ray.get_runtime_context().get_node_id()
        self.home = resolve_home(home)
        self.token = token
        self.restarts = 0
        self._lock = threading.Lock()
        self._argv = [
            *require_cli(command),  # not installed on this node: said so, not as Popen's bare FileNotFoundError
            "--home",
            self.home,
            "serve",
            "--host",
            host,
            "--port",
            "0",
            "--max-sandboxes",
            str(slots),
            "--ready-file",
            os.path.join(self.home, "run", "serve.json"),
            "--exit-with-stdin",
            "--log-level",
            "warn",
            *(["--repos", repos_dir] if repos_dir else []),
            *(["--dataset", dataset] if dataset else []),
            *(serve_args or []),
        ]
        self._env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
        self._env["MINISANDBOX_AUTH_TOKEN"] = token
        if shared_stores:
            self._env["MINISANDBOX_REMOTE_STORES"] = ":".join(shared_stores)
        for d in ("run", "logs"):
            os.makedirs(os.path.join(self.home, d), exist_ok=True)
        self._start()

    def _start(self) -> None:
        self.child = Child(
            self._argv,
            self._env,
            os.path.join(self.home, "run", "serve.json"),
            os.path.join(self.home, "logs", "serve.log"),
        )
        self.url = self.child.ready["url"]

    def info(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "url": self.url,
            "token": self.token,
            "home": self.home,
            "server_pid": self.child.proc.pid,
            "restarts": self.restarts,
            "actor_pid": os.getpid(),
        }

    def ensure_server(self) -> dict[str, Any]:
        """Restart the server if it died or stopped answering (its start-up reaper clears what it left)."""
        with self._lock:
            if self.child.alive() and Client(self.url, self.token, timeout=10).healthy():
                return self.info()
            self.child.stop(grace_s=5)
            self._start()
            self.restarts += 1
            return self.info()

    def pulls(self) -> list[dict[str, Any]]:
        """Layers this node brought in from elsewhere (``cache/pulls.jsonl``), oldest first."""
        try:
            with open(os.path.join(self.home, "cache", "pulls.jsonl")) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def stop(self) -> int:
        with self._lock:
            return self.child.stop()
