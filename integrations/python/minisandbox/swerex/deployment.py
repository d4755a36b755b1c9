"""A SWE-ReX-style deployment backed by a minisandbox server.

``start()`` creates a sandbox through the server's lifecycle API (``POST /sandboxes``), ``runtime`` is a
SWE-ReX-compatible client for that sandbox's runtime URL, ``stop()`` deletes the sandbox. Use it where SWE-agent
or your own code would use ``swerex.deployment.*`` (e.g. ``RemoteDeployment``)::

    deployment = MinisandboxDeployment(url="http://127.0.0.1:8000", instance_id="astropy__astropy-12907")
    await deployment.start()
    await deployment.runtime.create_session(CreateBashSessionRequest())
    obs = await deployment.runtime.run_in_session(BashAction(command="git status", check="silent"))
    await deployment.stop()

Needs ``aiohttp`` and ``pydantic`` (2.x).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal, Optional

import aiohttp
from pydantic import BaseModel

from .runtime import (
    DeploymentNotStartedError,
    DeploymentStartupError,
    IsAliveResponse,
    MinisandboxRuntime,
    default_token,
)

__all__ = ["MinisandboxDeployment", "MinisandboxDeploymentConfig", "create_sandbox_body"]


class MinisandboxDeploymentConfig(BaseModel):
    """Where the server is and what sandbox to ask for (one of ``dir``, ``instance_id``, ``env_key``, or none)."""

    url: str = "http://127.0.0.1:8000"
    auth_token: Optional[str] = None
    """Default: the token file ``minisandbox serve`` wrote under ``home`` (see ``default_token``)."""
    home: Optional[str] = None
    dir: Optional[str] = None
    instance_id: Optional[str] = None
    env_key: Optional[str] = None
    network: bool = False
    limits: dict[str, int] = {}
    """memory_bytes, pids, cpu_seconds, disk_bytes"""
    ttl_seconds: Optional[float] = None
    idle_timeout_seconds: Optional[float] = None
    env: dict[str, str] = {}
    labels: dict[str, str] = {}
    startup_timeout: float = 60.0
    """How long ``start()`` waits for the sandbox (creation may build an environment first)."""
    type: Literal["minisandbox"] = "minisandbox"

    def get_deployment(self) -> MinisandboxDeployment:
        return MinisandboxDeployment.from_config(self)


def create_sandbox_body(c: MinisandboxDeploymentConfig) -> dict[str, Any]:
    """The ``POST /sandboxes`` body (the wire contract's ``CreateSandboxRequest``) for a config."""
    body: dict[str, Any] = {"network": c.network}
    for key in ("dir", "instance_id", "env_key", "ttl_seconds", "idle_timeout_seconds"):
        if getattr(c, key) is not None:
            body[key] = getattr(c, key)
    for key in ("limits", "env", "labels"):
        if getattr(c, key):
            body[key] = getattr(c, key)
    return body


class MinisandboxDeployment:
    def __init__(self, *, logger: logging.Logger | None = None, **kwargs: Any):
        self._config = MinisandboxDeploymentConfig(**kwargs)
        if self._config.auth_token is None:
            self._config.auth_token = default_token(self._config.home)
        self.logger = logger or logging.getLogger("minisandbox-deployment")
        self._runtime: MinisandboxRuntime | None = None
        self._info: dict[str, Any] | None = None
        self._hooks: list[Any] = []

    @classmethod
    def from_config(cls, config: MinisandboxDeploymentConfig) -> MinisandboxDeployment:
        return cls(**config.model_dump())

    def add_hook(self, hook: Any) -> None:
        """SWE-ReX deployment hooks (objects with ``on_custom_step(message)``) hear about start-up steps."""
        self._hooks.append(hook)

    def _step(self, message: str) -> None:
        self.logger.info(message)
        for h in self._hooks:
            fn = getattr(h, "on_custom_step", None)
            if fn:
                fn(message)

    @property
    def _headers(self) -> dict[str, str]:
        return {"X-API-Key": self._config.auth_token} if self._config.auth_token else {}

    @property
    def sandbox_id(self) -> str | None:
        return self._info["id"] if self._info else None

    @property
    def sandbox_info(self) -> dict[str, Any] | None:
        """What the server said when the sandbox was created (id, runtime_url, limits, meta...)."""
        return self._info

    @property
    def runtime(self) -> MinisandboxRuntime:
        if self._runtime is None:
            raise DeploymentNotStartedError()
        return self._runtime

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        if self._runtime is None:
            return IsAliveResponse(is_alive=False, message="Deployment not started")
        return await self._runtime.is_alive(timeout=timeout)

    async def start(self) -> None:
        """Create the sandbox and wait until its runtime answers."""
        c = self._config
        body = create_sandbox_body(c)
        self._step("Creating sandbox")
        timeout = aiohttp.ClientTimeout(total=c.startup_timeout + 30)
        connector = aiohttp.TCPConnector(force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.post(f"{c.url.rstrip('/')}/sandboxes", json=body, headers=self._headers) as resp,
        ):
            data = await resp.json(content_type=None)
            if resp.status != 201:
                detail = data.get("detail", data)
                raise DeploymentStartupError(
                    f"minisandbox server refused to create a sandbox (HTTP {resp.status}): {detail}"
                )
        self._info = data
        self._runtime = MinisandboxRuntime(host=data["runtime_url"], auth_token=c.auth_token, logger=self.logger)
        self._step(f"Sandbox {data['id']} created, waiting for its runtime")
        await self._runtime.wait_until_alive(timeout=c.startup_timeout)

    async def stop(self) -> None:
        """Close the sessions and delete the sandbox (idempotent)."""
        if self._runtime is not None:
            try:
                await asyncio.wait_for(self._runtime.close(), 30)
            except Exception as e:  # noqa: BLE001 - the sandbox may already be gone; deleting it follows
                self.logger.debug("closing sessions failed: %r", e)
        if self._info is not None:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
                url = f"{self._config.url.rstrip('/')}/sandboxes/{self._info['id']}"
                async with session.delete(url, headers=self._headers) as resp:
                    if resp.status not in (200, 404):
                        self.logger.warning(
                            "deleting sandbox %s: HTTP %s %s", self._info["id"], resp.status, await resp.text()
                        )
        self._runtime = None
        self._info = None
