"""Where ``minisandbox serve`` keeps its generated token, resolved exactly as the CLI resolves its home (the order and
the names are generated from the TypeScript declaration: ``_generated.py``)."""

from __future__ import annotations

import os

from ._generated import HOME_ENV, HOME_UNDER_USER, TOKEN_FILE

__all__ = ["default_token", "resolve_home", "token_file"]


def resolve_home(home: str | None = None) -> str:
    """The home, absolute: ``home``, else ``$MINISANDBOX_HOME``, else ``$XDG_DATA_HOME/minisandbox``, else
    ``~/.local/share/minisandbox``."""
    if home:
        return os.path.abspath(home)
    for name, sub in HOME_ENV:
        value = os.environ.get(name)
        if value:
            return os.path.abspath(os.path.join(value, sub) if sub else value)
    return os.path.abspath(os.path.join(os.path.expanduser("~"), HOME_UNDER_USER))


def token_file(home: str | None = None) -> str:
    """``<home>/server/token``."""
    return os.path.join(resolve_home(home), *TOKEN_FILE)


def default_token(home: str | None = None) -> str:
    """The token ``minisandbox serve`` wrote to ``<home>/server/token`` ("" when there is none)."""
    try:
        with open(token_file(home), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""
