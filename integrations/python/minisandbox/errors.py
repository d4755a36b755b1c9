"""Errors of the Python client: the server's error tree (src/errors.ts), a class for each of its classes a client
tells apart, with the same names and parents (``_generated.py`` holds the tree; tests/test_errors.py checks these
classes against it). An answer's ``code`` picks its class (or that of its nearest ancestor here); an answer without
one, its HTTP status."""

from __future__ import annotations

import builtins
from typing import Any

from ._generated import CODE_CLASSES, ERROR_PARENTS, HTTP_STATUS

__all__ = [
    "AuthError",
    "BuildError",
    "CheckpointNotFoundError",
    "ForbiddenError",
    "InvalidInputError",
    "LayerUnavailableError",
    "LimitError",
    "MinisandboxError",
    "NotFoundError",
    "NotImplementedError",
    "PeerNotAllowedError",
    "RequestValidationError",
    "SandboxError",
    "SandboxLostError",
    "SandboxNotFoundError",
    "ServerUnreachableError",
    "SessionError",
    "StoreCorruptError",
    "TaskInvalidError",
    "TimeoutError",
    "UnauthorizedError",
    "UnavailableError",
    "UploadTooLargeError",
    "class_of",
    "error_for",
]


class MinisandboxError(RuntimeError):
    """Anything the server refused or could not do. ``code`` and ``status`` as the server answered them."""

    def __init__(self, message: str, *, code: str = "internal_error", status: int | None = None, detail: Any = None):
        super().__init__(message)
        self.code = code
        self.status = status
        self.detail = detail


class ServerUnreachableError(MinisandboxError, ConnectionError):
    """No answer from the server at all (not started, wrong URL, connection refused or cut); code ``unreachable``."""


class InvalidInputError(MinisandboxError, ValueError):
    """Bad input: a malformed body, an unknown option value, a field out of range."""


class RequestValidationError(InvalidInputError):
    """A body that failed validation field by field; ``detail`` has one entry per problem (pydantic's shape)."""


class TaskInvalidError(MinisandboxError):
    """The task's gold patch does not resolve it in its own environment (gold pre-check): do not train on it."""


class AuthError(MinisandboxError, PermissionError):
    """401 (a wrong credential) or 403 (none, or not allowed): see the subclasses."""


class UnauthorizedError(AuthError):
    pass


class ForbiddenError(AuthError):
    pass


class PeerNotAllowedError(ForbiddenError):
    """A layer source that is not one of the server's allowed or registered peers."""


class NotFoundError(MinisandboxError, LookupError):
    pass


class SandboxNotFoundError(NotFoundError):
    """The sandbox named in a request is not (or no longer) live."""


class CheckpointNotFoundError(NotFoundError):
    """A rollout checkpoint its group does not hold: dropped (the message says so), or never made there."""


class UploadTooLargeError(MinisandboxError):
    """An upload over the server's size limit."""


class LimitError(MinisandboxError):
    """Over a limit of the server (live sandboxes, rate, sizes). ``retry_after`` in seconds when the server said."""

    retry_after: float | None = None


class TimeoutError(MinisandboxError):  # noqa: A001 - the server's class of the "timeout" code
    pass


class NotImplementedError(MinisandboxError, builtins.NotImplementedError):  # noqa: A001 - the server's class
    """The server (or its provider) cannot do this; also a builtin ``NotImplementedError``."""


class SandboxError(MinisandboxError):
    """A sandbox failed to start, run or answer."""


class SandboxLostError(SandboxError):
    """A rollout's sandbox ended without being closed (killed, reaped, out of time): an infrastructure failure."""


class UnavailableError(SandboxError):
    """The server takes no new work right now (e.g. it is shutting down)."""


class LayerUnavailableError(MinisandboxError):
    """No source could supply an environment's layer (a peer gone, or none holds it): retry elsewhere or later."""


class SessionError(MinisandboxError):
    """A persistent session failed (the session codes of SWE-ReX's exceptions)."""


class BuildError(MinisandboxError):
    """Building an environment failed; the message has the step and the tail of its log."""


class StoreCorruptError(MinisandboxError):
    """The server's store contradicts itself (a missing or corrupt object, an unreadable manifest)."""


def _subclasses(cls: type[MinisandboxError]) -> list[type[MinisandboxError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _subclasses(sub))]


#: The classes of the tree, by name (ServerUnreachableError is the client's own).
CLASSES: dict[str, type[MinisandboxError]] = {
    c.__name__: c for c in _subclasses(MinisandboxError) if c.__name__ in ERROR_PARENTS
}


def class_of(name: str) -> type[MinisandboxError]:
    """The class of the tree called ``name``, else that of its nearest ancestor the package defines (a server may know
    classes a client does not: they still raise their family's class)."""
    current: str | None = name
    while current is not None:
        if current in CLASSES:
            return CLASSES[current]
        current = ERROR_PARENTS.get(current)
    return MinisandboxError


def _by_status(status: int) -> tuple[str, type[MinisandboxError]]:
    """The code and class of an answer without a known code: the first code declared for its status (what such an
    answer means, e.g. a 422 validation answer), else ``http_<status>`` and the root class."""
    code = next((c for c, s in HTTP_STATUS.items() if s == status), None)
    return (code, class_of(CODE_CLASSES[code])) if code else (f"http_{status}", MinisandboxError)


def error_for(status: int, body: Any, what: str) -> MinisandboxError:
    """The error for a non-2xx answer: the class of its ``code`` when it has a known one, else of its HTTP status."""
    detail = body.get("detail") if isinstance(body, dict) else body
    code = body.get("code") if isinstance(body, dict) else None
    if isinstance(code, str) and code in CODE_CLASSES:
        cls = class_of(CODE_CLASSES[code])
    elif not isinstance(body, dict):
        # Not the server's answer (a proxy's page, say): no code of ours applies, whatever its status.
        code, cls = f"http_{status}", MinisandboxError
    else:
        fallback, cls = _by_status(status)
        code = code if isinstance(code, str) and code else fallback
    text = detail if isinstance(detail, str) else repr(detail)
    return cls(f"{what}: {text} (HTTP {status})", code=code, status=status, detail=detail)
