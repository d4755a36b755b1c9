"""minisandbox for Python: a client of ``minisandbox serve`` and adapters for the agent ecosystem.

- ``minisandbox.Client`` — the native API (sandboxes, exec, files), standard library only.
- ``minisandbox.minisweagent.MinisandboxEnvironment`` — a mini-swe-agent environment (its SWE-bench batch runner
  with ``python -m minisandbox.configs mini-swebench``).
- ``minisandbox.sweagent`` — SWE-agent ``run-batch`` instances on the server's instance-addressed runtimes.
- ``minisandbox.swerex`` — a SWE-ReX runtime and deployment (needs the ``swerex`` extra: aiohttp, pydantic).
- ``minisandbox.swerex_pytest`` — a pytest plugin running SWE-ReX's own tests against ``minisandbox serve --dir``.
- ``minisandbox.rl`` — rollouts for RL trainers: groups, an agent loop, trajectories, SkyRL / verl adapters.
"""

from .client import DEFAULT_URL, Client
from .errors import (
    AuthError,
    BuildError,
    CheckpointNotFoundError,
    ForbiddenError,
    InvalidInputError,
    LayerUnavailableError,
    LimitError,
    MinisandboxError,
    NotFoundError,
    PeerNotAllowedError,
    RequestValidationError,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
    ServerUnreachableError,
    SessionError,
    StoreCorruptError,
    TaskInvalidError,
    TimeoutError,  # noqa: A004 - the server's class of the "timeout" code
    UnauthorizedError,
    UnavailableError,
    UploadTooLargeError,
)
from .token import default_token, resolve_home, token_file

__all__ = [
    "DEFAULT_URL",
    "AuthError",
    "BuildError",
    "CheckpointNotFoundError",
    "Client",
    "ForbiddenError",
    "InvalidInputError",
    "LayerUnavailableError",
    "LimitError",
    "MinisandboxError",
    "NotFoundError",
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
    "default_token",
    "resolve_home",
    "token_file",
]
__version__ = "0.1.0"
