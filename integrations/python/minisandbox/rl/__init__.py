"""Rollouts for RL trainers over a minisandbox server: groups of N rollouts of a task, an agent loop (built-in or
mini-swe-agent's) against an OpenAI-compatible policy, rewards that say when they are infrastructure failures,
trajectories as JSON lines, and thin SkyRL / verl adapters (those frameworks are optional)."""

from .agent import AgentConfig, AgentResult, MinimalAgent, RolloutEnvironment
from .client import Group, Rollout, RolloutClient
from .jsonl import TrajectoryWriter, read_trajectories
from .policy import Completion, OpenAIPolicy, PolicyError
from .tokens import tokenize_trajectory
from .trajectory import Trajectory, TrajectoryRunner

__all__ = [
    "AgentConfig",
    "AgentResult",
    "Completion",
    "Group",
    "MinimalAgent",
    "OpenAIPolicy",
    "PolicyError",
    "Rollout",
    "RolloutClient",
    "RolloutEnvironment",
    "Trajectory",
    "TrajectoryRunner",
    "TrajectoryWriter",
    "read_trajectories",
    "tokenize_trajectory",
]
