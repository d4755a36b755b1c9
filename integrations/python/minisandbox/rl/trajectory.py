"""One trajectory = an agent (the built-in loop or mini-swe-agent's) against a policy and a rollout, then its
reward; groups of them with a concurrency limit. Every trajectory says whether its reward is real ("scored") or
an infrastructure failure ("infra_failure": the policy endpoint failed, the sandbox was killed from outside...), so
trainers drop or mask instead of learning from noise, and why (``reason``), with the test infrastructure its patch
touches (``flags``). Who ended a lost sandbox is the server's to say: a rollout lost by the agent's own doing (its
memory use, its time limit) is asked for its reward like any other and comes back a scored 0."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import MinisandboxError, SandboxLostError
from .agent import AgentConfig, AgentResult, MinimalAgent, RolloutEnvironment
from .client import Group, Rollout, RolloutClient
from .policy import OpenAIPolicy, PolicyError


@dataclass
class Trajectory:
    trajectory_id: str
    instance_id: str
    repetition: int
    group_id: str
    rollout_id: str
    status: str
    reward: float | None
    resolved: bool
    exit_status: str
    messages: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    #: The first `prompt_messages` messages are the prompt (system + task); the rest is the response.
    prompt_messages: int = 2
    parent: str | None = None
    failure: dict[str, Any] | None = None
    #: Why: the outcome's reason ("graded", "empty_patch", "patch_apply_failed", "eval_timeout", "sandbox_oom"...)
    #: or, for an infrastructure failure, its kind.
    reason: str = ""
    #: Test infrastructure the graded patch touches (conftest.py, pytest settings...): penalise or filter.
    flags: list[dict[str, Any]] = field(default_factory=list)
    outcome: dict[str, Any] | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    agent: str = "minimal"

    @property
    def loss_mask(self) -> list[int]:
        """Per message: 1 for the policy's own turns (assistant), 0 for prompt and observations."""
        return [int(i >= self.prompt_messages and m["role"] == "assistant") for i, m in enumerate(self.messages)]

    def to_record(self) -> dict[str, Any]:
        return {**asdict(self), "loss_mask": self.loss_mask}


def outcome_reason(outcome: dict[str, Any]) -> str:
    """An outcome's reason; servers that predate reasons say only the status (and the failure's kind)."""
    if outcome.get("reason"):
        return outcome["reason"]
    if outcome["status"] != "scored":
        return (outcome.get("failure") or {}).get("kind", "eval_error")
    return "empty_patch" if outcome.get("patch") == "" else "graded"


class TrajectoryRunner:
    """Runs trajectories on one server with one policy, at most `concurrency` at a time (all groups together)."""

    def __init__(
        self,
        client: RolloutClient,
        policy: OpenAIPolicy,
        *,
        agent: str = "minimal",
        agent_config: AgentConfig | None = None,
        mini_config: dict[str, Any] | None = None,
        concurrency: int = 8,
        reward_mode: str | None = None,
        reward_timeout: float | None = None,
        writer: Any = None,
    ):
        if agent not in ("minimal", "mini-swe-agent"):
            raise ValueError(f"agent must be 'minimal' or 'mini-swe-agent', got {agent!r}")
        self.client = client
        self.policy = policy
        self.agent = agent
        self.agent_config = agent_config or AgentConfig()
        self.mini_config = mini_config
        self.reward_mode = reward_mode
        self.reward_timeout = reward_timeout
        self.writer = writer
        self._slots = threading.BoundedSemaphore(concurrency)
        self._pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="trajectory")

    def run_group(
        self, instance_id: str, n: int, *, task: str | None = None, gold_check: bool | None = None, close: bool = True
    ) -> list[Trajectory]:
        """Start a group of `n` rollouts of one task, run one trajectory in each, reward them, close the group."""
        started = time.perf_counter()
        group = self.client.start_group(instance_id, n, gold_check=gold_check)
        try:
            text = task if task is not None else group.problem_statement
            futures = [self._pool.submit(self.run_rollout, r, text, group=group) for r in group.rollouts]
            out = [f.result() for f in futures]
        finally:
            if close:
                group.close()
        for t in out:
            t.timings["group_ready_ms"] = group.timings.get("ready_ms")
            t.timings["group_wall_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return out

    def run_rollout(self, rollout: Rollout, task: str, *, group: Group | None = None) -> Trajectory:
        """One trajectory in an existing rollout (the rollout stays open)."""
        with self._slots:
            t = self._trajectory(rollout, task)
        if self.writer is not None:
            self.writer.write(t)
        return t

    def _trajectory(self, rollout: Rollout, task: str) -> Trajectory:
        started = time.perf_counter()
        started_at = time.time()
        res = AgentResult([], [], "Running")
        failure: dict[str, Any] | None = None
        try:
            self._agent(rollout, task, res)
        except SandboxLostError:
            res.exit_status = "SandboxLost"  # the reward says whose doing it was
        except PolicyError as e:
            res.exit_status, failure = "PolicyError", {"kind": "policy_error", "message": str(e)}
        except MinisandboxError as e:
            res.exit_status, failure = "SandboxError", {"kind": "sandbox_failed", "message": str(e)}
        outcome: dict[str, Any] | None = None
        r0 = time.perf_counter()
        if failure is None:
            try:
                outcome = rollout.reward(mode=self.reward_mode, timeout=self.reward_timeout)
            except MinisandboxError as e:
                failure = {"kind": "eval_error", "message": str(e)}
        reward_ms = (time.perf_counter() - r0) * 1000
        if outcome is not None and outcome["status"] != "scored":
            failure = outcome.get("failure") or {"kind": "eval_error", "message": "no reward"}
        scored = outcome if failure is None else None
        return Trajectory(
            trajectory_id=rollout.trajectory_id,
            instance_id=rollout.instance_id,
            repetition=rollout.repetition,
            group_id=rollout.group_id,
            rollout_id=rollout.id,
            parent=rollout.parent,
            status="scored" if scored is not None else "infra_failure",
            reward=scored["reward"] if scored is not None else None,
            resolved=bool(scored is not None and scored["resolved"]),
            exit_status=res.exit_status,
            messages=res.messages,
            turns=res.turns,
            failure=failure,
            reason=outcome_reason(scored) if scored is not None else (failure or {}).get("kind", ""),
            flags=list(outcome.get("flags") or []) if outcome is not None else [],
            outcome=outcome,
            timings={
                "start_ms": rollout.info.get("start_ms"),
                "agent_ms": res.agent_ms,
                "reward_ms": round(reward_ms, 1),
                "total_ms": round((time.perf_counter() - started) * 1000, 1),
                "started_at": started_at,
                "ended_at": time.time(),
            },
            agent=self.agent,
        )

    def _agent(self, rollout: Rollout, task: str, res: AgentResult) -> None:
        if self.agent == "mini-swe-agent":
            from .mini import run_mini_agent

            c = self.agent_config
            run_mini_agent(
                self.policy,
                rollout,
                task,
                config=self.mini_config,
                user=rollout.trajectory_id,
                step_limit=c.step_limit,
                command_timeout=c.command_timeout,
                result=res,
            )
        else:
            env = RolloutEnvironment(rollout)
            MinimalAgent(self.policy, env, self.agent_config, user=rollout.trajectory_id).run(task, res)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> TrajectoryRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
