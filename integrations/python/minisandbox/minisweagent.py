"""A mini-swe-agent environment backed by a minisandbox server (standard library only).

Each ``execute`` runs a fresh ``bash -c`` in the sandbox through the SWE-ReX runtime's ``/execute`` (stderr merged
into stdout), like mini-swe-agent's local and docker environments. The sandbox is created on construction
(``POST /sandboxes``) and deleted by ``close()`` (also on ``__del__`` and when used as a context manager)::

    env = MinisandboxEnvironment(url="http://127.0.0.1:8000", api_key="...", instance_id="sympy__sympy-20590")
    env.execute({"command": "git status"})   # -> {"output": ..., "returncode": 0, "exception_info": ""}
    env.close()

In a mini-swe-agent config: ``environment: {environment_class: minisandbox.minisweagent.MinisandboxEnvironment, url: ...}``.
"""

from __future__ import annotations

import json
import os
import platform
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import MinisandboxError
from .token import default_token

try:
    from minisweagent.exceptions import Submitted  # type: ignore[import-not-found]
except ImportError:  # mini-swe-agent not installed: same shape

    class Submitted(Exception):  # type: ignore[no-redef]
        """The agent printed the completion marker; ``args[0]`` is the exit message."""


__all__ = [
    "MinisandboxEnvironmentConfig",
    "MinisandboxEnvironment",
    "Submitted",
    "default_token",
    "create_sandbox_body",
    "execute_payload",
]

COMPLETION_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclass
class MinisandboxEnvironmentConfig:
    url: str = "http://127.0.0.1:8000"
    api_key: str | None = None
    """Default: the token file ``minisandbox serve`` wrote under ``home`` (see ``default_token``)."""
    home: str | None = None
    dir: str | None = None
    instance_id: str | None = None
    env_key: str | None = None
    cwd: str = ""
    """Working directory of commands ("" : the sandbox's, /testbed when it has one)."""
    env: dict[str, str] = field(default_factory=dict)
    """Added to the environment of every command."""
    timeout: int = 30
    network: bool = False
    limits: dict[str, int] = field(default_factory=dict)
    ttl_seconds: float | None = None
    idle_timeout_seconds: float | None = None
    shell: str = "bash"


def create_sandbox_body(c: MinisandboxEnvironmentConfig) -> dict[str, Any]:
    """The ``POST /sandboxes`` body (the wire contract's ``CreateSandboxRequest``) for a config."""
    body: dict[str, Any] = {"network": c.network}
    for key in ("dir", "instance_id", "env_key", "ttl_seconds", "idle_timeout_seconds"):
        if getattr(c, key) is not None:
            body[key] = getattr(c, key)
    if c.limits:
        body["limits"] = c.limits
    return body


def execute_payload(c: MinisandboxEnvironmentConfig, command: str, cwd: str, timeout: float) -> dict[str, Any]:
    """The ``/execute`` body (SWE-ReX's ``Command``, every field given): a fresh shell, stderr merged."""
    argv = [c.shell, "-c", command]
    if c.env:
        argv = ["env", *[f"{k}={v}" for k, v in c.env.items()], *argv]
    return {
        "command": argv,
        "timeout": timeout,
        "shell": False,
        "check": False,
        "error_msg": "",
        "env": None,
        "cwd": cwd or c.cwd or None,
        "merge_output_streams": True,
    }


class MinisandboxEnvironment:
    def __init__(self, *, config_class: type = MinisandboxEnvironmentConfig, **kwargs: Any):
        self.config = config_class(**kwargs)
        if self.config.api_key is None:
            self.config.api_key = default_token(self.config.home)
        self.sandbox: dict[str, Any] | None = None
        status, data = self._http("POST", f"{self._base}/sandboxes", create_sandbox_body(self.config), timeout=3600)
        if status != 201:
            raise MinisandboxError(f"could not create a sandbox (HTTP {status}): {data}")
        self.sandbox = data

    @property
    def _base(self) -> str:
        return self.config.url.rstrip("/")

    def _http(self, method: str, url: str, body: Any = None, *, timeout: float) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.config.api_key:
            req.add_header("X-API-Key", self.config.api_key)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def execute(self, command: str | dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run ``command`` (a string, or an action dict with ``"command"``) in a fresh bash."""
        if self.sandbox is None:
            raise MinisandboxError("the environment is closed")
        cmd = command.get("command", "") if isinstance(command, dict) else command
        t = timeout or self.config.timeout
        payload = execute_payload(self.config, cmd, cwd, t)
        status, data = self._http("POST", f"{self.sandbox['runtime_url']}/execute", payload, timeout=t + 60)
        if status == 200:
            output = {"output": data["stdout"], "returncode": data["exit_code"], "exception_info": ""}
        elif status == 511:
            exc = data["swerexception"]
            name = exc["class_path"].rpartition(".")[2]
            output = {
                "output": "",
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {exc['message']}",
                "extra": {"exception_type": name, "exception": exc["message"]},
            }
        else:
            raise MinisandboxError(f"execute failed (HTTP {status}): {data}")
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == COMPLETION_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            extra = {"exit_status": "Submitted", "submission": submission}
            raise Submitted({"role": "exit", "content": submission, "extra": extra})

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**asdict(self.config), **platform.uname()._asdict(), "sandbox": self.sandbox or {}, **kwargs}

    def serialize(self) -> dict:
        cfg = {k: v for k, v in asdict(self.config).items() if k != "api_key"}
        return {
            "info": {
                "config": {
                    "environment": cfg,
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                }
            }
        }

    def close(self) -> None:
        """Delete the sandbox (idempotent)."""
        sb, self.sandbox = self.sandbox, None
        if sb is not None:
            try:
                self._http("DELETE", f"{self._base}/sandboxes/{sb['id']}", timeout=60)
            except OSError:
                pass

    def __enter__(self) -> "MinisandboxEnvironment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
