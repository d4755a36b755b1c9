"""verl's agent loop over minisandbox rollouts: ``await run(sampling_params, **row)`` runs one trajectory (a rollout
group of one; GRPO's repetitions are separate calls in verl) and returns an ``AgentLoopOutput``.

Generation is verl's own: the ``server_manager`` verl gives the loop, with the ``sampling_params`` of the call
(temperature, top_p, top_k, logprobs), ``actor_rollout_ref.rollout.response_length`` as the response-length limit
and ``multi_turn.max_assistant_turns`` as the turn limit. The output holds exactly the sampled ids (mask 1, their
logprobs), the observation ids the loop appended (mask 0, logprob 0.0), cut to the response length. A trajectory
that is no grade (an infrastructure failure, a template problem) keeps its ids with mask all 0 and reward 0.0, and
says why in ``extra_fields["minisandbox"]``.

verl need not be installed: with it (checked against ``verl.experimental.agent_loop`` of verl 0.8.0.dev), the class is
an ``AgentLoopBase`` registered as "minisandbox" and returns an ``AgentLoopOutput``; without it, a dict with the same
fields. Without a server manager (or with ``use_trainer_generation=False``) the runner's own policy samples and the
text is re-tokenised with the loop's tokenizer.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from typing import Any

from .client import RolloutClient
from .generation import VerlGeneration
from .policy import OpenAIPolicy
from .token_policy import TokenPolicy
from .tokens import ChatTokenizer, TokenRecord, retokenize
from .trajectory import Episode, Trajectory, TrajectoryRunner

try:  # import-guarded: verl is optional
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase as _Base
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
except ImportError:  # pragma: no cover - where verl is absent
    _Base, AgentLoopOutput, register = object, None, None


def _get(config: Any, *path: str) -> Any:
    """A value of verl's (OmegaConf) config by attribute path; None where any step is missing."""
    for name in path:
        config = getattr(config, name, None) if config is not None else None
    return config


class MinisandboxAgentLoop(_Base):  # type: ignore[misc]
    """Settings come from `configure(...)` (once per worker) or the environment: MINISANDBOX_URL,
    MINISANDBOX_API_KEY (the sandbox server), and for the text fallback OPENAI_BASE_URL, MINISANDBOX_POLICY_MODEL.
    `use_prompts`: the row's ``raw_prompt`` opens the trajectory, as in verl's own loops (when it is empty, or
    False: the agent's templates over the task's problem statement)."""

    runner: TrajectoryRunner | None = None

    @classmethod
    def configure(cls, runner: TrajectoryRunner) -> None:
        cls.runner = runner

    def __init__(
        self,
        trainer_config: Any = None,
        server_manager: Any = None,
        tokenizer: Any = None,
        *args: Any,
        use_prompts: bool = True,
        use_trainer_generation: bool = True,
        **kwargs: Any,
    ):
        if _Base is not object:
            super().__init__(trainer_config, server_manager, tokenizer, *args, **kwargs)
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        # verl's data.apply_chat_template_kwargs (enable_thinking...), as its own loops render with them.
        self.template_kwargs = dict(getattr(self, "apply_chat_template_kwargs", None) or {})
        config = getattr(trainer_config, "config", trainer_config)
        self.response_length: int | None = _get(config, "actor_rollout_ref", "rollout", "response_length")
        self.max_turns: int | None = _get(config, "actor_rollout_ref", "rollout", "multi_turn", "max_assistant_turns")
        self.use_prompts = use_prompts
        self.use_trainer_generation = use_trainer_generation

    def _runner(self) -> TrajectoryRunner:
        if type(self).runner is None:
            model = os.environ.get("MINISANDBOX_POLICY_MODEL", "policy")
            policy = OpenAIPolicy(os.environ.get("OPENAI_BASE_URL"), model)
            type(self).runner = TrajectoryRunner(RolloutClient(), policy)
        return type(self).runner  # type: ignore[return-value]

    def _episode(self, runner: TrajectoryRunner, sampling_params: dict[str, Any], row: dict[str, Any]) -> Episode:
        policy = None
        if self.server_manager is not None and self.use_trainer_generation:
            if self.response_length is None:
                raise ValueError("verl's config has no actor_rollout_ref.rollout.response_length")
            policy = TokenPolicy(
                VerlGeneration(self.server_manager),
                self.tokenizer,
                sampling=sampling_params,
                max_response_tokens=self.response_length,
                template_kwargs=self.template_kwargs,
                loop=asyncio.get_running_loop(),
            )
        agent_config = replace(runner.agent_config, step_limit=self.max_turns) if self.max_turns else None
        prompt = list(row["raw_prompt"]) if self.use_prompts and row.get("raw_prompt") is not None else None
        return Episode(policy=policy, prompt=prompt, agent_config=agent_config)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        extra = kwargs.get("extra_info") or {}
        instance_id = kwargs.get("instance_id") or extra.get("instance_id")
        if not instance_id:
            raise ValueError("the row has no instance_id (top level or extra_info)")
        if self.tokenizer is None:
            raise ValueError("MinisandboxAgentLoop needs a tokenizer (verl passes its own; else give tokenizer=...)")
        runner = self._runner()
        episode = self._episode(runner, sampling_params, kwargs)
        [t] = await asyncio.to_thread(runner.run_group, instance_id, 1, episode=episode)
        return agent_loop_output(t, self.tokenizer, self.response_length)


def agent_loop_output(t: Trajectory, tokenizer: ChatTokenizer, response_length: int | None) -> Any:
    """verl's ``AgentLoopOutput`` of a trajectory (a dict of its fields where verl is absent)."""
    tok: TokenRecord = (t.tokens or retokenize(t, tokenizer)).truncated(response_length)
    usable = t.status == "scored" and tok.problem is None
    fields: dict[str, Any] = {
        "prompt_ids": tok.prompt_ids,
        "response_ids": tok.response_ids,
        "response_mask": tok.loss_mask if usable else [0] * len(tok.loss_mask),
        "response_logprobs": tok.logprobs,
        # 0.0, not None, for what is no grade: verl would otherwise score the decoded text with its reward function.
        "reward_score": float(t.reward or 0.0) if usable else 0.0,
        "num_turns": len(t.messages) - t.prompt_messages + 1,
        "metrics": {},
        "extra_fields": {
            "minisandbox": {
                "status": t.status,
                "usable": usable,
                "reason": t.reason,
                "flags": t.flags,
                "failure": t.failure,
                "trajectory_id": t.trajectory_id,
                "exit_status": t.exit_status,
                "stop_reason": tok.stop_reason,
                "tokens": tok.source,
                "problem": tok.problem,
                "timings": t.timings,
            }
        },
    }
    return fields if AgentLoopOutput is None else AgentLoopOutput(**fields)


if register is not None:  # pragma: no cover - only where verl is installed (registers the class, returns it)
    register("minisandbox")(MinisandboxAgentLoop)
