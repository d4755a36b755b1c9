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
        #: item -> when its current attempt started; the durations of the items done (for the ETA)
        self._running: dict[str, float] = {}
        self._durations: list[float] = []
        if self.json:
            self.event("start", title=title, total=total)

    def began(self, item: str) -> None:
        """An attempt at ``item`` started (a retry starts the clock again)."""
        self._running[item] = time.monotonic()

    def ended(self, item: str) -> None:
        """``item`` is done (a result or a final error)."""
        began = self._running.pop(item, None)
        if began is not None:
            self._durations.append(time.monotonic() - began)

    def eta_s(self, done: int, running: int) -> float | None:
        """Seconds left: the mean item's duration for what waits, what it has left for what runs, over the items
        running at once; None until one is done."""
        if not self._durations:
            return None
        mean = sum(self._durations) / len(self._durations)
        now = time.monotonic()
        work = sum(max(0.0, mean - (now - t)) for t in self._running.values())
        work += max(0, self.total - done - len(self._running)) * mean
        return work / max(1, min(running or 1, self.total - done))

    def event(self, kind: str, **fields: Any) -> None:
        """One JSON line (only in JSON mode)."""
        if self.json:
            self.stream.write(json.dumps({"event": kind, **fields}) + "\n")
            self.stream.flush()

    def show(self, *, done: int, running: int, retried: int, errors: int, nodes: int) -> None:
        eta = self.eta_s(done, running)
        line = (
            f"{self.title}: {done}/{self.total} done, {running} running, {retried} retried, {errors} errors, "
            f"{nodes} node{'s' if nodes != 1 else ''}" + (f", ETA {_duration(eta)}" if eta is not None else "")
        )
        if line == self.last:
            return
        self.last = line
        if self.json:
            self.event(
                "progress",
                done=done,
                total=self.total,
                running=running,
                retried=retried,
                errors=errors,
                nodes=nodes,
                eta_s=None if eta is None else round(eta, 1),
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


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
