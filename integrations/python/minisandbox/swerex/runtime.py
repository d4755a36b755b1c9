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
import logging
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal, Union

import aiohttp

from ..token import default_token
from pydantic import BaseModel

__all__ = [
    "MinisandboxRuntime",
    "default_token",
    "IsAliveResponse",
    "CreateBashSessionRequest",
    "CreateBashSessionResponse",
    "BashAction",
    "BashInterruptAction",
    "BashObservation",
    "CloseBashSessionRequest",
    "CloseBashSessionResponse",
    "Command",
    "CommandResponse",
    "ReadFileRequest",
    "ReadFileResponse",
    "WriteFileRequest",
    "WriteFileResponse",
    "UploadRequest",
    "UploadResponse",
    "CloseResponse",
    "SwerexException",
    "SessionNotInitializedError",
    "NonZeroExitCodeError",
    "BashIncorrectSyntaxError",
    "CommandTimeoutError",
    "NoExitCodeError",
    "SessionExistsError",
    "SessionDoesNotExistError",
    "DeploymentNotStartedError",
    "DeploymentStartupError",
]

# ---------------------------------------------------------------------------------------------- exceptions

try:  # the real classes when swe-rex is installed
    from swerex.exceptions import (  # type: ignore[import-not-found]
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

    _HAVE_SWEREX = True
except ImportError:
    _HAVE_SWEREX = False

    class SwerexException(Exception):
        """Any exception that is raised by SWE-ReX."""

    class SessionNotInitializedError(SwerexException, RuntimeError):
        """Raised if we try to run a command in a shell that is not initialized."""

    class NonZeroExitCodeError(SwerexException, RuntimeError):
        """A command exited with a non-zero status and check was "raise"."""

    class BashIncorrectSyntaxError(SwerexException, RuntimeError):
        """The command was rejected by ``bash -n``; ``extra_info`` has ``bash_stdout`` and ``bash_stderr``."""

        def __init__(self, message: str, *, extra_info: dict[str, Any] | None = None):
            super().__init__(message)
            self.extra_info = extra_info or {}

    class CommandTimeoutError(SwerexException, RuntimeError, TimeoutError): ...

    class NoExitCodeError(SwerexException, RuntimeError): ...

    class SessionExistsError(SwerexException, ValueError): ...

    class SessionDoesNotExistError(SwerexException, ValueError): ...

    class DeploymentNotStartedError(SwerexException, RuntimeError):
        def __init__(self, message: str = "Deployment not started"):
            super().__init__(message)

    class DeploymentStartupError(SwerexException, RuntimeError): ...


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

# -------------------------------------------------------------------------------------------------- models

try:
    from swerex.runtime.abstract import (  # type: ignore[import-not-found]
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
except ImportError:

    class IsAliveResponse(BaseModel):
        is_alive: bool
        message: str = ""

        def __bool__(self) -> bool:
            return self.is_alive

    class CreateBashSessionRequest(BaseModel):
        startup_source: list[str] = []
        session: str = "default"
        session_type: Literal["bash"] = "bash"
        startup_timeout: float = 1.0

    class CreateBashSessionResponse(BaseModel):
        output: str = ""
        session_type: Literal["bash"] = "bash"

    class BashAction(BaseModel):
        command: str
        session: str = "default"
        timeout: float | None = None
        is_interactive_command: bool = False
        is_interactive_quit: bool = False
        check: Literal["silent", "raise", "ignore"] = "raise"
        error_msg: str = ""
        expect: list[str] = []
        action_type: Literal["bash"] = "bash"

    class BashInterruptAction(BaseModel):
        session: str = "default"
        timeout: float = 0.2
        n_retry: int = 3
        expect: list[str] = []
        action_type: Literal["bash_interrupt"] = "bash_interrupt"

    class BashObservation(BaseModel):
        output: str = ""
        exit_code: int | None = None
        failure_reason: str = ""
        expect_string: str = ""
        session_type: Literal["bash"] = "bash"

    class CloseBashSessionRequest(BaseModel):
        session: str = "default"
        session_type: Literal["bash"] = "bash"

    class CloseBashSessionResponse(BaseModel):
        session_type: Literal["bash"] = "bash"

    class Command(BaseModel):
        command: Union[str, list[str]]
        timeout: float | None = None
        shell: bool = False
        check: bool = False
        error_msg: str = ""
        env: dict[str, str] | None = None
        cwd: str | None = None
        merge_output_streams: bool = False

    class CommandResponse(BaseModel):
        stdout: str = ""
        stderr: str = ""
        exit_code: int | None = None

    class ReadFileRequest(BaseModel):
        path: str
        encoding: str | None = None
        errors: str | None = None

    class ReadFileResponse(BaseModel):
        content: str = ""

    class WriteFileRequest(BaseModel):
        content: str
        path: str

    class WriteFileResponse(BaseModel):
        pass

    class UploadRequest(BaseModel):
        source_path: str
        target_path: str

    class UploadResponse(BaseModel):
        pass

    class CloseResponse(BaseModel):
        pass


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
            except Exception:
                data = await response.text()
            self.logger.error("Received error response %s: %s", response.status, data)
            response.raise_for_status()

    # -- probes

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        """True when the sandbox answers; any failure (status, connection) is False with a message."""
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
                async with session.get(
                    f"{self._api_url}/is_alive",
                    headers=self._headers,
                    timeout=aiohttp.ClientTimeout(total=self.timeout if timeout is None else timeout),
                ) as response:
                    if response.status == 200:
                        return IsAliveResponse(**(await response.json()))
                    if response.status == 511:
                        self._raise_transferred((await response.json())["swerexception"])
                    try:
                        detail = (await response.json()).get("detail")
                    except Exception:
                        detail = await response.text()
                    return IsAliveResponse(
                        is_alive=False,
                        message=f"Status code {response.status} from {self._api_url}/is_alive. Message: {detail}",
                    )
        except SwerexException:
            raise
        except Exception as e:  # connection refused, timeout...
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
                        except BaseException as e:  # the server answered: never retried
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
        source = Path(request.source_path).resolve()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            if source.is_dir():
                with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
                    zip_path = Path(tmp) / "zipped_transfer.zip"
                    shutil.make_archive(str(zip_path.with_suffix("")), "zip", source)
                    with open(zip_path, "rb") as f:
                        data = aiohttp.FormData()
                        data.add_field("file", f, filename=zip_path.name, content_type="application/zip")
                        data.add_field("target_path", request.target_path)
                        data.add_field("unzip", "true")
                        url = f"{self._api_url}/upload"
                        async with session.post(url, data=data, headers=self._headers) as response:
                            await self._handle_response_errors(response)
                            return UploadResponse(**(await response.json()))
            if source.is_file():
                with open(source, "rb") as f:
                    data = aiohttp.FormData()
                    data.add_field("file", f, filename=source.name)
                    data.add_field("target_path", request.target_path)
                    data.add_field("unzip", "false")
                    async with session.post(f"{self._api_url}/upload", data=data, headers=self._headers) as response:
                        await self._handle_response_errors(response)
                        return UploadResponse(**(await response.json()))
        raise ValueError(f"Source path {source} is not a file or directory")

    async def close(self) -> CloseResponse:
        """Close every session of the sandbox (the sandbox itself lives until its deployment stops)."""
        return await self._request("close", None, CloseResponse)


if __name__ == "__main__":  # pragma: no cover - tiny manual check: python -m minisandbox.swerex.runtime URL [TOKEN]
    async def _main() -> None:
        rt = MinisandboxRuntime(host=sys.argv[1], auth_token=sys.argv[2] if len(sys.argv) > 2 else "")
        print(await rt.is_alive(timeout=5))

    asyncio.run(_main())
