"""Token-in/token-out on real rollouts: trajectories sampled through verl's server manager, SkyRL's inference
engine client and a vLLM / SGLang server hold exactly the ids the policy sampled (mask 1, their logprobs), the
observation ids the loop appended between them (mask 0), and nothing re-rendered; sampling params, the
response-length and turn limits reach the policy; a malformed reply stays as an assistant turn; a chat template that
is not prefix-stable marks one trajectory, never the batch. The tokenizer is a real one built here
(tests/token_fixtures.py); the frameworks' doors follow their current interfaces."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from minisandbox.rl import AgentConfig, ResponseLengthExceeded, RolloutClient, Trajectory, TrajectoryRunner
from minisandbox.rl.agent import SYSTEM_TEMPLATE
from minisandbox.rl.generation import SGLangGeneration, VerlGeneration, VLLMCompletions
from minisandbox.rl.skyrl import MinisandboxGenerator, TrajectoryID
from minisandbox.rl.token_policy import TokenPolicy
from minisandbox.rl.tokens import TokenRecord, render, retokenize, tokenize_trajectory
from minisandbox.rl.trajectory import Episode
from minisandbox.rl.verl import MinisandboxAgentLoop
from transformers import PreTrainedTokenizerFast

from .conftest import Server
from .token_fixtures import (
    QWEN3_TEMPLATE,
    Call,
    InferenceServer,
    ScriptedSampler,
    SkyRLEngineClient,
    VerlServerManager,
    tokenizer,
)

LOOK = "<think>Where is the bug?</think>THOUGHT: look first.\n\n```bash\ngit status --short && ls\n```"
MALFORMED = "<think>No block this time.</think>THOUGHT: I will describe the fix in words only."
SUBMIT = "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"


def fix(patch: str) -> str:
    return f"<think>Apply it.</think>THOUGHT: the fix.\n\n```bash\ngit apply <<'MSB_PATCH'\n{patch}MSB_PATCH\n```"


@pytest.fixture(scope="module")
def qwen3() -> PreTrainedTokenizerFast:
    return tokenizer(QWEN3_TEMPLATE)


@pytest.fixture(scope="module")
def qwen25() -> PreTrainedTokenizerFast:
    return tokenizer()


@pytest.fixture(scope="module")
def runner(server: Server) -> Iterator[TrajectoryRunner]:
    """Rollouts of the real server, with no policy of its own: every call brings the trainer's."""
    config = AgentConfig(step_limit=6, command_timeout=60)
    with TrajectoryRunner(RolloutClient(server.url, server.token), agent_config=config, concurrency=2) as r:
        yield r


def assert_sampled_exactly(tok: TokenRecord, calls: list[Call], decode: Any = None) -> None:
    """The record is the policy's samples, token for token, with only the loop's own ids (mask 0) between them."""
    assert calls, "the policy was asked"
    lps = tok.logprobs
    assert lps is not None, "the policy's logprobs are kept"
    sampled: set[int] = set()
    for c in calls:
        at = len(c.prompt_ids) - len(tok.prompt_ids)
        assert c.prompt_ids == tok.prompt_ids + tok.response_ids[:at], "each turn sends the trajectory so far"
        span = range(at, at + len(c.ids))
        assert tok.response_ids[span.start : span.stop] == c.ids
        assert tok.loss_mask[span.start : span.stop] == [1] * len(c.ids)
        assert lps[span.start : span.stop] == c.logprobs
        sampled.update(span)
    assert len(tok.response_ids) == len(tok.loss_mask) == len(lps)
    between = [i for i in range(len(tok.response_ids)) if i not in sampled]
    assert [tok.loss_mask[i] for i in between] == [0] * len(between), "mask 1 on sampled ids only"
    assert [lps[i] for i in between] == [0.0] * len(between)


def verl_config(response_length: int, max_turns: int | None = None) -> Any:
    """verl's trainer config (``DictConfigWrap``) as far as the loop reads it."""
    multi_turn = SimpleNamespace(max_assistant_turns=max_turns)
    rollout = SimpleNamespace(response_length=response_length, multi_turn=multi_turn)
    return SimpleNamespace(config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout)))


def verl_run(
    runner: TrajectoryRunner, sampler: ScriptedSampler, instance_id: str, config: Any, sampling: dict[str, Any]
) -> tuple[dict[str, Any], set[int], set[int]]:
    """One ``run`` as verl's AgentLoopWorker makes it (hydra's keyword arguments; the row's fields as kwargs):
    (output, the loops the server manager ran on, the loop the worker ran on)."""
    manager = VerlServerManager(sampler)
    MinisandboxAgentLoop.configure(runner)
    loop = MinisandboxAgentLoop(
        trainer_config=config,
        server_manager=manager,
        tokenizer=sampler.tok,
        processor=None,
        dataset_cls=None,
        dataset_config=SimpleNamespace(config={}),
    )

    async def worker() -> tuple[Any, int]:
        out = await loop.run(dict(sampling), extra_info={"instance_id": instance_id}, raw_prompt=[], index=0)
        return out, id(asyncio.get_running_loop())

    out, worker_loop = asyncio.run(worker())
    return out, manager.loops, {worker_loop}


def record_of(out: dict[str, Any], stop_reason: str = "stop") -> TokenRecord:
    return TokenRecord(
        out["prompt_ids"], out["response_ids"], out["response_mask"], out["response_logprobs"], stop_reason, "sampled"
    )


def test_verl_samples_through_its_server_manager_token_for_token(
    server: Server, runner: TrajectoryRunner, qwen3: PreTrainedTokenizerFast
) -> None:
    sampler = ScriptedSampler(qwen3, {"*": [LOOK, MALFORMED, fix(server.instance["patch"]), SUBMIT]})
    sampling = {"temperature": 0.9, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    out, manager_loops, worker_loop = verl_run(
        runner, sampler, server.instance["instance_id"], verl_config(8192), sampling
    )
    info = out["extra_fields"]["minisandbox"]
    assert (out["reward_score"], info["status"], info["exit_status"]) == (1.0, "scored", "Submitted"), info
    assert (info["tokens"], info["problem"], info["stop_reason"]) == ("sampled", None, "stop")
    assert manager_loops == worker_loop, "verl's server manager is awaited on the worker's own event loop"
    assert_sampled_exactly(record_of(out), sampler.calls)
    # The sampling params reach the server manager; each turn may sample what is left of the response length.
    for c in sampler.calls:
        assert c.sampling == {"temperature": 0.9, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}
        assert c.max_tokens == 8192 - (len(c.prompt_ids) - len(out["prompt_ids"]))
    # The malformed reply is an assistant turn (mask 1) followed by the format error (mask 0).
    bad, after = sampler.calls[1], sampler.calls[2]
    start = len(bad.prompt_ids) - len(out["prompt_ids"])
    between = out["response_ids"][start + len(bad.ids) : len(after.prompt_ids) - len(out["prompt_ids"])]
    assert qwen3.decode(bad.ids, skip_special_tokens=True) == MALFORMED
    assert "found 0 actions" in qwen3.decode(between)
    assert out["num_turns"] == 1 + 4 + 3, "prompt, 4 replies, 3 observations"


def test_verl_response_length_and_turn_limits(
    server: Server, runner: TrajectoryRunner, qwen3: PreTrainedTokenizerFast
) -> None:
    iid = server.instance["instance_id"]
    sampler = ScriptedSampler(qwen3, {"*": [LOOK, SUBMIT]})
    out, _, _ = verl_run(runner, sampler, iid, verl_config(40), {"temperature": 1.0, "logprobs": True})
    info = out["extra_fields"]["minisandbox"]
    assert (len(out["response_ids"]), len(sampler.calls)) == (40, 1), "the reply is cut at the limit"
    assert (sampler.calls[0].max_tokens, info["stop_reason"]) == (40, "length")
    assert info["exit_status"] == "ResponseLengthExceeded"
    assert_sampled_exactly(record_of(out, "length"), sampler.calls)
    sampler = ScriptedSampler(qwen3, {"*": [LOOK, LOOK, LOOK]})
    out, _, _ = verl_run(runner, sampler, iid, verl_config(8192, max_turns=2), {"temperature": 1.0})
    info = out["extra_fields"]["minisandbox"]
    assert (info["exit_status"], len(sampler.calls)) == ("LimitsExceeded", 2), "max_assistant_turns is the limit"
    assert out["response_logprobs"] is None, "verl asked for no logprobs: none are made up"
    assert sum(out["response_mask"]) == sum(len(c.ids) for c in sampler.calls)


def test_skyrl_samples_through_its_inference_engine_client(
    server: Server, runner: TrajectoryRunner, qwen25: PreTrainedTokenizerFast
) -> None:
    iid = server.instance["instance_id"]
    scripts = {f"{iid}@0": [LOOK, SUBMIT], f"{iid}@1": [MALFORMED, LOOK, SUBMIT]}
    sampler = ScriptedSampler(qwen25, scripts)
    client = SkyRLEngineClient(sampler)
    generator = MinisandboxGenerator(runner, qwen25, inference_engine_client=client, max_response_tokens=4096)
    prompt = [{"role": "system", "content": SYSTEM_TEMPLATE}, {"role": "user", "content": "Fix calc's failing tests."}]
    ids = [TrajectoryID("0", 0), TrajectoryID("0", 1)]
    sampling = {"temperature": 0.7, "top_p": 1.0, "max_tokens": 1024, "logprobs": 0, "skip_special_tokens": True}
    batch = {
        "prompts": [prompt, prompt],
        "env_classes": ["minisandbox", "minisandbox"],
        "env_extras": [{"instance_id": iid}, {"instance_id": iid}],
        "sampling_params": sampling,
        "trajectory_ids": ids,
        "batch_metadata": None,
    }

    async def trainer() -> tuple[dict[str, Any], int]:
        return await generator.generate(batch), id(asyncio.get_running_loop())

    out, trainer_loop = asyncio.run(trainer())
    assert client.loops == {trainer_loop}, "the engine client is awaited on the trainer's own event loop"
    assert (out["rewards"], out["stop_reasons"]) == ([0.0, 0.0], ["Submitted", "Submitted"])
    assert out["trajectory_ids"] == ids, "SkyRL's own ids, as given"
    assert all(isinstance(t, TrajectoryID) for t in out["trajectory_ids"])
    assert out["rollout_logprobs"] is not None
    for row in range(2):
        assert out["prompt_token_ids"][row] == render(qwen25, prompt, True), "the row's prompt opens the trajectory"
        tok = TokenRecord(
            out["prompt_token_ids"][row], out["response_ids"][row], out["loss_masks"][row],
            out["rollout_logprobs"][row], "stop", "sampled",
        )  # fmt: skip
        assert_sampled_exactly(tok, sampler.of(f"{iid}@{row}"))
    for c in sampler.calls:
        assert (c.sampling["temperature"], c.sampling["logprobs"]) == (0.7, 0)
        assert c.max_tokens == 1024, "a turn asks for the batch's max_tokens while the response has room"


def served_run(
    runner: TrajectoryRunner, tok: PreTrainedTokenizerFast, task: str, scripts: dict[str, list[str]], n: int, kind: str
) -> tuple[list[Trajectory], ScriptedSampler, InferenceServer]:
    """`n` trajectories of the fixture task sampled by a server on 127.0.0.1: vLLM ("vllm", "vllm-legacy"), SGLang."""
    sampler = ScriptedSampler(tok, scripts)
    http = InferenceServer(sampler)
    http.legacy = kind == "vllm-legacy"
    generation: Any = SGLangGeneration(http.url) if kind == "sglang" else VLLMCompletions(f"{http.url}/v1", "policy")
    policy = TokenPolicy(generation, tok, sampling={"temperature": 1.0, "max_tokens": 512}, max_response_tokens=4096)
    try:
        return runner.run_group(task, n, episode=Episode(policy=policy)), sampler, http
    finally:
        http.close()


def check_trajectory(t: Trajectory, calls: list[Call], tok: PreTrainedTokenizerFast) -> None:
    """Sampled exactly; its text is the sampled ids decoded; re-tokenising it would have failed on this template."""
    assert t.tokens is not None
    assert (t.tokens.source, t.tokens.problem) == ("sampled", None)
    assert_sampled_exactly(t.tokens, calls)
    replies = [m["content"] for m in t.messages[t.prompt_messages :] if m["role"] == "assistant"]
    assert replies == [tok.decode(c.ids, skip_special_tokens=True) for c in calls], "the text is derived from the ids"
    again = retokenize(t, tok)
    assert "prefix-stable" in (again.problem or ""), "Qwen3's template rewrites the past: re-tokenising fails"


def test_vllm_and_sglang_servers_sample_token_for_token(
    server: Server, runner: TrajectoryRunner, qwen3: PreTrainedTokenizerFast
) -> None:
    iid = server.instance["instance_id"]
    scripts = {f"{iid}@0": [LOOK, MALFORMED, SUBMIT], f"{iid}@1": [LOOK, SUBMIT]}
    trajectories, sampler, http = served_run(runner, qwen3, iid, scripts, 2, "vllm")
    for t in trajectories:
        check_trajectory(t, sampler.of(t.trajectory_id), qwen3)
        assert (t.status, t.exit_status) == ("scored", "Submitted")
    roles = [m["role"] for m in trajectories[0].messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"], (
        "the malformed reply stays"
    )
    assert "found 0 actions" in trajectories[0].messages[5]["content"]
    path, body = http.requests[0]
    assert path == "/v1/completions"
    assert trajectories[0].tokens is not None
    assert body["prompt"] == trajectories[0].tokens.prompt_ids, "the prompt goes as token ids"
    assert (body["return_token_ids"], body["logprobs"], body["temperature"], body["max_tokens"]) == (True, 1, 1.0, 512)
    for kind in ("vllm-legacy", "sglang"):
        [t], sampler, http = served_run(runner, qwen3, iid, {"*": [LOOK, SUBMIT]}, 1, kind)
        check_trajectory(t, sampler.calls, qwen3)
        path, body = http.requests[0]
        limit = body["sampling_params"]["max_new_tokens"] if kind == "sglang" else body["max_tokens"]
        assert (path, limit) == ("/generate" if kind == "sglang" else "/v1/completions", 512)


def test_one_trajectory_s_template_problem_masks_that_trajectory_only(qwen3: PreTrainedTokenizerFast) -> None:
    def text_trajectory(repetition: int, reply: str) -> Trajectory:
        chat = [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "<returncode>0</returncode>"},
            {"role": "assistant", "content": "THOUGHT: done."},
        ]
        return Trajectory(
            f"t@{repetition}", "t", repetition, "g", f"g.{repetition}", "scored", 1.0, True, "Submitted", chat, []
        )

    batch = [text_trajectory(0, "<think>why</think>THOUGHT: plain."), text_trajectory(1, "THOUGHT: plain.")]
    runner: Any = None
    out = MinisandboxGenerator(runner, qwen3)._output(batch)
    assert out["stop_reasons"] == ["template_error", "Submitted"]
    assert out["rewards"] == [0.0, 1.0]
    assert [sum(m) > 0 for m in out["loss_masks"]] == [False, True]
    assert out["rollout_metrics"]["minisandbox/template_errors"] == 1
    assert out["loss_masks"][1] == tokenize_trajectory(batch[1], qwen3)["response_mask"], "re-tokenised, explicitly"
    grouped = MinisandboxGenerator(runner, qwen3, on_infra_failure="mask_group")._output(batch)
    assert [sum(m) for m in grouped["loss_masks"]] == [0, 0], "mask_group: its GRPO group goes with it"


def test_a_session_s_limits_per_turn_and_per_response(qwen25: PreTrainedTokenizerFast) -> None:
    sampler = ScriptedSampler(qwen25, {"*": [LOOK, LOOK, LOOK]})
    sampling = {"max_tokens": 8, "logprobs": True}
    policy = TokenPolicy(VerlGeneration(VerlServerManager(sampler)), qwen25, sampling=sampling, max_response_tokens=60)
    chat = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    s = policy.session("t@0")
    chat.append({"role": "assistant", "content": s.complete(chat).content})
    assert (len(s.response_ids), s.stop_reason) == (8, "length"), "a turn samples at most the sampling's max_tokens"
    chat.append({"role": "user", "content": "<returncode>0</returncode>\n<output>\ncalc.py tests\n</output>"})
    chat.append({"role": "assistant", "content": s.complete(chat).content})
    observation = s.loss_mask[8:].index(1)
    assert observation > 8, "an observation is not cut to a turn's max_tokens"
    with pytest.raises(ValueError, match="keep the policy's last reply"):
        s.complete([*chat[:-1], {"role": "assistant", "content": "rewritten"}])
    chat.append({"role": "user", "content": "x" * 400})
    with pytest.raises(ResponseLengthExceeded):
        s.complete(chat)
    record = s.record()
    assert (len(record.response_ids), record.stop_reason) == (60, "length"), "the observation is cut at the limit"
    assert record.loss_mask[-1] == 0
    assert_sampled_exactly(record, sampler.calls)
