"""mini-swe-agent's view of a command: the one translation of a minisandbox exec answer (``exit_code``, ``stdout``
with stderr merged, ``timed_out``) into the dict mini-swe-agent's environments return, and of a submission (the
completion marker as the output's first line, exit status 0) into its ``Submitted``. Used by the environment
(``minisandbox.minisweagent``), the rollout environments of ``minisandbox.rl`` and mini-swe-agent's own agent on a
rollout (``minisandbox.rl.mini``), so that every agent sees the same observations. Standard library only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from minisweagent.exceptions import Submitted
except ImportError:  # mini-swe-agent not installed: the same shape

    class Submitted(Exception):  # type: ignore[no-redef]
        """The agent printed the completion marker; ``args[0]`` is the exit message."""


__all__ = ["COMPLETION_MARKER", "Submitted", "check_submitted", "mini_output", "submission"]

COMPLETION_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def mini_output(result: Mapping[str, Any], command: str, timeout: float) -> dict[str, Any]:
    """``{"output", "returncode", "exception_info"}`` of an exec answer, as mini-swe-agent's docker environment
    returns it; a command that ran out of time keeps its output so far, with returncode -1 and ``extra`` saying
    ``TimeoutExpired`` like ``subprocess``."""
    if result["timed_out"]:
        message = f"Command '{command}' timed out after {timeout:g} seconds"
        return {
            "output": result["stdout"],
            "returncode": -1,
            "exception_info": f"An error occurred while executing the command: {message}",
            "extra": {"exception_type": "TimeoutExpired", "exception": message},
        }
    return {"output": result["stdout"], "returncode": result["exit_code"], "exception_info": ""}


def submission(output: Mapping[str, Any]) -> str | None:
    """What the agent submitted, when this output is a submission; else None."""
    lines = str(output.get("output", "")).lstrip().splitlines(keepends=True)
    if lines and lines[0].strip() == COMPLETION_MARKER and output.get("returncode") == 0:
        return "".join(lines[1:])
    return None


def check_submitted(output: Mapping[str, Any]) -> None:
    """Raise mini-swe-agent's ``Submitted`` (its exit message) when this output is a submission."""
    text = submission(output)
    if text is not None:
        raise Submitted({"role": "exit", "content": text, "extra": {"exit_status": "Submitted", "submission": text}})
