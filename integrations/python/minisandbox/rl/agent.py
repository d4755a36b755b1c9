"""A minimal agent loop in mini-swe-agent's text format: the model answers with a THOUGHT and exactly one bash
block; the command runs in the rollout; its output is the next user message; the agent submits by printing
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT as the first line of a command's output. Works without any dependency."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import InvalidInputError
from ..mini_output import mini_output, submission
from .policy import Completion, ResponseLengthExceeded

SYSTEM_TEMPLATE = """You are a helpful assistant that can interact with a computer shell to solve programming tasks.
Your response must contain exactly ONE bash code block with ONE command (or commands connected with && or ||).
Include a THOUGHT section before your command where you explain your reasoning.

THOUGHT: Your reasoning and analysis here

```bash
your_command_here
```

When you are done, submit with: echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"""

INSTANCE_TEMPLATE = """<pr_description>
Consider the following PR description:
{task}
</pr_description>

Make changes to non-test files in the current directory (/testbed) to resolve the issue. Each response: a THOUGHT
and exactly ONE bash command; you see its output, then write the next one. When you are done, run
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` on its own."""

FORMAT_ERROR = "Please always provide EXACTLY ONE action in triple backticks, found {n} actions."

ACTION_REGEX = r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```"


@dataclass
class AgentConfig:
    step_limit: int = 30
    #: Seconds per command (SkyRL's mini-swe-agent example: 180).
    command_timeout: float = 180.0
    #: Seconds for the whole agent run (0: none; the paper's scripts use 300).
    wall_time_limit: float = 0.0
    max_consecutive_format_errors: int = 3
    #: Observations longer than this keep their head and tail.
    max_output_chars: int = 10_000
    system_template: str = SYSTEM_TEMPLATE
    instance_template: str = INSTANCE_TEMPLATE
    action_regex: str = ACTION_REGEX


def opening(config: AgentConfig, task: str, prompt: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The trajectory's first messages: the given prompt (role and content), or system + task from the templates."""
    if prompt:
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    return [
        {"role": "system", "content": config.system_template},
        {"role": "user", "content": config.instance_template.replace("{task}", task)},
    ]


class Policy(Protocol):
    def complete(self, messages: list[dict[str, Any]], *, user: str | None = None) -> Completion: ...


class Environment(Protocol):
    def execute(self, command: str, timeout: float) -> dict[str, Any]: ...


@dataclass
class AgentResult:
    messages: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    exit_status: str
    submission: str = ""
    agent_ms: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class MinimalAgent:
    """One trajectory: query, act, observe, until submitted, out of steps, time or response tokens. Errors of the
    policy or the sandbox end the run and propagate (they are infrastructure failures, not the agent's)."""

    def __init__(self, policy: Policy, env: Environment, config: AgentConfig | None = None, *, user: str | None = None):
        self.policy = policy
        self.env = env
        self.config = config or AgentConfig()
        self.user = user
        self._format_errors = 0

    def run(
        self, task: str, result: AgentResult | None = None, *, prompt: list[dict[str, Any]] | None = None
    ) -> AgentResult:
        """Run to the end. `result` (filled as the run goes) keeps what happened if an exception ends it. `prompt`:
        the opening messages (a trainer's dataset prompt) instead of the templates over `task`."""
        c = self.config
        res = result or AgentResult([], [], "Running")
        res.messages[:] = opening(c, task, prompt)
        started = time.perf_counter()
        self._format_errors = 0
        try:
            for step in range(c.step_limit if c.step_limit > 0 else 10**9):
                left = c.wall_time_limit - (time.perf_counter() - started) if c.wall_time_limit else None
                if left is not None and left <= 0:
                    res.exit_status = "TimeExceeded"
                    return res
                ended = self._step(step, res, left)
                if ended is not None:
                    res.exit_status = ended
                    return res
            res.exit_status = "LimitsExceeded"
            return res
        except ResponseLengthExceeded:
            res.exit_status = "ResponseLengthExceeded"
            return res
        finally:
            res.agent_ms = round((time.perf_counter() - started) * 1000, 1)

    def _step(self, step: int, res: AgentResult, time_left: float | None) -> str | None:
        """One turn: the reply (kept whatever its form), then its command's output or the format error. Returns the
        exit status when the turn ends the run."""
        c = self.config
        turn: dict[str, Any] = {"step": step}
        res.turns.append(turn)
        completion = self.policy.complete(res.messages, user=self.user)
        turn.update(
            model_ms=round(completion.latency_ms, 1), finish_reason=completion.finish_reason, usage=completion.usage
        )
        res.messages.append({"role": "assistant", "content": completion.content})
        actions = [a.strip() for a in re.findall(c.action_regex, completion.content, re.DOTALL)]
        if len(actions) != 1:
            self._format_errors += 1
            res.messages.append({"role": "user", "content": FORMAT_ERROR.format(n=len(actions))})
            turn["format_error"] = True
            return "RepeatedFormatError" if 0 < c.max_consecutive_format_errors <= self._format_errors else None
        self._format_errors = 0
        # A command may use what is left of the wall time, no more.
        timeout = c.command_timeout if time_left is None else max(0.001, min(c.command_timeout, time_left))
        t = time.perf_counter()
        out = self.env.execute(actions[0], timeout)
        turn.update(exec_ms=round((time.perf_counter() - t) * 1000, 1), returncode=out["returncode"])
        submitted = submission(out)
        if submitted is not None:
            res.submission = submitted
            return "Submitted"
        res.messages.append({"role": "user", "content": self._observation(out)})
        return None

    def _observation(self, out: dict[str, Any]) -> str:
        text = out["output"]
        limit = self.config.max_output_chars
        if len(text) > limit:
            half = limit // 2
            text = f"{text[:half]}\n<elided {len(text) - limit} characters>\n{text[-half:]}"
        head = f"<exception>{out['exception_info']}</exception>\n" if out.get("exception_info") else ""
        return f"{head}<returncode>{out['returncode']}</returncode>\n<output>\n{text}</output>"


class RolloutEnvironment:
    """A rollout as the agent's shell: one process per command (`bash -c`), stdout and stderr merged, a timeout
    gives returncode -1 with the output so far (as mini-swe-agent's environments do)."""

    def __init__(self, rollout: Any, *, cwd: str = "/testbed", env: dict[str, str] | None = None):
        self.rollout = rollout
        self.cwd = cwd
        self.env = {
            "PAGER": "cat",
            "MANPAGER": "cat",
            "LESS": "-R",
            "PIP_PROGRESS_BAR": "off",
            "TQDM_DISABLE": "1",
            **(env or {}),
        }

    def execute(self, command: str, timeout: float) -> dict[str, Any]:
        try:
            r = self.rollout.exec(command, timeout=timeout, cwd=self.cwd, env=self.env, merge_output=True)
        except InvalidInputError as e:
            return refused(e)
        return mini_output(r, command, timeout)


def refused(e: InvalidInputError) -> dict[str, Any]:
    """A command the server refused as given (a NUL byte, a bad directory...): the policy's own doing, so it is an
    observation like a failed command, never an error that would end the trajectory as an infrastructure failure."""
    return {"output": "", "returncode": -1, "exception_info": f"The command was refused: {e}"}
