"""``minisandbox.rl``: token ids and masks, trajectory records and their JSONL, the built-in agent loop on real
rollouts (a scripted policy in process: the policy is the only stand-in), the OpenAI-compatible policy client against
a local endpoint, and SkyRL's masking of infrastructure failures. Whole GRPO groups against a served policy, the verl
loop and mini-swe-agent's own agent are tested by test/rollout-http.test.ts."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from minisandbox import CheckpointNotFoundError, NotFoundError
from minisandbox.rl import (
    AgentConfig,
    Completion,
    MinimalAgent,
    OpenAIPolicy,
    PolicyError,
    RolloutClient,
    RolloutEnvironment,
    Trajectory,
    TrajectoryRunner,
    TrajectoryWriter,
    read_trajectories,
    tokenize_trajectory,
)
from minisandbox.rl.client import Group, Rollout
from minisandbox.rl.skyrl import MinisandboxGenerator, TrajectoryID, task_of

from .conftest import Server
from .loopback import JSONServer

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class CharTokenizer:
    """A prefix-stable chat template: one id per character of ``<|role|>content<|end|>``."""

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        *,
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> list[int]:
        text = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in conversation)
        return [ord(c) for c in text + ("<|assistant|>" if add_generation_prompt else "")]


class CountingTokenizer(CharTokenizer):
    """Not prefix-stable: the rendering starts with the number of messages."""

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        return [len(conversation), *super().apply_chat_template(conversation, **kwargs)]


def trajectory(messages: list[dict[str, Any]], **fields: Any) -> Trajectory:
    base: dict[str, Any] = {
        "trajectory_id": "t@0",
        "instance_id": "t",
        "repetition": 0,
        "group_id": "g",
        "rollout_id": "g.0",
        "status": "scored",
        "reward": 1.0,
        "resolved": True,
        "exit_status": "Submitted",
        "messages": messages,
        "turns": [],
    }
    return Trajectory(**{**base, **fields})


CHAT = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "task"},
    {"role": "assistant", "content": "one"},
    {"role": "user", "content": "obs"},
    {"role": "assistant", "content": "two"},
]


def test_token_ids_and_mask_cover_exactly_the_policy_s_turns() -> None:
    tok = tokenize_trajectory(trajectory(CHAT), CharTokenizer())
    assert "".join(map(chr, tok["prompt_ids"])) == "<|system|>sys<|end|><|user|>task<|end|><|assistant|>"
    text = "".join(map(chr, tok["response_ids"]))
    assert text == "one<|end|><|user|>obs<|end|><|assistant|>two<|end|>"
    own = "".join(chr(i) for i, m in zip(tok["response_ids"], tok["response_mask"]) if m)
    assert own == "one<|end|>two<|end|>", "the generation prompt after an observation is not the policy's"
    assert tok["truncated"] is False
    assert tokenize_trajectory(trajectory(CHAT).to_record(), CharTokenizer()) == tok, "a record works the same"
    cut = tokenize_trajectory(trajectory(CHAT), CharTokenizer(), max_response_tokens=5)
    assert cut["truncated"]
    assert len(cut["response_ids"]) == len(cut["response_mask"]) == 5


def test_a_template_that_is_not_prefix_stable_is_refused() -> None:
    with pytest.raises(ValueError, match="not prefix-stable at message 2"):
        tokenize_trajectory(trajectory(CHAT), CountingTokenizer())


def test_records_carry_the_loss_mask_and_round_trip_through_jsonl(tmp_path: Path) -> None:
    t = trajectory(CHAT)
    assert t.loss_mask == [0, 0, 1, 0, 1]
    path = tmp_path / "deep" / "traj.jsonl"
    with TrajectoryWriter(path) as w:
        threads = [threading.Thread(target=lambda i=i: w.write(trajectory(CHAT, repetition=i))) for i in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    with TrajectoryWriter(path) as again:
        again.write({"trajectory_id": "plain", "messages": []})
    path.write_text(path.read_text() + "\n\n")
    records = list(read_trajectories(path))
    assert sorted(r["repetition"] for r in records[:16]) == list(range(16)), "one whole line per record"
    assert records[0]["loss_mask"] == [0, 0, 1, 0, 1]
    assert records[-1] == {"trajectory_id": "plain", "messages": []}


class ScriptedPolicy:
    """Answers with the next command of its script, in mini-swe-agent's text format (None: no command block)."""

    def __init__(self, script: list[str | None]) -> None:
        self.script = list(script)
        self.seen: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], *, user: str | None = None) -> Completion:
        self.seen.append([dict(m) for m in messages])
        command = self.script.pop(0) if self.script else SUBMIT
        content = "THOUGHT: no command." if command is None else f"THOUGHT: next.\n\n```bash\n{command}\n```"
        return Completion(content, "stop", 1.0, {"completion_tokens": 1})


@pytest.fixture(scope="module")
def group(server: Server) -> Iterator[Group]:
    with RolloutClient(server.url, server.token).start_group(server.instance["instance_id"], 4) as g:
        yield g


def test_the_agent_runs_commands_in_the_rollout_and_submits(server: Server, group: Group) -> None:
    policy = ScriptedPolicy(["cd /testbed && git rev-parse HEAD", f"echo result > /tmp/r && {SUBMIT} && cat /tmp/r"])
    env = RolloutEnvironment(group.rollouts[0])
    res = MinimalAgent(policy, env, AgentConfig(step_limit=5)).run("Fix the bug.")
    assert (res.exit_status, res.submission) == ("Submitted", "result\n")
    assert [m["role"] for m in res.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert "Fix the bug." in res.messages[1]["content"]
    assert (
        res.messages[3]["content"]
        == f"<returncode>0</returncode>\n<output>\n{server.instance['base_commit']}\n</output>"
    )
    assert [t["returncode"] for t in res.turns] == [0, 0]
    assert all(t["exec_ms"] > 0 for t in res.turns)
    assert res.agent_ms > 0


def test_format_errors_step_limits_long_outputs_and_timeouts(group: Group) -> None:
    env = RolloutEnvironment(group.rollouts[1])
    res = MinimalAgent(ScriptedPolicy([None, None, None]), env).run("task")
    assert res.exit_status == "RepeatedFormatError"
    assert all(t.get("format_error") for t in res.turns)
    assert "found 0 actions" in res.messages[3]["content"]
    config = AgentConfig(step_limit=2, max_output_chars=100, command_timeout=1)
    res = MinimalAgent(ScriptedPolicy(["seq 1 1000", "echo started; sleep 30"]), env, config).run("task")
    assert res.exit_status == "LimitsExceeded"
    long, late = res.messages[3]["content"], res.messages[5]["content"]
    assert "<elided" in long
    assert long.startswith("<returncode>0</returncode>\n<output>\n1\n2\n"), "the head is kept"
    assert long.endswith("999\n1000\n</output>"), "the tail is kept"
    assert late.startswith("<exception>An error occurred while executing the command: Command 'echo started; sleep 30'")
    assert "<returncode>-1</returncode>" in late
    assert "started" in late
    assert res.turns[1]["returncode"] == -1


def test_the_wall_time_limit_bounds_the_run_and_its_commands(group: Group) -> None:
    env = RolloutEnvironment(group.rollouts[2])
    res = MinimalAgent(ScriptedPolicy(["sleep 30", "ls"]), env, AgentConfig(wall_time_limit=2, command_timeout=60)).run(
        "x"
    )
    assert res.exit_status == "TimeExceeded"
    assert len(res.turns) == 1, "no turn starts after the wall time"
    assert res.turns[0]["returncode"] == -1, "the command had what was left of the wall time, not its own 60 s"
    assert "<returncode>-1</returncode>" in res.messages[3]["content"]


def test_the_runner_refuses_an_unknown_agent(server: Server) -> None:
    with pytest.raises(ValueError, match="'minimal' or 'mini-swe-agent'"):
        TrajectoryRunner(RolloutClient(server.url, server.token), OpenAIPolicy("http://127.0.0.1:9/v1"), agent="x")


class Endpoint(JSONServer):
    """An OpenAI-compatible chat endpoint on loopback that answers with its queue of (status, body)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, Any]] = []
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        super().__init__(self._answer)
        self.url = f"{self.url}/v1"

    def _answer(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        self.requests.append((headers, body))
        return self.answers.pop(0)


def chat(content: Any, finish: str = "stop") -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish}], "usage": {}}


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.close()


def test_the_policy_sends_the_chat_and_retries_server_errors(endpoint: Endpoint) -> None:
    endpoint.answers = [(503, {"error": "busy"}), (200, chat("THOUGHT: hi", "length"))]
    policy = OpenAIPolicy(endpoint.url, "my-model", api_key="k", sampling={"temperature": 0.5}, retries=1)
    c = policy.complete([{"role": "user", "content": "hello", "extra": "ours"}], user="t@3")
    assert (c.content, c.finish_reason) == ("THOUGHT: hi", "length")
    headers, body = endpoint.requests[-1]
    assert headers["authorization"] == "Bearer k"
    assert body == {
        "model": "my-model",
        "messages": [{"role": "user", "content": "hello"}],
        "temperature": 0.5,
        "user": "t@3",
    }
    assert len(endpoint.requests) == 2


def test_policy_failures_are_policy_errors(endpoint: Endpoint) -> None:
    endpoint.answers = [(400, {"error": "bad request"})]
    with pytest.raises(PolicyError, match="answered 400"):
        OpenAIPolicy(endpoint.url, retries=3).complete([{"role": "user", "content": "x"}])
    assert len(endpoint.requests) == 1, "a client error is not retried"
    endpoint.answers = [(200, chat(None))]
    with pytest.raises(PolicyError, match="no text content"):
        OpenAIPolicy(endpoint.url, retries=0).complete([{"role": "user", "content": "x"}])
    with pytest.raises(PolicyError, match=r"127\.0\.0\.1:9"):
        OpenAIPolicy("http://127.0.0.1:9/v1", retries=0, timeout=2).complete([{"role": "user", "content": "x"}])


def test_skyrl_masks_infrastructure_failures_alone_or_with_their_group() -> None:
    ok = trajectory(CHAT, group_id="g1", reward=1.0)
    zero = trajectory(CHAT, group_id="g2", repetition=1, reward=0.0, resolved=False)
    lost = trajectory(CHAT, group_id="g2", repetition=2, status="infra_failure", reward=None, exit_status="SandboxLost")
    runner: Any = None
    masked = MinisandboxGenerator(runner, CharTokenizer())._output([ok, zero, lost])
    assert masked["rewards"] == [1.0, 0.0, 0.0]
    assert masked["stop_reasons"] == ["Submitted", "Submitted", "infra_failure"]
    assert [sum(m) > 0 for m in masked["loss_masks"]] == [True, True, False]
    assert masked["rollout_metrics"]["minisandbox/infra_failures"] == 1
    assert masked["trajectory_ids"][2] == TrajectoryID("t", 2)
    grouped = MinisandboxGenerator(runner, CharTokenizer(), on_infra_failure="mask_group")._output([ok, zero, lost])
    assert [sum(m) > 0 for m in grouped["loss_masks"]] == [True, False, False], "the whole GRPO group is masked"
    with pytest.raises(ValueError, match="mask_group"):
        MinisandboxGenerator(runner, CharTokenizer(), on_infra_failure="drop")


def test_skyrl_rows_name_their_instance() -> None:
    assert task_of(0, {"trajectory_ids": [{"instance_id": "a"}]}) == "a"
    assert task_of(1, {"env_extras": [{}, {"instance": {"instance_id": "b"}}]}) == "b"
    rows = {"trajectory_ids": [TrajectoryID("0", 0)], "env_extras": [{"instance_id": "c"}]}
    assert task_of(0, rows) == "c", "SkyRL's trajectory ids name the prompt's uid (a row index), not the task"
    with pytest.raises(ValueError, match="row 0: no instance id"):
        task_of(0, {"env_extras": [{}]})


def test_reset_goes_back_to_the_start_in_place(server: Server) -> None:
    with RolloutClient(server.url, server.token).start_group(server.instance["instance_id"], 1) as g:
        r = g.rollouts[0]
        assert r.exec("echo x > /testbed/new.txt && echo t > /tmp/t && (sleep 600 &)")["exit_code"] == 0
        answer = r.reset()
        assert (answer["rollout"]["id"], answer["rollout"]["sandbox_id"]) == (r.id, r.sandbox_id)
        assert answer["reset_ms"] > 0
        after = r.exec("ls /testbed/new.txt /tmp/t; pgrep -c sleep")
        assert after["stdout"] == "0\n", after
        assert r.reward()["reason"] == "empty_patch"


#: What the tests below compare states by: the workspace's changes, a file in /tmp, the agent's processes.
LOOK = "cd /testbed && git status --short; cat /tmp/t 2>/dev/null; pgrep -c sleep"


def uses_of(r: Rollout, checkpoint: str) -> list[Callable[[], object]]:
    """Every call that names a checkpoint: a reset to it, a fork from it, dropping it."""
    return [
        partial(r.reset, checkpoint=checkpoint),
        partial(r.fork, 2, checkpoint=checkpoint),
        partial(r.drop_checkpoint, checkpoint),
    ]


def test_reset_to_a_checkpoint_brings_back_its_files_not_its_processes(server: Server) -> None:
    with RolloutClient(server.url, server.token).start_group(server.instance["instance_id"], 1) as g:
        r = g.rollouts[0]
        assert r.exec("echo kept > /testbed/kept.txt && echo cp > /tmp/t && (sleep 600 &)")["exit_code"] == 0
        cp = r.checkpoint()
        assert r.exec(LOOK)["stdout"] == "?? kept.txt\ncp\n1\n", "the rollout goes on as it was"
        for _ in range(2):  # a checkpoint is not used up by a reset to it
            assert (
                r.exec("rm /testbed/kept.txt && echo later > /testbed/later.txt && echo later > /tmp/t")["exit_code"]
                == 0
            )
            answer = r.reset(checkpoint=cp)
            assert (answer["rollout"]["id"], answer["rollout"]["sandbox_id"]) == (r.id, r.sandbox_id)
            assert answer["reset_ms"] > 0
            assert r.exec(LOOK)["stdout"] == "?? kept.txt\ncp\n0\n", "the checkpoint's files; no process survives"
        assert r.state == "ready"


def test_a_fork_from_a_checkpoint_starts_in_the_checkpoint_s_state(server: Server) -> None:
    rc = RolloutClient(server.url, server.token)
    with rc.start_group(server.instance["instance_id"], 1) as g:
        r = g.rollouts[0]
        assert r.exec("echo kept > /testbed/kept.txt && echo cp > /tmp/t")["exit_code"] == 0
        cp = r.checkpoint()
        assert r.exec("echo later > /testbed/later.txt && echo later > /tmp/t")["exit_code"] == 0
        kids = r.fork(2, checkpoint=cp)
        assert [k.parent for k in kids] == [r.id, r.id]
        assert len({r.sandbox_id, *(k.sandbox_id for k in kids)}) == 3, "each child is a sandbox of its own"
        assert [k.exec(LOOK)["stdout"] for k in kids] == ["?? kept.txt\ncp\n0\n"] * 2
        assert r.exec(LOOK)["stdout"] == "?? kept.txt\n?? later.txt\nlater\n0\n", "the parent goes on"
        assert kids[0].exec("echo mine > /testbed/mine.txt")["exit_code"] == 0
        assert kids[1].exec(LOOK)["stdout"] == "?? kept.txt\ncp\n0\n", "the children diverge"
        assert len(rc.group(g.id).rollouts) == 3, "the children are rollouts of the group"


def test_a_dropped_checkpoint_is_a_checkpoint_not_found_error_and_changes_nothing(server: Server) -> None:
    rc = RolloutClient(server.url, server.token)
    with rc.start_group(server.instance["instance_id"], 1) as g:
        r = g.rollouts[0]
        assert r.exec("echo now > /tmp/t")["exit_code"] == 0
        cp = r.checkpoint()
        r.drop_checkpoint(cp)
        for use in uses_of(r, cp):
            with pytest.raises(CheckpointNotFoundError, match=f"checkpoint {re.escape(cp)} was dropped") as e:
                use()
            assert (e.value.code, e.value.status) == ("checkpoint_not_found", 404)
            assert isinstance(e.value, NotFoundError)
        assert r.exec(LOOK)["stdout"] == "now\n0\n", "a refused reset changes nothing"
        assert r.refresh()["state"] == "ready"
        assert len(rc.group(g.id).rollouts) == 1, "a refused fork makes no rollout"


def test_an_unknown_checkpoint_is_a_checkpoint_not_found_error(server: Server) -> None:
    with RolloutClient(server.url, server.token).start_group(server.instance["instance_id"], 1) as g:
        r = g.rollouts[0]
        for unknown in (f"{r.id}~99", "no-such-checkpoint"):
            for use in uses_of(r, unknown):
                with pytest.raises(CheckpointNotFoundError, match=f"no checkpoint {re.escape(unknown)} in this group"):
                    use()
        assert r.refresh()["state"] == "ready"
