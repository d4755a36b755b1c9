"""Stand-ins for swe-rex's exception classes and request/response models (swe-rex 1.4: same names, fields, defaults
and bases), used when the ``swe-rex`` package is not installed; ``runtime`` uses swe-rex's own when it is. They are
also what the type checker sees. ``contract_check.py`` checks the models against the server's wire contract."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel

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
]

# ---------------------------------------------------------------------------------------------- exceptions


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


# -------------------------------------------------------------------------------------------------- models


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
    timeout: Optional[float] = None
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
    exit_code: Optional[int] = None
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
    timeout: Optional[float] = None
    shell: bool = False
    check: bool = False
    error_msg: str = ""
    env: Optional[dict[str, str]] = None
    cwd: Optional[str] = None
    merge_output_streams: bool = False


class CommandResponse(BaseModel):
    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None


class ReadFileRequest(BaseModel):
    path: str
    encoding: Optional[str] = None
    errors: Optional[str] = None


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
