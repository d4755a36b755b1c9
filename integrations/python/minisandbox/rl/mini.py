"""mini-swe-agent's own agent (`DefaultAgent`) on a minisandbox rollout, with a policy behind any OpenAI-compatible
endpoint and no litellm: the model speaks mini's text format (one ```mswea_bash_command block per answer, its
`swebench_backticks.yaml` templates), the environment is the rollout. Needs mini-swe-agent importable
(`minisweagent`); everything else in this package works without it."""

from __future__ import annotations

import time
from typing import Any

from ..errors import InvalidInputError
from ..mini_output import check_submitted, mini_output
from .agent import AgentResult, Policy, refused
from .policy import ResponseLengthExceeded

try:  # import-guarded: mini-swe-agent is optional
    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_path
    from minisweagent.exceptions import FormatError, LimitsExceeded
    from minisweagent.models.utils.actions_text import format_observation_messages, parse_regex_actions
except ImportError as e:  # pragma: no cover - exercised where mini-swe-agent is absent
    _MISSING: ImportError | None = e
else:
    _MISSING = None


def mini_available() -> bool:
    return _MISSING is None


def _require() -> None:
    if _MISSING is not None:
        raise ImportError(f"mini-swe-agent is not importable ({_MISSING}); install it or use MinimalAgent")


class MiniTextModel:
    """mini-swe-agent's Model protocol over a policy (or a trajectory's session of one): text actions parsed with
    mini's own helpers. A malformed reply stays in the chat as the assistant turn it is, followed by mini's format
    error (mini's own models drop it, leaving nothing to penalise)."""

    def __init__(self, policy: Policy, *, user: str | None = None, **config: Any):
        _require()
        self.policy = policy
        self.user = user
        self.config = config  # the `model` section of a mini config (templates, action_regex)
        self.action_regex = config.get("action_regex", r"```mswea_bash_command\s*\n(.*?)\n```")
        self.turns: list[dict[str, Any]] = []

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        try:
            c = self.policy.complete(messages, user=self.user)
        except ResponseLengthExceeded as e:
            exit_message = {"exit_status": "ResponseLengthExceeded", "submission": ""}
            raise LimitsExceeded({"role": "exit", "content": str(e), "extra": exit_message}) from e
        self.turns.append(
            {
                "step": len(self.turns),
                "model_ms": round(c.latency_ms, 1),
                "finish_reason": c.finish_reason,
                "usage": c.usage,
            }
        )
        reply: dict[str, Any] = {
            "role": "assistant",
            "content": c.content,
            "extra": {"cost": 0.0, "timestamp": time.time()},
        }
        try:
            reply["extra"]["actions"] = parse_regex_actions(
                c.content,
                action_regex=self.action_regex,
                format_error_template=self.config.get("format_error_template", "{{ error }}"),
                template_kwargs={"finish_reason": c.finish_reason},
            )
        except FormatError as e:
            self.turns[-1]["format_error"] = True
            raise FormatError(reply, *e.messages) from e
        return reply

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        return dict(kwargs)

    def format_observation_messages(
        self, message: dict[str, Any], outputs: list[dict[str, Any]], template_vars: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        return format_observation_messages(
            outputs, observation_template=self.config["observation_template"], template_vars=template_vars
        )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "model": {
                        "base_url": getattr(self.policy, "base_url", ""),
                        "model": getattr(self.policy, "model", ""),
                    },
                    "model_type": f"{__name__}.{type(self).__name__}",
                }
            }
        }


class MiniRolloutEnvironment:
    """mini-swe-agent's Environment protocol over a rollout (what its docker environment does with `podman exec`)."""

    def __init__(
        self,
        rollout: Any,
        *,
        cwd: str = "/testbed",
        timeout: float = 180.0,
        env: dict[str, Any] | None = None,
        turns: list[dict[str, Any]] | None = None,
    ):
        _require()
        self.rollout = rollout
        self.config: dict[str, Any] = {"cwd": cwd, "timeout": timeout, "env": env or {}}
        self.turns = turns if turns is not None else []

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        t = time.perf_counter()
        limit: float = timeout or self.config["timeout"]
        try:
            r = self.rollout.exec(
                command, timeout=limit, cwd=cwd or self.config["cwd"], env=self.config["env"], merge_output=True
            )
        except InvalidInputError as e:
            return refused(e)
        if self.turns:
            self.turns[-1].update(exec_ms=round((time.perf_counter() - t) * 1000, 1), returncode=r["exit_code"])
        out = mini_output(r, command, limit)
        check_submitted(out)
        return out

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config,
                    "rollout": self.rollout.id,
                    "environment_type": f"{__name__}.{type(self).__name__}",
                }
            }
        }


def mini_config(name: str = "swebench_backticks") -> dict[str, Any]:
    """A config shipped with mini-swe-agent (agent and model sections are used)."""
    _require()
    with open(get_config_path(name)) as f:
        return yaml.safe_load(f)


def run_mini_agent(
    policy: Policy,
    rollout: Any,
    task: str,
    *,
    config: dict[str, Any] | None = None,
    user: str | None = None,
    step_limit: int | None = None,
    command_timeout: float = 180.0,
    wall_time_limit: float = 0.0,
    result: AgentResult | None = None,
) -> AgentResult:
    """One trajectory with mini-swe-agent's DefaultAgent; the same result shape as MinimalAgent's."""
    _require()
    cfg = config or mini_config()
    agent_cfg = {**cfg.get("agent", {}), "cost_limit": 0}
    if step_limit is not None:
        agent_cfg["step_limit"] = step_limit
    if wall_time_limit:
        agent_cfg["wall_time_limit_seconds"] = max(1, int(wall_time_limit))
    model = MiniTextModel(policy, user=user, **cfg.get("model", {}))
    env = MiniRolloutEnvironment(
        rollout, timeout=command_timeout, env=cfg.get("environment", {}).get("env"), turns=model.turns
    )
    agent = DefaultAgent(model, env, **agent_cfg)
    res = result or AgentResult([], [], "Running")
    started = time.perf_counter()
    try:
        info = agent.run(task)
        res.exit_status = info.get("exit_status", "")
        res.submission = info.get("submission", "")
    finally:
        res.agent_ms = round((time.perf_counter() - started) * 1000, 1)
        res.messages[:] = [
            {"role": m["role"], "content": m.get("content", "")} for m in agent.messages if m.get("role") != "exit"
        ]
        res.turns[:] = model.turns
    return res
