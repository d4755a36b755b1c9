"""Errors of the Python client: one class per stable ``code`` of the server's answers (``{"detail", "code"}``)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "MinisandboxError",
    "ServerUnreachableError",
    "InvalidInputError",
    "AuthError",
    "NotFoundError",
    "LimitError",
    "TimeoutError",
    "UnavailableError",
    "SandboxLostError",
    "TaskInvalidError",
    "error_for",
]


class MinisandboxError(RuntimeError):
    """Anything the server refused or could not do. ``code`` and ``status`` as the server answered them."""

    def __init__(self, message: str, *, code: str = "sandbox_error", status: int | None = None, detail: Any = None):
        super().__init__(message)
        self.code = code
        self.status = status
        self.detail = detail


class ServerUnreachableError(MinisandboxError, ConnectionError):
    """No answer from the server at all (not started, wrong URL, connection refused or cut)."""


class InvalidInputError(MinisandboxError, ValueError):
    pass


class AuthError(MinisandboxError, PermissionError):
    pass


class NotFoundError(MinisandboxError, LookupError):
    pass


class LimitError(MinisandboxError):
    """Over a limit of the server (live sandboxes, rate, sizes). ``retry_after`` in seconds when the server said."""

    retry_after: float | None = None


class TimeoutError(MinisandboxError):  # noqa: A001 - the server's "timeout" code
    pass


class UnavailableError(MinisandboxError):
    pass


class SandboxLostError(MinisandboxError):
    """A rollout's sandbox ended without being closed (killed, reaped, out of time): an infrastructure failure."""


class TaskInvalidError(MinisandboxError):
    """The task's gold patch does not resolve it in its own environment (gold pre-check): do not train on it."""


_BY_CODE: dict[str, type[MinisandboxError]] = {
    "invalid_input": InvalidInputError,
    "validation_failed": InvalidInputError,
    "unauthorized": AuthError,
    "forbidden": AuthError,
    "not_found": NotFoundError,
    "sandbox_not_found": NotFoundError,
    "limit_reached": LimitError,
    "upload_too_large": LimitError,
    "timeout": TimeoutError,
    "unavailable": UnavailableError,
    "sandbox_lost": SandboxLostError,
    "task_invalid": TaskInvalidError,
}
_BY_STATUS: dict[int, type[MinisandboxError]] = {
    400: InvalidInputError,
    401: AuthError,
    403: AuthError,
    404: NotFoundError,
    410: SandboxLostError,
    413: LimitError,
    422: InvalidInputError,
    429: LimitError,
    503: UnavailableError,
    504: TimeoutError,
}


def error_for(status: int, body: Any, what: str) -> MinisandboxError:
    """The error for a non-2xx answer: by its ``code`` when it has one, else by its HTTP status."""
    detail = body.get("detail") if isinstance(body, dict) else body
    code = body.get("code") if isinstance(body, dict) else None
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, MinisandboxError)
    text = detail if isinstance(detail, str) else repr(detail)
    return cls(f"{what}: {text} (HTTP {status})", code=code or cls.__name__, status=status, detail=detail)
