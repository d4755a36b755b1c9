"""SkyRL's generator over minisandbox rollouts: ``await generate(input_batch)`` runs one trajectory per row (rows of
one prompt — one ``TrajectoryID.instance_id`` — run as one rollout group) and returns a ``GeneratorOutput``.

Generation is SkyRL's own when an inference engine client is given: the batch's ``sampling_params`` (vLLM's, as
SkyRL's trainer builds them: ``max_tokens`` per turn, ``logprobs``...) go to ``client.generate`` with the
trajectory's ids so far, and `max_response_tokens` (SkyRL's ``max_input_length`` minus the prompt, say) bounds each
trajectory's response. The output holds exactly the sampled ids (mask 1; ``rollout_logprobs`` theirs when
``logprobs`` was asked for) and the observation ids the loop appended (mask 0, logprob 0.0); ``stop_reasons`` says
"length" where the limit cut a trajectory. Trajectories that are no grade (infrastructure failures, template
problems) are masked (loss mask all 0, reward 0), alone or with their whole GRPO group.

Without a client, the runner's own policy samples and the text is re-tokenised per trajectory.

SkyRL need not be installed: with it, the class is a ``GeneratorInterface`` (``skyrl.train.generators.base``; before
the package was reorganised, ``skyrl_train.generators.base``; checked against SkyRL 0.3.0) and trajectory ids are its
``TrajectoryID``; without it, a dataclass with the same fields.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from .generation import SkyRLGeneration
from .token_policy import TokenPolicy
from .tokens import ChatTokenizer, TokenRecord, retokenize
from .trajectory import Episode, Trajectory, TrajectoryRunner

__all__ = ["MinisandboxGenerator", "TrajectoryID", "task_of"]

try:  # import-guarded: SkyRL is optional (current layout first, then the one before its reorganisation)
    from skyrl.train.generators.base import GeneratorInterface as _Base
    from skyrl.train.generators.base import TrajectoryID
except ImportError:  # pragma: no cover - where SkyRL is absent or older
    try:
        from skyrl_train.generators.base import GeneratorInterface as _Base
        from skyrl_train.generators.base import TrajectoryID
    except ImportError:
        _Base = object

        @dataclass
        class TrajectoryID:  # type: ignore[no-redef]
            """SkyRL's trajectory id: the prompt's uid and the repetition (GRPO index)."""

            instance_id: str
            repetition_id: int

            def to_string(self) -> str:
                return f"{self.instance_id}_{self.repetition_id}"


def _field(value: Any, name: str) -> Any:
    return getattr(value, name) if hasattr(value, name) else value[name]


def task_of(row: int, batch: dict[str, Any]) -> str:
    """The SWE task of a row: ``env_extras[row].instance_id`` or ``.instance.instance_id`` (SkyRL's mini-swe-agent
    rows), else its trajectory id's ``instance_id`` (in SkyRL that is the prompt's uid, which may be the task)."""
    extra = (batch.get("env_extras") or [None] * (row + 1))[row] or {}
    found = extra.get("instance_id") or (extra.get("instance") or {}).get("instance_id")
    ids = batch.get("trajectory_ids")
    if not found and ids:
        found = _field(ids[row], "instance_id")
    if not found:
        raise ValueError(f"row {row}: no instance id (env_extras[].instance_id or .instance, or trajectory_ids)")
    return str(found)


def _group_of(row: int, batch: dict[str, Any]) -> tuple[str, str]:
    """(GRPO group, task): rows with one trajectory-id instance (prompt uid) are one group."""
    ids = batch.get("trajectory_ids")
    task = task_of(row, batch)
    return (str(_field(ids[row], "instance_id")) if ids else task, task)


class MinisandboxGenerator(_Base):  # type: ignore[misc]
    """`generate(input_batch) -> GeneratorOutput`. From SkyRL's generator config: `max_turns`
    (``generator.max_turns``), `chat_template_kwargs` (``generator.chat_template_kwargs``), `max_response_tokens`.
    `use_prompts`: a row's prompt opens its trajectory, as in SkyRL's own generators (when it is empty, or False: the
    agent's templates over the task's problem statement)."""

    def __init__(
        self,
        runner: TrajectoryRunner,
        tokenizer: ChatTokenizer,
        *,
        inference_engine_client: Any = None,
        model: str | None = None,
        max_response_tokens: int | None = None,
        max_turns: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        on_infra_failure: str = "mask",
        use_prompts: bool = True,
    ):
        if on_infra_failure not in ("mask", "mask_group"):
            raise ValueError("on_infra_failure must be 'mask' or 'mask_group'")
        self.runner = runner
        self.tokenizer = tokenizer
        self.generation = (
            None if inference_engine_client is None else SkyRLGeneration(inference_engine_client, model=model)
        )
        self.on_infra_failure = on_infra_failure
        self.max_response_tokens = max_response_tokens
        self.agent_config = replace(runner.agent_config, step_limit=max_turns) if max_turns else None
        self.template_kwargs = chat_template_kwargs
        self.use_prompts = use_prompts

    def _policy(self, sampling: dict[str, Any] | None) -> TokenPolicy | None:
        if self.generation is None:
            return None
        return TokenPolicy(
            self.generation,
            self.tokenizer,
            sampling=sampling,
            max_response_tokens=self.max_response_tokens,
            template_kwargs=self.template_kwargs,
            loop=asyncio.get_running_loop(),
        )

    async def generate(self, input_batch: dict[str, Any]) -> dict[str, Any]:
        rows = len(input_batch["prompts"])
        policy = self._policy(input_batch.get("sampling_params"))
        groups: OrderedDict[tuple[str, str], list[int]] = OrderedDict()
        for row in range(rows):
            groups.setdefault(_group_of(row, input_batch), []).append(row)
        runs = []
        for (_, task), members in groups.items():
            prompt = list(input_batch["prompts"][members[0]]) if self.use_prompts else None
            episode = Episode(policy=policy, prompt=prompt or None, agent_config=self.agent_config)
            runs.append(asyncio.to_thread(self.runner.run_group, task, len(members), episode=episode))
        done = await asyncio.gather(*runs)
        by_row: dict[int, Trajectory] = {}
        for members, trajectories in zip(groups.values(), done):
            by_row.update(zip(members, trajectories))
        ids = input_batch.get("trajectory_ids")
        return self._output([by_row[r] for r in range(rows)], ids)

    def _output(self, trajectories: list[Trajectory], ids: list[Any] | None = None) -> dict[str, Any]:
        records = [self._tokens(t) for t in trajectories]
        unusable = [t.status != "scored" or tok.problem is not None for t, tok in zip(trajectories, records)]
        failed_groups = {t.group_id for t, bad in zip(trajectories, unusable) if bad}
        out: dict[str, Any] = {
            k: [] for k in ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons")
        }
        for t, tok, bad in zip(trajectories, records, unusable):
            masked = bad or (self.on_infra_failure == "mask_group" and t.group_id in failed_groups)
            out["prompt_token_ids"].append(tok.prompt_ids)
            out["response_ids"].append(tok.response_ids)
            out["loss_masks"].append([0] * len(tok.loss_mask) if masked else tok.loss_mask)
            out["rewards"].append(0.0 if masked or t.reward is None else float(t.reward))
            out["stop_reasons"].append(_stop_reason(t, tok))
        out["trajectory_ids"] = ids or [TrajectoryID(t.instance_id, t.repetition) for t in trajectories]
        logprobs = [tok.logprobs for tok in records]
        out["rollout_logprobs"] = logprobs if all(lp is not None for lp in logprobs) and records else None
        out["rollout_metrics"] = _metrics(trajectories, records)
        return out

    def _tokens(self, t: Trajectory) -> TokenRecord:
        return (t.tokens or retokenize(t, self.tokenizer)).truncated(self.max_response_tokens)


def _stop_reason(t: Trajectory, tok: TokenRecord) -> str:
    if t.status != "scored":
        return "infra_failure"
    if tok.problem is not None:
        return "template_error"
    return "length" if tok.stop_reason == "length" else t.exit_status


def _metrics(trajectories: list[Trajectory], records: list[TokenRecord]) -> dict[str, Any]:
    scored = [t for t in trajectories if t.status == "scored"]
    return {
        "minisandbox/infra_failures": len(trajectories) - len(scored),
        "minisandbox/template_errors": sum(r.problem is not None for r in records),
        "minisandbox/flagged": sum(bool(t.flags) for t in scored),
        "minisandbox/resolved": sum(t.resolved for t in scored),
        "minisandbox/mean_reward": sum(t.reward or 0 for t in scored) / len(scored) if scored else 0.0,
    }
