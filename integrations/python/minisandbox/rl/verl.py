"""A verl-style agent loop over minisandbox rollouts: `await run(sampling_params, **row)` runs one trajectory
(a rollout group of one; GRPO's repetitions are separate calls in verl) and returns prompt ids, response ids, the
response mask, the reward and turn counts. verl need not be installed: with it, the class is an `AgentLoopBase`
registered as "minisandbox" and returns an `AgentLoopOutput`; without it, a dict with the same fields."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from .client import RolloutClient
from .policy import OpenAIPolicy
from .tokens import tokenize_trajectory
from .trajectory import TrajectoryRunner

try:  # import-guarded: verl is optional
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase as _Base
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
except ImportError:  # pragma: no cover - where verl is absent
    _Base, AgentLoopOutput, register = object, None, None


class MinisandboxAgentLoop(_Base):  # type: ignore[misc]
    """Settings come from `configure(...)` (once per worker) or the environment: MINISANDBOX_URL,
    MINISANDBOX_API_KEY, OPENAI_BASE_URL, MINISANDBOX_POLICY_MODEL."""

    runner: TrajectoryRunner | None = None

    @classmethod
    def configure(cls, runner: TrajectoryRunner) -> None:
        cls.runner = runner

    def __init__(self, *args: Any, tokenizer: Any = None, **kwargs: Any):
        if _Base is not object:
            super().__init__(*args, tokenizer=tokenizer, **kwargs)
        self.tokenizer = tokenizer if tokenizer is not None else getattr(self, "tokenizer", None)

    def _runner(self) -> TrajectoryRunner:
        if type(self).runner is None:
            model = os.environ.get("MINISANDBOX_POLICY_MODEL", "policy")
            policy = OpenAIPolicy(os.environ.get("OPENAI_BASE_URL"), model)
            type(self).runner = TrajectoryRunner(RolloutClient(), policy)
        return type(self).runner  # type: ignore[return-value]

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        extra = kwargs.get("extra_info") or {}
        instance_id = kwargs.get("instance_id") or extra.get("instance_id")
        if not instance_id:
            raise ValueError("the row has no instance_id (top level or extra_info)")
        runner = self._runner()
        [t] = await asyncio.to_thread(runner.run_group, instance_id, 1)
        if self.tokenizer is None:
            raise ValueError("MinisandboxAgentLoop needs a tokenizer (verl passes its own; else give tokenizer=...)")
        tok = tokenize_trajectory(t, self.tokenizer)
        mask = tok["response_mask"] if t.status == "scored" else [0] * len(tok["response_mask"])
        fields = {
            "prompt_ids": tok["prompt_ids"],
            "response_ids": tok["response_ids"],
            "response_mask": mask,
            "reward_score": t.reward if t.status == "scored" else None,
            "num_turns": len(t.messages),
            "extra_fields": {
                "minisandbox": {
                    "status": t.status,
                    "reason": t.reason,
                    "flags": t.flags,
                    "failure": t.failure,
                    "trajectory_id": t.trajectory_id,
                    "exit_status": t.exit_status,
                    "timings": t.timings,
                }
            },
        }
        if AgentLoopOutput is None:
            return fields
        return AgentLoopOutput(
            **{k: v for k, v in fields.items() if k != "extra_fields"}, metrics={}, extra_fields=fields["extra_fields"]
        )


if register is not None:  # pragma: no cover - only where verl is installed (registers the class, returns it)
    register("minisandbox")(MinisandboxAgentLoop)
