"""Rollouts for RL trainers over a minisandbox server: groups of N rollouts of a task, an agent loop (built-in or
mini-swe-agent's) against a policy — token-in/token-out through a trainer's own generation (verl's server manager,
SkyRL's inference engine client) or a vLLM / SGLang server, or text from any OpenAI-compatible endpoint — rewards
that say when they are infrastructure failures, trajectories as JSON lines, and SkyRL / verl adapters (those
frameworks are optional)."""

from .agent import AgentConfig, AgentResult, MinimalAgent, RolloutEnvironment
from .client import Group, Rollout, RolloutClient
from .generation import Sample, SGLangGeneration, SkyRLGeneration, VerlGeneration, VLLMCompletions
from .jsonl import TrajectoryWriter, read_trajectories
from .policy import Completion, OpenAIPolicy, PolicyError, ResponseLengthExceeded
from .token_policy import TokenPolicy, TokenSession
from .tokens import TemplateError, TokenRecord, retokenize, tokenize_trajectory
from .trajectory import Episode, Trajectory, TrajectoryRunner

__all__ = [
    "AgentConfig",
    "AgentResult",
    "Completion",
    "Episode",
    "Group",
    "MinimalAgent",
    "OpenAIPolicy",
    "PolicyError",
    "ResponseLengthExceeded",
    "Rollout",
    "RolloutClient",
    "RolloutEnvironment",
    "SGLangGeneration",
    "Sample",
    "SkyRLGeneration",
    "TemplateError",
    "TokenPolicy",
    "TokenRecord",
    "TokenSession",
    "Trajectory",
    "TrajectoryRunner",
    "TrajectoryWriter",
    "VLLMCompletions",
    "VerlGeneration",
    "read_trajectories",
    "retokenize",
    "tokenize_trajectory",
]
