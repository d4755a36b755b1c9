"""Ready configs for the agent ecosystem's runners. ``python -m minisandbox.configs NAME`` prints a config's path.

- ``mini-swebench``: mini-swe-agent's SWE-bench batch runner on minisandbox (merge it after ``swebench.yaml``).
- ``sweagent``: SWE-agent's ``run-batch`` on minisandbox (with an instances file from
  ``python -m minisandbox.sweagent``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIGS", "config_path"]

CONFIGS = {"mini-swebench": "mini-swebench.yaml", "sweagent": "sweagent.yaml"}


def config_path(name: str) -> str:
    """The absolute path of a shipped config, by name (see ``CONFIGS``)."""
    if name not in CONFIGS:
        raise KeyError(f"unknown config {name!r}; shipped: {', '.join(sorted(CONFIGS))}")
    return str(Path(__file__).with_name(CONFIGS[name]))
