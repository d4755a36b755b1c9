"""SWE-ReX over minisandbox: ``MinisandboxRuntime`` (a ``RemoteRuntime`` for one sandbox) and
``MinisandboxDeployment`` (creates and deletes that sandbox). Needs aiohttp and pydantic 2 (the ``swerex`` extra)."""

from .deployment import MinisandboxDeployment, MinisandboxDeploymentConfig
from .runtime import MinisandboxRuntime

__all__ = ["MinisandboxDeployment", "MinisandboxDeploymentConfig", "MinisandboxRuntime"]
