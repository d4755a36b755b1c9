"""minisandbox on many machines: a fleet on Ray, placed by environment, surviving lost nodes.

One ``minisandbox serve`` per Ray node that advertises the ``minisandbox_slot`` resource (started and supervised by an
actor pinned to that node, with the node's own home); sandboxes placed where their environment's layers already are;
layers moved between nodes over HTTP, verified by hash, at most once per node; ``prepare`` and ``evaluate`` over a
dataset from one call, with one progress display and the report a single node writes; rollout groups for RL trainers
placed the same way; work lost with a node runs again elsewhere.

    from minisandbox.fleet import Fleet, evaluate
    with Fleet() as fleet:                       # ray.init(address="auto") unless Ray is initialized already
        out = evaluate(fleet, "swe.jsonl", "preds.jsonl", run_id="r1")
        print(out["summary_path"])

Needs Ray (``pip install 'minisandbox[fleet]'``); importing ``minisandbox`` alone never imports it.
"""

from __future__ import annotations

from typing import Any

from .config import FleetConfig
from .placement import NodeState, Placement

__all__ = [
    "Fleet",
    "FleetConfig",
    "FleetJobError",
    "NodeState",
    "Placement",
    "Progress",
    "evaluate",
    "prepare",
    "rollout_groups",
    "status_html",
]

_LAZY = {
    "Fleet": "fleet",
    "evaluate": "jobs",
    "prepare": "jobs",
    "rollout_groups": "jobs",
    "status_html": "jobs",
    "FleetJobError": "jobs",
    "Progress": "progress",
}


def __getattr__(name: str) -> Any:  # Ray is imported on first use, not with the package
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
