"""A pytest plugin for ``test/python-package.test.ts``: one JSON line per test phase in ``$MINISANDBOX_PYTEST_REPORT``
(``nodeid``, ``when``, ``outcome``, ``duration``, ``longrepr``), so that node:test reports each pytest test as its own
subtest, failing with pytest's own output. Loaded with ``-p tests.node_report``."""

from __future__ import annotations

import json
import os

import pytest


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("MINISANDBOX_PYTEST_REPORT")
    if not path:
        return
    longrepr = ""
    if report.failed:
        longrepr = str(report.longrepr)
    elif report.skipped and isinstance(report.longrepr, tuple):
        longrepr = str(report.longrepr[2])
    line = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": report.duration,
        "longrepr": longrepr,
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
