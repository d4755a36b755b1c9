"""Where ``minisandbox serve`` keeps its generated token, resolved exactly as the CLI resolves its home."""

from __future__ import annotations

import os

__all__ = ["resolve_home", "default_token"]


def resolve_home(home: str | None = None) -> str:
    """``home``, else ``$MINISANDBOX_HOME``, else ``$XDG_DATA_HOME/minisandbox``, else ``~/.local/share/minisandbox``.
    """
    if home:
        return os.path.abspath(home)
    if os.environ.get("MINISANDBOX_HOME"):
        return os.path.abspath(os.environ["MINISANDBOX_HOME"])
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "minisandbox")


def default_token(home: str | None = None) -> str:
    """The token ``minisandbox serve`` wrote to ``<home>/server/token`` ("" when there is none)."""
    try:
        with open(os.path.join(resolve_home(home), "server", "token"), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""
