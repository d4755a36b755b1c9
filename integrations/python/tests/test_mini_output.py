"""The one translation of a command result into mini-swe-agent's output, and of a submission into ``Submitted``."""

from __future__ import annotations

import pytest
from minisandbox.mini_output import COMPLETION_MARKER, Submitted, check_submitted, mini_output, submission


def test_a_finished_command_is_its_merged_output_and_exit_status() -> None:
    r = {"stdout": "out\nerr\n", "stderr": "", "exit_code": 3, "timed_out": False}
    assert mini_output(r, "make", 30) == {"output": "out\nerr\n", "returncode": 3, "exception_info": ""}


def test_a_command_out_of_time_keeps_its_output_and_says_so_as_subprocess_would() -> None:
    r = {"stdout": "partial\n", "stderr": "", "exit_code": None, "timed_out": True}
    out = mini_output(r, "sleep 99", 1.5)
    message = "Command 'sleep 99' timed out after 1.5 seconds"
    assert out == {
        "output": "partial\n",
        "returncode": -1,
        "exception_info": f"An error occurred while executing the command: {message}",
        "extra": {"exception_type": "TimeoutExpired", "exception": message},
    }
    assert "after 30 seconds" in mini_output(r, "x", 30)["exception_info"], "whole seconds print without a point"


@pytest.mark.parametrize(
    ("output", "returncode", "expected"),
    [
        (f"{COMPLETION_MARKER}\ndiff --git a b\n", 0, "diff --git a b\n"),
        (f"\n  {COMPLETION_MARKER}  \nthe rest", 0, "the rest"),
        (f"{COMPLETION_MARKER}", 0, ""),
        (f"{COMPLETION_MARKER}\npatch", 1, None),
        (f"text first\n{COMPLETION_MARKER}\n", 0, None),
        ("", 0, None),
    ],
    ids=["patch", "leading-blank", "marker-only", "failed-command", "not-first-line", "empty"],
)
def test_a_submission_is_the_marker_as_first_line_of_a_successful_command(
    output: str, returncode: int, expected: str | None
) -> None:
    assert submission({"output": output, "returncode": returncode}) == expected


def test_check_submitted_raises_mini_swe_agent_s_exit_message() -> None:
    check_submitted({"output": "no", "returncode": 0})
    with pytest.raises(Submitted) as e:
        check_submitted({"output": f"{COMPLETION_MARKER}\nthe patch\n", "returncode": 0})
    assert e.value.args[0] == {
        "role": "exit",
        "content": "the patch\n",
        "extra": {"exit_status": "Submitted", "submission": "the patch\n"},
    }
