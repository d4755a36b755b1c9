"""The trainer adapters against verl's and SkyRL's own current source (their git mirrors: ``$MINISANDBOX_MIRRORS``,
default ``.mirror`` beside the checkout; skipped, saying so, without them): the classes, fields and call signatures
``rl.verl``, ``rl.skyrl`` and ``rl.generation`` rely on, and that the stand-ins of test_tokens.py copy, are still
there. Neither framework can be installed here; their source is read, not imported."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

MIRRORS = Path(os.environ.get("MINISANDBOX_MIRRORS") or REPO.parent / ".mirror")


def source(repo: str, path: str) -> ast.Module:
    git_dir = MIRRORS / repo.replace("/", "+") / "repo"
    if not (git_dir / "HEAD").exists():
        pytest.skip(f"SKIPPED LOUDLY: no git mirror of {repo} under {MIRRORS} (set MINISANDBOX_MIRRORS)")
    text = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"HEAD:{path}"], capture_output=True, text=True, check=True
    ).stdout
    return ast.parse(text)


def cls(module: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == name)


def ordered_fields(module: ast.Module, name: str) -> list[str]:
    """A dataclass's, pydantic model's or TypedDict's annotated fields, in order."""
    body = cls(module, name).body
    return [n.target.id for n in body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def fields(module: ast.Module, name: str) -> set[str]:
    return set(ordered_fields(module, name))


def params(module: ast.Module, name: str, method: str) -> list[str]:
    """A method's parameters (positional, then keyword-only)."""
    kinds = (ast.AsyncFunctionDef, ast.FunctionDef)
    fn = next(n for n in cls(module, name).body if isinstance(n, kinds) and n.name == method)
    assert isinstance(fn, kinds)
    return [a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]]


def test_verl_s_agent_loop_interface_is_what_the_loop_uses() -> None:
    loop = source("volcengine/verl", "verl/experimental/agent_loop/agent_loop.py")
    out = {"prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score", "num_turns"}
    assert out | {"metrics", "extra_fields"} <= fields(loop, "AgentLoopOutput")
    assert params(loop, "AgentLoopBase", "__init__")[:7] == [
        "self", "trainer_config", "server_manager", "tokenizer", "processor", "dataset_cls", "dataset_config",
    ]  # fmt: skip
    assert params(loop, "AgentLoopBase", "run")[:2] == ["self", "sampling_params"]
    assert params(loop, "AsyncLLMServerManager", "generate")[:4] == [
        "self",
        "request_id",
        "prompt_ids",
        "sampling_params",
    ]
    replica = source("volcengine/verl", "verl/workers/rollout/replica.py")
    assert {"token_ids", "log_probs", "stop_reason"} <= fields(replica, "TokenOutput")


def test_skyrl_s_generator_and_engine_interfaces_are_what_the_generator_uses() -> None:
    base = source("NovaSky-AI/SkyRL", "skyrl/train/generators/base.py")
    assert ordered_fields(base, "TrajectoryID") == ["instance_id", "repetition_id"]
    out = {"prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "rollout_logprobs"}
    assert out | {"trajectory_ids", "rollout_metrics"} <= fields(base, "GeneratorOutput")
    assert {"prompts", "sampling_params", "trajectory_ids", "env_extras"} <= fields(base, "GeneratorInput")
    assert params(base, "GeneratorInterface", "generate") == ["self", "input_batch"]
    engines = source("NovaSky-AI/SkyRL", "skyrl/backends/skyrl_train/inference_servers/base.py")
    assert {"prompts", "prompt_token_ids", "sampling_params", "session_ids"} <= fields(engines, "InferenceEngineInput")
    assert {"response_ids", "response_logprobs", "stop_reasons"} <= fields(engines, "InferenceEngineOutput")
    assert params(engines, "InferenceEngineInterface", "generate") == ["self", "input_batch", "model"]
