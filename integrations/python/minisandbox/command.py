"""How to run the ``minisandbox`` CLI from Python (the SWE-ReX test plugin, the fleet's servers and plans):
``$MINISANDBOX_CLI`` split like a shell would (e.g. ``node /opt/minisandbox/dist/src/cli/index.js``), else
``minisandbox`` on PATH (``npm install -g minisandbox``, or ``scripts/install-cli.sh`` in a clone)."""

from __future__ import annotations

import os
import shlex
import shutil

__all__ = ["CliNotFoundError", "cli_command", "require_cli"]


class CliNotFoundError(FileNotFoundError):
    """The CLI named by ``$MINISANDBOX_CLI`` (or ``minisandbox`` on PATH) is not there."""


def cli_command() -> list[str]:
    """``$MINISANDBOX_CLI`` (split like a shell would), else ``["minisandbox"]``."""
    return shlex.split(os.environ.get("MINISANDBOX_CLI", "")) or ["minisandbox"]


def require_cli(command: list[str] | None = None) -> list[str]:
    """``command`` (default ``cli_command()``) when its program exists here, else a ``CliNotFoundError`` that says
    how to install it or where to point ``MINISANDBOX_CLI``."""
    argv = command or cli_command()
    if shutil.which(argv[0]) is None:
        raise CliNotFoundError(
            f"{argv[0]!r} is not on PATH (the minisandbox CLI): install it (npm install -g minisandbox, or "
            "scripts/install-cli.sh in a clone), or set MINISANDBOX_CLI to how to run it, "
            "e.g. 'node /path/to/minisandbox/dist/src/cli/index.js'"
        )
    return argv
