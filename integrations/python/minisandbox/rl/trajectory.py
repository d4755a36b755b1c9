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
from typing import Any, Protocol

from ..errors import MinisandboxError, SandboxLostError
from .agent import AgentConfig, AgentResult, MinimalAgent, RolloutEnvironment
from .client import Group, Rollout, RolloutClient
from .policy import PolicyError, Session
from .tokens import TemplateError, TokenRecord


class TrajectoryPolicy(Protocol):
    """`OpenAIPolicy` (text) or `TokenPolicy` (token-in/token-out): a session per trajectory."""

    def session(self, trajectory_id: str) -> Session: ...


@dataclass
class Episode:
    """What one call runs its trajectories with, when not the runner's own: the policy (a trainer's generation with
    its sampling params and limits), the opening messages (a dataset's prompt), the agent's limits."""

    policy: TrajectoryPolicy | None = None
    prompt: list[dict[str, Any]] | None = None
    agent_config: AgentConfig | None = None


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
    #: The ids the policy sampled, the observation ids between them, the loss mask and logprobs (token-in/token-out);
    #: None when the policy was a text endpoint (then `retokenize` renders them, explicitly).
    tokens: TokenRecord | None = None

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
    """Runs trajectories on one server, at most `concurrency` at a time (all groups together), with its policy or
    the one each call's `Episode` brings (a trainer's generation: then the runner needs none)."""

    def __init__(
        self,
        client: RolloutClient,
        policy: TrajectoryPolicy | None = None,
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
        self,
        instance_id: str,
        n: int,
        *,
        task: str | None = None,
        gold_check: bool | None = None,
        close: bool = True,
        episode: Episode | None = None,
    ) -> list[Trajectory]:
        """Start a group of `n` rollouts of one task, run one trajectory in each, reward them, close the group."""
        self._policy(episode)
        started = time.perf_counter()
        group = self.client.start_group(instance_id, n, gold_check=gold_check)
        try:
            text = task if task is not None else group.problem_statement
            futures = [self._pool.submit(self.run_rollout, r, text, episode=episode) for r in group.rollouts]
            out = [f.result() for f in futures]
        finally:
            if close:
                group.close()
        for t in out:
            t.timings["group_ready_ms"] = group.timings.get("ready_ms")
            t.timings["group_wall_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return out

    def run_rollout(
        self, rollout: Rollout, task: str, *, group: Group | None = None, episode: Episode | None = None
    ) -> Trajectory:
        """One trajectory in an existing rollout (the rollout stays open)."""
        with self._slots:
            t = self._trajectory(rollout, task, episode or Episode())
        if self.writer is not None:
            self.writer.write(t)
        return t

    def _trajectory(self, rollout: Rollout, task: str, episode: Episode) -> Trajectory:
        started = time.perf_counter()
        started_at = time.time()
        res = AgentResult([], [], "Running")
        session = self._policy(episode).session(rollout.trajectory_id)
        failure = self._run_agent(rollout, task, episode, session, res)
        r0 = time.perf_counter()
        outcome, failure = self._reward(rollout) if failure is None else (None, failure)
        reward_ms = (time.perf_counter() - r0) * 1000
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
            prompt_messages=len(episode.prompt) if episode.prompt and self.agent == "minimal" else 2,
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
            tokens=session.record(),
        )

    def _policy(self, episode: Episode | None) -> TrajectoryPolicy:
        policy = (episode.policy if episode else None) or self.policy
        if policy is None:
            raise ValueError("no policy to sample with: give the TrajectoryRunner one, or the call an Episode(policy=)")
        return policy

    def _run_agent(
        self, rollout: Rollout, task: str, episode: Episode, session: Session, res: AgentResult
    ) -> dict[str, Any] | None:
        """The agent's run; the infrastructure failure that ended it, if one did."""
        try:
            self._agent(rollout, task, episode, session, res)
        except SandboxLostError:
            res.exit_status = "SandboxLost"  # the reward says whose doing it was
        except TemplateError:
            res.exit_status = "TemplateError"  # the session's record says why; the reward is still the policy's
        except PolicyError as e:
            res.exit_status = "PolicyError"
            return {"kind": "policy_error", "message": str(e)}
        except MinisandboxError as e:
            res.exit_status = "SandboxError"
            return {"kind": "sandbox_failed", "message": str(e)}
        return None

    def _reward(self, rollout: Rollout) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(outcome, failure): a reward that is not a grade is a failure."""
        try:
            outcome = rollout.reward(mode=self.reward_mode, timeout=self.reward_timeout)
        except MinisandboxError as e:
            return None, {"kind": "eval_error", "message": str(e)}
        if outcome["status"] != "scored":
            return outcome, outcome.get("failure") or {"kind": "eval_error", "message": "no reward"}
        return outcome, None

    def _agent(self, rollout: Rollout, task: str, episode: Episode, session: Session, res: AgentResult) -> None:
        c = episode.agent_config or self.agent_config
        if self.agent == "mini-swe-agent":
            from .mini import run_mini_agent

            run_mini_agent(
                session,
                rollout,
                task,
                config=self.mini_config,
                user=rollout.trajectory_id,
                step_limit=c.step_limit,
                command_timeout=c.command_timeout,
                wall_time_limit=c.wall_time_limit,
                result=res,
            )
        else:
            env = RolloutEnvironment(rollout)
            MinimalAgent(session, env, c, user=rollout.trajectory_id).run(task, res, prompt=episode.prompt)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> TrajectoryRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
