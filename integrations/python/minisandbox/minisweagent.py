"""A mini-swe-agent environment backed by a minisandbox server (standard library only).

Each ``execute`` runs a fresh ``bash -c`` in the sandbox (the config's ``interpreter``, stderr merged into stdout),
like mini-swe-agent's docker environment, through the server's native exec: a command that times out is killed with
its whole process tree and its output so far is kept.

Which workspace, in order: ``instance_id`` / ``dir`` / ``env_key`` in the config; else the instance named by a
SWE-bench ``image`` (``…sweb.eval.x86_64.<id with __ as _1776_>:latest``, what docker-style runners set); else the
first command selects it: ``minisandbox-instance <instance_id>``. That is what mini-swe-agent's SWE-bench batch
runner sends with ``run.env_startup_command: "minisandbox-instance {{instance_id}}"`` (the shipped config
``minisandbox/configs/mini-swebench.yaml`` sets it). Any other first command fails the instance with one clear line,
never an empty patch from a missing ``/testbed``. ``allow_empty: true`` gives an empty sandbox instead.

    env = MinisandboxEnvironment(instance_id="sympy__sympy-20590")      # url: $MINISANDBOX_URL, token discovered
    env.execute({"command": "git status"})   # -> {"output": ..., "returncode": 0, "exception_info": ""}
    env.cleanup()
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .client import DEFAULT_URL, Client
from .errors import MinisandboxError, ServerUnreachableError
from .mini_output import Submitted, check_submitted, mini_output
from .token import default_token

__all__ = [
    "SELECT_COMMAND",
    "MinisandboxEnvironment",
    "MinisandboxEnvironmentConfig",
    "Submitted",
    "create_sandbox_body",
    "default_token",
    "execute_payload",
    "instance_from_image",
]

SELECT_COMMAND = "minisandbox-instance"
_SELECT_RE = re.compile(rf"^\s*{SELECT_COMMAND}\s+(?P<id>\S+)\s*$")
# docker.io/swebench/sweb.eval.x86_64.<id with "__" as "_1776_">:latest, lower-cased by the runners.
_SWEBENCH_IMAGE_RE = re.compile(r"^(?:[\w.-]+(?::\d+)?/)*sweb\.eval\.\w+\.(?P<id>[^:/]+)(?::[\w.-]+)?$")


def _env_url() -> str:
    return os.environ.get("MINISANDBOX_URL") or DEFAULT_URL


@dataclass
class MinisandboxEnvironmentConfig:
    url: str = field(default_factory=_env_url)
    """Default: ``$MINISANDBOX_URL``, else http://127.0.0.1:8000."""
    api_key: str | None = None
    """Default: ``$MINISANDBOX_API_KEY``, else the token file ``minisandbox serve`` wrote under ``home``."""
    home: str | None = None
    instance_id: str | None = None
    dir: str | None = None
    env_key: str | None = None
    image: str | None = None
    """A SWE-bench image name (docker-style runners set it): the instance is read from it."""
    allow_empty: bool = False
    """Without any selection, an empty sandbox instead of an error."""
    python: str | None = None
    """A host Python (e.g. "3.11") first on PATH, for a ``dir`` or empty sandbox (refused with an instance or key)."""
    cwd: str = ""
    """Working directory of commands ("": the sandbox's, /testbed when it has one)."""
    env: dict[str, str] = field(default_factory=dict)
    """Added to the environment of every command (wins over ``forward_env``)."""
    forward_env: list[str] = field(default_factory=list)
    """Variables copied from this process's environment when set."""
    timeout: int = 30
    interpreter: list[str] = field(default_factory=lambda: ["bash", "-c"])
    """argv prefix; the command is its last argument."""
    network: bool = False
    limits: dict[str, int] = field(default_factory=dict)
    ttl_seconds: float | None = None
    idle_timeout_seconds: float | None = None
    # Accepted so that configs written for mini-swe-agent's other environments work unchanged; nothing to do here.
    executable: str | None = None
    run_args: list[str] = field(default_factory=list)
    container_timeout: str | None = None
    pull_timeout: int | None = None
    wrapper_args: list[str] = field(default_factory=list)
    global_args: list[str] = field(default_factory=list)
    exec_args: list[str] = field(default_factory=list)
    sandbox_build_retries: int | None = None
    deployment_extra_kwargs: dict[str, Any] = field(default_factory=dict)
    startup_timeout: float | None = None
    runtime_timeout: float | None = None
    deployment_timeout: float | None = None
    install_pipx: bool | None = None
    modal_sandbox_kwargs: dict[str, Any] = field(default_factory=dict)
    contree_config: dict[str, Any] = field(default_factory=dict)
    image_tag: str | None = None
    cwd_auto_create: bool | None = None
    import_username: str | None = None
    import_password: str | None = None


def instance_from_image(image: str | None) -> str | None:
    """The instance id a SWE-bench image name stands for (``_1776_`` is ``__``), else None."""
    m = _SWEBENCH_IMAGE_RE.match(image or "")
    return m.group("id").replace("_1776_", "__") if m else None


def create_sandbox_body(c: MinisandboxEnvironmentConfig, selection: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``POST /sandboxes`` body (the wire contract's ``CreateSandboxRequest``) for a config."""
    body: dict[str, Any] = {**(selection or {}), "network": c.network}
    for key in ("ttl_seconds", "idle_timeout_seconds", "python"):
        if getattr(c, key) is not None:
            body[key] = getattr(c, key)
    if c.limits:
        body["limits"] = c.limits
    return body


def execute_payload(c: MinisandboxEnvironmentConfig, command: str, cwd: str, timeout: float) -> dict[str, Any]:
    """The native exec body (the contract's ``ExecRequest``): a fresh interpreter, stderr merged, a deadline."""
    env = {k: v for k in c.forward_env if (v := os.environ.get(k)) is not None}
    env.update(c.env)
    body: dict[str, Any] = {
        "command": [*c.interpreter, command],
        "timeout_ms": float(timeout) * 1000,
        "merge_output": True,
    }
    if cwd or c.cwd:
        body["cwd"] = cwd or c.cwd
    if env:
        body["env"] = env
    return body


class MinisandboxEnvironment:
    def __init__(self, *, config_class: type = MinisandboxEnvironmentConfig, logger: Any = None, **kwargs: Any):
        known = {f.name for f in fields(config_class)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"minisandbox environment: unknown option(s) {unknown}; accepted: {sorted(known)}")
        self.config = config_class(**kwargs)
        self.logger = logger
        token = self.config.api_key
        if token is None:
            token = os.environ.get("MINISANDBOX_API_KEY") or default_token(self.config.home)
        self._client = Client(self.config.url, token, home=self.config.home)
        self.sandbox: dict[str, Any] | None = None
        self.selection = self._selection_from_config()
        if self.selection is not None:
            self._create(self.selection)

    def _selection_from_config(self) -> dict[str, str] | None:
        c = self.config
        for key in ("instance_id", "dir", "env_key"):
            if getattr(c, key):
                return {key: getattr(c, key)}
        if (iid := instance_from_image(c.image)) is not None:
            return {"instance_id": iid}
        if c.allow_empty:
            return {}
        return None

    def _create(self, selection: dict[str, str]) -> None:
        self.sandbox = self._client.create_sandbox(**create_sandbox_body(self.config, selection))
        self.selection = selection

    # ------------------------------------------------------------------------------------ the environment protocol

    def execute(self, action: dict[str, Any] | str, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run ``action["command"]`` (or a string) in a fresh interpreter; see the module doc."""
        command = action.get("command", "") if isinstance(action, dict) else action
        if self.sandbox is None:
            first, _, rest = command.partition("\n")
            m = _SELECT_RE.match(first)
            if not m:
                raise MinisandboxError(
                    "minisandbox environment: no workspace selected. Set environment.instance_id (or dir, env_key), "
                    f"or let the first command be `{SELECT_COMMAND} <instance_id>` (mini-swe-agent's SWE-bench "
                    f'runner: run.env_startup_command: "{SELECT_COMMAND} {{{{instance_id}}}}")',
                    code="invalid_input",
                )
            self._create({"instance_id": m.group("id")})
            if not rest.strip():
                sid = self.sandbox["id"] if self.sandbox else "?"
                return {"output": f"sandbox {sid} on {m.group('id')}\n", "returncode": 0, "exception_info": ""}
            command = rest
        t = timeout or self.config.timeout
        payload = execute_payload(self.config, command, cwd, t)
        assert self.sandbox is not None
        r = self._client.request("POST", f"/sandboxes/{self.sandbox['id']}/exec", payload, timeout=t + 60)
        output = mini_output(r, command, t)
        check_submitted(output)
        return output

    def _public_config(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self.config).items() if k not in ("api_key", "import_password")}

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self._public_config(), **platform.uname()._asdict(), "sandbox": self.sandbox or {}, **kwargs}

    def serialize(self) -> dict[str, Any]:
        sb = self.sandbox or {}
        return {
            "info": {
                "config": {
                    "environment": self._public_config(),
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                },
                "minisandbox": {
                    "sandbox_id": sb.get("id"),
                    "runtime_url": sb.get("runtime_url"),
                    "selection": self.selection,
                },
            }
        }

    def cleanup(self) -> None:
        """Delete the sandbox (idempotent; mini-swe-agent's name; ``close`` is the same)."""
        sb, self.sandbox = self.sandbox, None
        if sb is not None:
            try:
                self._client.delete_sandbox(sb["id"])
            except (MinisandboxError, ServerUnreachableError):
                pass  # the server's idle timeout ends what could not be deleted

    close = cleanup

    def __enter__(self) -> MinisandboxEnvironment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()

    def __del__(self) -> None:
        try:
            self.cleanup()
        except Exception:  # noqa: BLE001 - at interpreter exit anything may be half torn down
            pass
