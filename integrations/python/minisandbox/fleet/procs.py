"""A long-lived child process that cannot outlive whoever started it (Linux).

The child gets its own process group, ``PR_SET_PDEATHSIG=SIGTERM`` and a pipe on stdin: if the starting process dies
(even by SIGKILL), the kernel sends SIGTERM and the pipe reaches end of file, and ``minisandbox serve
--exit-with-stdin`` closes its sandboxes and exits either way.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

__all__ = ["Child"]

_PR_SET_PDEATHSIG = 1

# PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process. Actor methods may run on
# pool threads, so every fork happens on this one thread, which lives as long as the process.
_forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minisandbox-forker")


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)

    def pre() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died between fork and prctl
            os._exit(1)
        os.setpgid(0, 0)  # one killpg stops it and whatever it left in its group

    return pre


class Child:
    """Start ``argv`` (stdout and stderr appended to ``log_path``) and wait until it writes ``ready_file``
    (``{"url", "pid"}``). Raises RuntimeError with the log's tail when it exits first or takes too long."""

    def __init__(
        self, argv: list[str], env: dict[str, str], ready_file: str, log_path: str, ready_timeout_s: float = 120.0
    ) -> None:
        try:
            os.unlink(ready_file)
        except FileNotFoundError:
            pass
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc: subprocess.Popen[bytes] = _forker.submit(
                subprocess.Popen,
                argv,
                env=env,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                preexec_fn=_die_with_parent(os.getpid()),
            ).result()
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {self.proc.returncode} before it was ready: {self.tail()}")
            try:
                with open(ready_file) as f:
                    self.ready: dict[str, Any] = json.load(f)
                break
            except (FileNotFoundError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop(grace_s=2)
                raise RuntimeError(f"{argv[0]} was not ready after {ready_timeout_s:.0f} s: {self.tail()}")
            time.sleep(0.05)

    def tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 30.0) -> int:
        """SIGTERM (the server closes its sandboxes), then SIGKILL to its whole group."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.stdin:
            self.proc.stdin.close()
        return self.proc.wait()
