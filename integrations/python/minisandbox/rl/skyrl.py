"""A SkyRL-style generator over minisandbox rollouts: `await generate(input_batch)` runs one trajectory per row
(rows of one task run as one rollout group), and returns prompt token ids, response ids, rewards, loss masks and
stop reasons. Infrastructure failures are masked (loss mask all 0, reward 0), alone or with their whole GRPO group.
SkyRL need not be installed: with it, the class is a `GeneratorInterface`."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from .tokens import ChatTokenizer, tokenize_trajectory
from .trajectory import Trajectory, TrajectoryRunner

try:  # import-guarded: SkyRL is optional
    from skyrl_train.generators.base import GeneratorInterface as _Base
except ImportError:  # pragma: no cover - where SkyRL is absent
    _Base = object


def _instance_id(row: int, batch: dict[str, Any]) -> str:
    ids = batch.get("trajectory_ids")
    if ids:
        tid = ids[row]
        return tid.instance_id if hasattr(tid, "instance_id") else tid["instance_id"]
    extra = (batch.get("env_extras") or [{}])[row] or {}
    inst = extra.get("instance") or {}
    found = extra.get("instance_id") or inst.get("instance_id")
    if not found:
        raise ValueError(f"row {row}: no instance id (trajectory_ids, env_extras[].instance_id or .instance)")
    return found


class MinisandboxGenerator(_Base):  # type: ignore[misc]
    """`generate(input_batch) -> output` with SkyRL's field names."""

    def __init__(
        self,
        runner: TrajectoryRunner,
        tokenizer: ChatTokenizer,
        *,
        on_infra_failure: str = "mask",
        max_response_tokens: int | None = None,
    ):
        if on_infra_failure not in ("mask", "mask_group"):
            raise ValueError("on_infra_failure must be 'mask' or 'mask_group'")
        self.runner = runner
        self.tokenizer = tokenizer
        self.on_infra_failure = on_infra_failure
        self.max_response_tokens = max_response_tokens

    async def generate(self, input_batch: dict[str, Any]) -> dict[str, Any]:
        rows = len(input_batch["prompts"])
        groups: OrderedDict[str, list[int]] = OrderedDict()
        for row in range(rows):
            groups.setdefault(_instance_id(row, input_batch), []).append(row)
        done = await asyncio.gather(
            *(asyncio.to_thread(self.runner.run_group, iid, len(members)) for iid, members in groups.items())
        )
        by_row: dict[int, Trajectory] = {}
        for members, trajectories in zip(groups.values(), done):
            for row, t in zip(members, trajectories):
                by_row[row] = t
        return self._output([by_row[r] for r in range(rows)])

    def _output(self, trajectories: list[Trajectory]) -> dict[str, Any]:
        failed_groups = {t.group_id for t in trajectories if t.status != "scored"}
        out: dict[str, list[Any]] = {
            k: []
            for k in ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "trajectory_ids")
        }
        for t in trajectories:
            tok = tokenize_trajectory(t, self.tokenizer, max_response_tokens=self.max_response_tokens)
            masked = t.status != "scored" or (self.on_infra_failure == "mask_group" and t.group_id in failed_groups)
            out["prompt_token_ids"].append(tok["prompt_ids"])
            out["response_ids"].append(tok["response_ids"])
            out["loss_masks"].append([0] * len(tok["response_mask"]) if masked else tok["response_mask"])
            out["rewards"].append(0.0 if masked or t.reward is None else float(t.reward))
            out["stop_reasons"].append(
                "infra_failure" if t.status != "scored" else "length" if tok["truncated"] else t.exit_status
            )
            out["trajectory_ids"].append({"instance_id": t.instance_id, "repetition_id": t.repetition})
        scored = [t for t in trajectories if t.status == "scored"]
        out["rollout_metrics"] = {  # type: ignore[assignment]
            "minisandbox/infra_failures": len(trajectories) - len(scored),
            "minisandbox/flagged": sum(bool(t.flags) for t in scored),
            "minisandbox/resolved": sum(t.resolved for t in scored),
            "minisandbox/mean_reward": sum(t.reward or 0 for t in scored) / len(scored) if scored else 0.0,
        }
        out["rollout_logprobs"] = None  # type: ignore[assignment]
        return out
