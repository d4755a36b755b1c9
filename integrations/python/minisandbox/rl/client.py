"""Rollout groups and rollouts of a minisandbox server (``/rollouts/...``), over ``minisandbox.Client``.

    rc = RolloutClient()                                  # $MINISANDBOX_URL, token as minisandbox.Client finds it
    with rc.start_group("fixture__calc-1", n=8) as group:
        r = group.rollouts[0]
        r.exec("git apply fix.diff")
        outcome = r.reward()          # {"status": "scored" | "infra_failure", "reward", "resolved", ...}

For tree search over agent states: ``r.reset()`` takes a rollout back to its group's start in place,
``cp = r.checkpoint()`` keeps its state in the group, ``r.reset(checkpoint=cp)`` and ``r.fork(k, checkpoint=cp)``
start from it (any rollout of the group), ``r.drop_checkpoint(cp)`` lets it go.

A command on a lost rollout raises ``SandboxLostError`` (an infrastructure failure, never an exit code); a checkpoint
the group does not hold (dropped, or never made there) raises ``CheckpointNotFoundError``.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from ..client import Client, exec_body

__all__ = ["Group", "Rollout", "RolloutClient", "exec_body", "fork_body", "group_body", "reset_body", "reward_body"]

#: Seconds to wait for calls that may build an environment or run a task's tests.
LONG = 3600.0


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _given(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def group_body(
    instance_id: str, n: int, gold_check: bool | None = None, ttl_seconds: float | None = None
) -> dict[str, Any]:
    """``POST /rollouts/groups`` (the contract's ``CreateGroupRequest``)."""
    return _given(instance_id=instance_id, n=n, gold_check=gold_check, ttl_seconds=ttl_seconds)


def reward_body(mode: str | None = None, timeout: float | None = None, reward: str | None = None) -> dict[str, Any]:
    """``POST /rollouts/<id>/reward`` (``RewardRequest``)."""
    return _given(mode=mode, timeout_seconds=timeout, reward=reward)


def fork_body(k: int = 1, checkpoint: str | None = None) -> dict[str, Any]:
    """``POST /rollouts/<id>/fork`` (``ForkRequest``)."""
    return _given(k=k, checkpoint_id=checkpoint)


def reset_body(checkpoint: str | None = None) -> dict[str, Any]:
    """``POST /rollouts/<id>/reset`` (``ResetRequest``)."""
    return _given(checkpoint_id=checkpoint)


@dataclass
class Rollout:
    """One rollout: a sandbox of the group's task, addressed by ``id`` (``<group id>.<repetition>``)."""

    client: Client
    id: str
    group_id: str
    instance_id: str
    repetition: int
    trajectory_id: str
    parent: str | None = None
    sandbox_id: str | None = None
    from_pool: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def _path(self) -> str:
        return f"/rollouts/{_q(self.id)}"

    def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        merge_output: bool = False,
    ) -> dict[str, Any]:
        """One command in a fresh process (a string runs under ``bash -c``); ``timeout`` in seconds."""
        wait = None if timeout is None else timeout + 60
        return self.client.request(
            "POST", f"{self._path}/exec", exec_body(command, timeout, cwd, env, stdin, merge_output), timeout=wait
        )

    def read_file(self, path: str) -> bytes:
        return self.client.request("GET", f"{self._path}/files?path={_q(path)}", raw=True)

    def write_file(self, path: str, content: str) -> None:
        self.client.request("PUT", f"{self._path}/files", {"path": path, "content": content})

    def reward(
        self, *, mode: str | None = None, timeout: float | None = None, reward: str | None = None
    ) -> dict[str, Any]:
        """The outcome: ``status`` "scored" (``reward`` is real, 0 included) or "infra_failure" (``reward`` None,
        ``failure`` says why), ``reason`` (why, either way: "graded", "empty_patch", "patch_apply_failed",
        "eval_timeout", "sandbox_oom"... or the failure's kind), ``flags`` (test infrastructure the patch touches),
        ``resolved``, ``fail_to_pass`` / ``pass_to_pass`` counts, ``timings``, ``patch``."""
        return self.client.request(
            "POST", f"{self._path}/reward", reward_body(mode, timeout, reward), timeout=(timeout or 3600) + 120
        )

    def fork(self, k: int = 1, *, checkpoint: str | None = None) -> list[Rollout]:
        """``k`` children started from this rollout's current state, or from ``checkpoint`` (an id ``checkpoint()``
        gave on any rollout of the group): new rollouts of the same group, ``parent`` this one; this one goes on.
        Files are copied, processes are not. ``CheckpointNotFoundError`` when the group does not hold ``checkpoint``."""
        r = self.client.request("POST", f"{self._path}/fork", fork_body(k, checkpoint), timeout=LONG)
        return [_rollout(self.client, x) for x in r["rollouts"]]

    def reset(self, *, checkpoint: str | None = None) -> dict[str, Any]:
        """Back to the group's start state (or to ``checkpoint``'s), in place: the same rollout and sandbox, every
        process of the agent's gone and every write since undone, as if just started (no outcome, its time limit from
        now). Returns ``{"rollout": <its info>, "reset_ms": <the server's time>}``. ``CheckpointNotFoundError`` when
        the group does not hold ``checkpoint``: then nothing changed."""
        r = self.client.request("POST", f"{self._path}/reset", reset_body(checkpoint), timeout=LONG)
        self.info = r["rollout"]
        return r

    def checkpoint(self) -> str:
        """A checkpoint of this rollout's current state — its files (the workspace, ``/``, /tmp, home, /dev/shm), not
        its processes — kept by its group until ``drop_checkpoint`` or the group's end; its id, for
        ``reset(checkpoint=...)`` and ``fork(..., checkpoint=...)`` on any rollout of the group. Each holds a sandbox
        of the owner's (a group holds at most 64: ``LimitError`` beyond)."""
        r = self.client.request("POST", f"{self._path}/checkpoints", {}, timeout=LONG)
        return str(r["checkpoint_id"])

    def drop_checkpoint(self, checkpoint: str) -> None:
        """Let a checkpoint of the group go (its sandbox closes); using it afterwards raises
        ``CheckpointNotFoundError`` saying it was dropped."""
        self.client.request("DELETE", f"{self._path}/checkpoints/{_q(checkpoint)}")

    def refresh(self) -> dict[str, Any]:
        self.info = self.client.request("GET", self._path)
        return self.info

    @property
    def state(self) -> str:
        return self.info.get("state", "")

    def close(self) -> None:
        self.client.request("DELETE", self._path)


@dataclass
class Group:
    """A group of rollouts of one task (GRPO's N attempts), started together."""

    client: Client
    id: str
    instance_id: str
    env_key: str
    problem_statement: str
    timings: dict[str, Any]
    rollouts: list[Rollout]

    def rollout(self, repetition: int) -> Rollout:
        for r in self.rollouts:
            if r.repetition == repetition:
                return r
        raise KeyError(f"group {self.id} has no repetition {repetition}")

    def close(self) -> None:
        """Close every rollout of the group (forks included)."""
        self.client.request("DELETE", f"/rollouts/groups/{_q(self.id)}")

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RolloutClient:
    """The rollout API of one server: groups, rollouts, prewarm, gold pre-checks. ``url`` and ``token`` as for
    ``minisandbox.Client``; or give one as ``client``."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, client: Client | None = None, home: str | None = None
    ):
        self.client = client or Client(url, token, home=home)

    def start_group(
        self, instance_id: str, n: int, *, gold_check: bool | None = None, ttl_seconds: float | None = None
    ) -> Group:
        """``n`` rollouts of one task, started together (from the server's warm pool first)."""
        g = self.client.request(
            "POST", "/rollouts/groups", group_body(instance_id, n, gold_check, ttl_seconds), timeout=LONG
        )
        return _group(self.client, g)

    def group(self, group_id: str) -> Group:
        return _group(self.client, self.client.request("GET", f"/rollouts/groups/{_q(group_id)}"))

    def groups(self) -> list[dict[str, Any]]:
        return self.client.request("GET", "/rollouts/groups")["groups"]

    def rollout(self, rollout_id: str) -> Rollout:
        return _rollout(self.client, self.client.request("GET", f"/rollouts/{_q(rollout_id)}"))

    def prewarm(self, instance_ids: list[str], *, sandboxes: int | None = None) -> dict[str, Any]:
        """Get the next batch ready while this one trains: layers materialized and held, and with ``sandboxes``
        up to that many per task ready in the server's warm pool (``serve --warm-pool N``). ``InvalidInputError``
        when ``sandboxes`` is below 1 or the server has no pool: a prewarm never silently holds nothing."""
        body = _given(instance_ids=instance_ids, sandboxes=sandboxes)
        return self.client.request("POST", "/rollouts/prewarm", body, timeout=LONG)

    def gold_check(self, instance_id: str) -> dict[str, Any]:
        """The task's gold verdict (checked now unless stored); ``TaskInvalidError`` when its gold patch fails."""
        return self.client.request("POST", "/rollouts/gold-check", {"instance_id": instance_id}, timeout=LONG)


def _rollout(client: Client, r: dict[str, Any]) -> Rollout:
    return Rollout(
        client,
        r["id"],
        r["group_id"],
        r["instance_id"],
        r["repetition"],
        r["trajectory_id"],
        r.get("parent"),
        r.get("sandbox_id"),
        bool(r.get("from_pool")),
        r,
    )


def _group(client: Client, g: dict[str, Any]) -> Group:
    return Group(
        client,
        g["id"],
        g["instance_id"],
        g["env_key"],
        g.get("problem_statement", ""),
        g["timings"],
        [_rollout(client, r) for r in g["rollouts"]],
    )
