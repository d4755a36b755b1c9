"""One progress display for the whole fleet: a line rewritten in place on a terminal, a line per change otherwise,
or JSON lines (``--json``) for whoever drives the run (e.g. another program rendering its own progress)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    def __init__(self, title: str, total: int, *, stream: TextIO | None = None, json_events: bool = False) -> None:
        self.title, self.total = title, total
        self.stream = stream or sys.stderr
        self.json = json_events
        self.tty = not json_events and self.stream.isatty()
        self.last = ""
        self.started = time.monotonic()
        if self.json:
            self.event("start", title=title, total=total)

    def event(self, kind: str, **fields: Any) -> None:
        """One JSON line (only in JSON mode)."""
        if self.json:
            self.stream.write(json.dumps({"event": kind, **fields}) + "\n")
            self.stream.flush()

    def show(self, *, done: int, running: int, retried: int, errors: int, nodes: int) -> None:
        line = (
            f"{self.title}: {done}/{self.total} done, {running} running, {retried} retried, {errors} errors, "
            f"{nodes} node{'s' if nodes != 1 else ''}"
        )
        if line == self.last:
            return
        self.last = line
        if self.json:
            self.event(
                "progress", done=done, total=self.total, running=running, retried=retried, errors=errors, nodes=nodes
            )
            return
        self.stream.write(("\r\x1b[2K" + line) if self.tty else line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        secs = round(time.monotonic() - self.started, 1)
        if self.json:
            self.event("finish", title=self.title, seconds=secs)
        elif self.tty:
            self.stream.write("\n")
