"""The fleet's progress line: counts, then an ETA from the items' own durations once one is done (no Ray needed)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from minisandbox.fleet.progress import Progress


def test_eta_counts_running_items_and_parallelism(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr("minisandbox.fleet.progress.time", SimpleNamespace(monotonic=lambda: now[0]))
    out = io.StringIO()
    p = Progress("prepare", 3, stream=out)
    p.began("a")
    p.began("b")
    p.show(done=0, running=2, retried=0, errors=0, nodes=3)
    now[0] = 100.0
    p.ended("b")  # a has run as long as b took; c waits for a slot
    p.show(done=1, running=1, retried=0, errors=0, nodes=3)
    p.began("c")
    now[0] = 130.0
    p.show(done=1, running=2, retried=0, errors=0, nodes=3)
    assert out.getvalue().splitlines() == [
        "prepare: 0/3 done, 2 running, 0 retried, 0 errors, 3 nodes",
        "prepare: 1/3 done, 1 running, 0 retried, 0 errors, 3 nodes, ETA 1m40s",
        "prepare: 1/3 done, 2 running, 0 retried, 0 errors, 3 nodes, ETA 35s",
    ]
