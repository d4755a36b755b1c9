"""A SWE-ReX-compatible async runtime client for one minisandbox sandbox.

It speaks the SWE-ReX remote-runtime protocol (swe-rex 1.4) the way ``swerex.runtime.remote.RemoteRuntime``
does: one POST per operation with every field of the request model filled in, ``X-API-Key`` and ``X-Request-ID``
headers, retries on connection errors, and 511 answers re-raised as the exception class named by ``class_path``.

When the real ``swe-rex`` package is installed, its request/response models and exception classes are used, so
objects from both sides mix freely. Without it, the mirrors below (same names, fields, defaults and bases) stand
in. Needs ``aiohttp`` and ``pydantic`` (2.x).
"""

from __future__ import annotations

import asyncio
import builtins
import importlib
import importlib.util
import logging
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from pydantic import BaseModel

from ..token import default_token

__all__ = [
    "BashAction",
    "BashIncorrectSyntaxError",
    "BashInterruptAction",
    "BashObservation",
    "CloseBashSessionRequest",
    "CloseBashSessionResponse",
    "CloseResponse",
    "Command",
    "CommandResponse",
    "CommandTimeoutError",
    "CreateBashSessionRequest",
    "CreateBashSessionResponse",
    "DeploymentNotStartedError",
    "DeploymentStartupError",
    "IsAliveResponse",
    "MinisandboxRuntime",
    "NoExitCodeError",
    "NonZeroExitCodeError",
    "ReadFileRequest",
    "ReadFileResponse",
    "SessionDoesNotExistError",
    "SessionExistsError",
    "SessionNotInitializedError",
    "SwerexException",
    "UploadRequest",
    "UploadResponse",
    "WriteFileRequest",
    "WriteFileResponse",
    "default_token",
]

# swe-rex's own exception classes and models when it is installed (objects from both sides then mix), else the
# stand-ins of .models, which are also what the type checker sees.
_HAVE_SWEREX = importlib.util.find_spec("swerex") is not None
if TYPE_CHECKING or not _HAVE_SWEREX:
    from .models import (
        BashAction,
        BashIncorrectSyntaxError,
        BashInterruptAction,
        BashObservation,
        CloseBashSessionRequest,
        CloseBashSessionResponse,
        CloseResponse,
        Command,
        CommandResponse,
        CommandTimeoutError,
        CreateBashSessionRequest,
        CreateBashSessionResponse,
        DeploymentNotStartedError,
        DeploymentStartupError,
        IsAliveResponse,
        NoExitCodeError,
        NonZeroExitCodeError,
        ReadFileRequest,
        ReadFileResponse,
        SessionDoesNotExistError,
        SessionExistsError,
        SessionNotInitializedError,
        SwerexException,
        UploadRequest,
        UploadResponse,
        WriteFileRequest,
        WriteFileResponse,
    )
else:
    from swerex.exceptions import (
        BashIncorrectSyntaxError,
        CommandTimeoutError,
        DeploymentNotStartedError,
        DeploymentStartupError,
        NoExitCodeError,
        NonZeroExitCodeError,
        SessionDoesNotExistError,
        SessionExistsError,
        SessionNotInitializedError,
        SwerexException,
    )
    from swerex.runtime.abstract import (
        BashAction,
        BashInterruptAction,
        BashObservation,
        CloseBashSessionRequest,
        CloseBashSessionResponse,
        CloseResponse,
        Command,
        CommandResponse,
        CreateBashSessionRequest,
        CreateBashSessionResponse,
        IsAliveResponse,
        ReadFileRequest,
        ReadFileResponse,
        UploadRequest,
        UploadResponse,
        WriteFileRequest,
        WriteFileResponse,
    )

_MIRRORS = {
    cls.__name__: cls
    for cls in (
        SwerexException,
        SessionNotInitializedError,
        NonZeroExitCodeError,
        BashIncorrectSyntaxError,
        CommandTimeoutError,
        NoExitCodeError,
        SessionExistsError,
        SessionDoesNotExistError,
        DeploymentNotStartedError,
        DeploymentStartupError,
    )
}


# ------------------------------------------------------------------------------------------------- runtime


class _Answered(Exception):
    """Carries an exception derived from a server answer past the connection-retry logic."""

    def __init__(self, exc: BaseException):
        super().__init__(str(exc))
        self.exc = exc


class MinisandboxRuntime:
    """Async client for one sandbox's SWE-ReX runtime URL (``http://host:port/sandboxes/<id>``).

    Same methods and behaviour as ``swerex.runtime.remote.RemoteRuntime``: ``is_alive``, ``wait_until_alive``,
    ``create_session``, ``run_in_session``, ``close_session``, ``execute``, ``read_file``, ``write_file``,
    ``upload``, ``close``.
    """

    def __init__(
        self,
        *,
        host: str,
        port: int | None = None,
        auth_token: str | None = None,
        home: str | None = None,
        timeout: float = 0.15,
        num_retries: int = 0,
        logger: logging.Logger | None = None,
    ):
        if not host.startswith("http"):
            host = f"http://{host}"
        self.host = host.rstrip("/")
        self.port = port
        # Not given: the token file of the home (same resolution as the CLI); "" means no token at all.
        self.auth_token = default_token(home) if auth_token is None else auth_token
        self.timeout = timeout
        self.num_retries = num_retries
        self.logger = logger or logging.getLogger("minisandbox-runtime")

    @property
    def _api_url(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"

    @property
    def _headers(self) -> dict[str, str]:
        return {"X-API-Key": self.auth_token} if self.auth_token else {}

    # -- errors

    def _raise_transferred(self, transfer: dict[str, Any]) -> None:
        """Re-raise an exception the server sent back (HTTP 511), as its own class where possible."""
        message = transfer.get("message", "")
        class_path = transfer.get("class_path", "")
        extra_info = transfer.get("extra_info", {}) or {}
        if transfer.get("traceback"):
            self.logger.debug("Remote traceback:\n%s", transfer["traceback"])
        module, _, name = class_path.rpartition(".")
        cls: Any = None
        if module == "builtins":
            cls = getattr(builtins, name, None)
        elif module == "swerex.exceptions" and not _HAVE_SWEREX:
            cls = _MIRRORS.get(name)
        elif module:
            try:
                cls = getattr(importlib.import_module(module), name, None)
            except ImportError:
                cls = None
        try:
            exc = cls(message) if cls is not None else SwerexException(message)
        except TypeError:  # e.g. UnicodeDecodeError takes five arguments
            exc = SwerexException(message)
        if not isinstance(exc, BaseException):
            exc = SwerexException(message)
        exc.extra_info = extra_info  # type: ignore[attr-defined]
        raise exc from None

    async def _handle_response_errors(self, response: aiohttp.ClientResponse) -> None:
        if response.status == 511:
            data = await response.json()
            self._raise_transferred(data["swerexception"])
        if response.status >= 400:
            try:
                data = await response.json()
            except (aiohttp.ContentTypeError, ValueError):
                data = await response.text()
            self.logger.error("Received error response %s: %s", response.status, data)
            response.raise_for_status()

    # -- probes

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        """True when the sandbox answers; any failure (status, connection) is False with a message."""
        limit = aiohttp.ClientTimeout(total=self.timeout if timeout is None else timeout)
        try:
            async with (
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
                session.get(f"{self._api_url}/is_alive", headers=self._headers, timeout=limit) as response,
            ):
                if response.status == 200:
                    return IsAliveResponse(**(await response.json()))
                if response.status == 511:
                    self._raise_transferred((await response.json())["swerexception"])
                try:
                    detail = (await response.json()).get("detail")
                except (aiohttp.ContentTypeError, ValueError, AttributeError):
                    detail = await response.text()
                return IsAliveResponse(
                    is_alive=False,
                    message=f"Status code {response.status} from {self._api_url}/is_alive. Message: {detail}",
                )
        except SwerexException:
            raise
        except Exception as e:  # noqa: BLE001 - connection refused, timeout...: not alive, and why
            return IsAliveResponse(is_alive=False, message=f"Failed to connect to {self.host}: {e!r}")

    async def wait_until_alive(self, *, timeout: float = 60.0) -> None:
        end = time.time() + timeout
        last = ""
        while time.time() < end:
            r = await self.is_alive(timeout=max(self.timeout, 1.0))
            if r.is_alive:
                return
            last = r.message
            await asyncio.sleep(0.1)
        raise TimeoutError(f"Runtime at {self._api_url} did not start within {timeout}s: {last}")

    # -- requests

    async def _request(
        self, endpoint: str, payload: BaseModel | None, output_class: Any, num_retries: int | None = None
    ) -> Any:
        retries = self.num_retries if num_retries is None else num_retries
        url = f"{self._api_url}/{endpoint}"
        headers = {**self._headers, "X-Request-ID": str(uuid.uuid4())}
        delay = 0.1
        last: Exception | None = None
        for attempt in range(retries + 1):
            try:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
                    body = payload.model_dump() if payload is not None else None
                    async with session.post(url, json=body, headers=headers) as resp:
                        try:
                            await self._handle_response_errors(resp)
                            return output_class(**await resp.json())
                        except BaseException as e:  # noqa: BLE001 - the server answered: never retried, re-raised
                            raise _Answered(e) from None
            except _Answered as a:
                raise a.exc from None
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as e:
                last = e
                if attempt < retries:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2 + random.uniform(0, 0.5), 5)
        assert last is not None
        raise last

    async def create_session(self, request: BaseModel) -> CreateBashSessionResponse:
        return await self._request("create_session", request, CreateBashSessionResponse)

    async def run_in_session(self, action: BaseModel) -> BashObservation:
        return await self._request("run_in_session", action, BashObservation)

    async def close_session(self, request: BaseModel) -> CloseBashSessionResponse:
        return await self._request("close_session", request, CloseBashSessionResponse)

    async def execute(self, command: BaseModel) -> CommandResponse:
        return await self._request("execute", command, CommandResponse)

    async def read_file(self, request: BaseModel) -> ReadFileResponse:
        return await self._request("read_file", request, ReadFileResponse)

    async def write_file(self, request: BaseModel) -> WriteFileResponse:
        return await self._request("write_file", request, WriteFileResponse)

    async def upload(self, request: UploadRequest) -> UploadResponse:
        """Copy a local file or directory to ``target_path`` in the sandbox (a directory travels as a zip)."""
        source = await asyncio.to_thread(Path(request.source_path).resolve)
        if await asyncio.to_thread(source.is_dir):
            tmp = await asyncio.to_thread(tempfile.mkdtemp)
            try:
                zip_path = Path(tmp) / "zipped_transfer.zip"
                await asyncio.to_thread(shutil.make_archive, str(zip_path.with_suffix("")), "zip", source)
                return await self._upload(zip_path, request.target_path, unzip=True)
            finally:
                await asyncio.to_thread(shutil.rmtree, tmp, True)
        if await asyncio.to_thread(source.is_file):
            return await self._upload(source, request.target_path, unzip=False)
        raise ValueError(f"Source path {source} is not a file or directory")

    async def _upload(self, file: Path, target_path: str, *, unzip: bool) -> UploadResponse:
        """POST one file as multipart (streamed: aiohttp reads it off the event loop)."""
        f = await asyncio.to_thread(file.open, "rb")
        try:
            data = aiohttp.FormData()
            if unzip:
                data.add_field("file", f, filename=file.name, content_type="application/zip")
            else:
                data.add_field("file", f, filename=file.name)
            data.add_field("target_path", target_path)
            data.add_field("unzip", "true" if unzip else "false")
            connector = aiohttp.TCPConnector(force_close=True)
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.post(f"{self._api_url}/upload", data=data, headers=self._headers) as response,
            ):
                await self._handle_response_errors(response)
                return UploadResponse(**(await response.json()))
        finally:
            f.close()

    async def close(self) -> CloseResponse:
        """Close every session of the sandbox (the sandbox itself lives until its deployment stops)."""
        return await self._request("close", None, CloseResponse)


if __name__ == "__main__":  # pragma: no cover - tiny manual check: python -m minisandbox.swerex.runtime URL [TOKEN]

    async def _main() -> None:
        rt = MinisandboxRuntime(host=sys.argv[1], auth_token=sys.argv[2] if len(sys.argv) > 2 else "")
        print(await rt.is_alive(timeout=5))

    asyncio.run(_main())
