"""Running many items over the fleet: each attempt is one Ray task pinned to the node placement chose; what fails
because of its node runs again elsewhere; every item ends with exactly one result or one error.

Ray's own retries are off: a task pinned hard to a node cannot move, so the dispatcher re-places it instead.
- The node died (``NodeDiedError`` and kin): that node is out for good; the item runs again elsewhere, on a budget of
  its own (``max_node_losses``), not the item's attempts.
- The node's server did not answer (``ServerUnavailable``): the node is suspected, its supervisor asked to restart the
  server; the item runs again elsewhere.
- No source could supply the layer (``LayerUnavailable``), or the server was full: the item runs again, on its
  attempt budget (``max_attempts``).
- Anything else is the item's own error.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..client import Client
from ..errors import LimitError, MinisandboxError, ServerUnreachableError
from .config import IO, SLOT
from .fleet import Fleet
from .placement import NodeState, is_image

__all__ = ["NODE_LOST", "Item", "LayerUnavailable", "Outcome", "ServerUnavailable", "run_items"]

# The attempt died with its node (or never got there).
NODE_LOST = (
    ray.exceptions.NodeDiedError,
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.TaskUnschedulableError,
    ray.exceptions.ActorDiedError,
    ray.exceptions.ObjectLostError,
    ray.exceptions.OwnerDiedError,
)


class ServerUnavailable(Exception):
    """The node's own server did not answer (it crashed, or the node is going down)."""


class LayerUnavailable(Exception):
    """No source could supply the layer (e.g. its only holder was just lost)."""


class Busy(Exception):
    """The node's server refused for now (over a limit)."""


class PeersOutdated(Exception):
    """The node's server does not know a source yet (e.g. it restarted since the peers were registered)."""


def _call(fn: Callable[[], Any]) -> Any:
    """One call to this node's server, its failures sorted into what the dispatcher retries and what it does not."""
    try:
        return fn()
    except ServerUnreachableError as e:
        raise ServerUnavailable(str(e)) from None
    except LimitError as e:
        raise Busy(str(e)) from None
    except MinisandboxError as e:
        if e.code == "layer_unavailable":
            raise LayerUnavailable(str(e)) from None
        if e.code == "unavailable":
            raise ServerUnavailable(str(e)) from None
        if e.code == "peer_not_allowed":
            raise PeersOutdated(str(e)) from None
        raise


@ray.remote(num_cpus=0, max_retries=0)
def _fetch_layer(url: str, token: str, key: str, sources: list[dict[str, Any]]) -> dict[str, Any]:
    """Bring a layer into this node's cache; holds one unit of the node's I/O budget while it runs."""
    return _call(lambda: Client(url, token, timeout=3600).fetch_layer(key, sources))


@ray.remote(num_cpus=0, max_retries=0)
def _fetch_image(url: str, token: str, name: str, sources: list[dict[str, Any]]) -> dict[str, Any]:
    """Bring an image from a peer into this node's store; holds one unit of the node's I/O budget while it runs. No
    peer able to give it is not a failure: the work that follows pulls it from its registry."""
    try:
        return _call(lambda: Client(url, token, timeout=3600).fetch_image(name, sources))
    except LayerUnavailable as e:
        return {"name": name, "fetched": False, "error": str(e)}


@ray.remote(num_cpus=0, max_retries=0)
def _attempt(
    url: str,
    token: str,
    kind: str,
    payload: dict[str, Any],
    sources: list[dict[str, Any]],
    labels: dict[str, str],
    fetched: Any = None,
) -> dict[str, Any]:
    """One item on the node this task is pinned to (after ``fetched``, the layer's fetch, when there was one)."""
    client = Client(url, token, timeout=3600)
    if kind == "prepare":
        return _call(
            lambda: client.prepare_environment(
                payload["instance"], sources=sources, build=True, image=payload.get("image")
            )
        )
    if kind == "evaluate":
        return _call(
            lambda: client.evaluate_job(
                payload["instance"],
                payload["model_patch"],
                payload["model_name_or_path"],
                timeout_seconds=payload.get("timeout_seconds"),
                labels=labels,
                sources=sources,
                build=True,
                image=payload.get("image"),
            )
        )
    if kind == "sandbox":
        return _call(lambda: _sandbox_round(client, payload, sources, labels))
    raise ValueError(f"unknown kind of work: {kind}")


@ray.remote(num_cpus=0, max_retries=0)
def _group_attempt(url: str, token: str, payload: dict[str, Any], fetched: Any = None) -> dict[str, Any]:
    """One rollout group on the node this task is pinned to: started there (``POST /rollouts/groups``), handed to
    the caller's ``fn`` (the agent loop of each rollout, their rewards), closed whatever happens."""
    from ..rl.client import RolloutClient

    rollouts = RolloutClient(client=Client(url, token, timeout=3600))
    group = _call(
        lambda: rollouts.start_group(
            payload["instance_id"],
            payload["n"],
            gold_check=payload.get("gold_check"),
            ttl_seconds=payload.get("ttl_seconds"),
        )
    )
    try:
        value = payload["fn"](group)
    finally:
        try:
            group.close()
        except MinisandboxError:
            pass  # a lost server's groups went with it
    return {"group_id": group.id, "instance_id": group.instance_id, "value": value}


def _sandbox_round(
    client: Client, payload: dict[str, Any], sources: list[dict[str, Any]], labels: dict[str, str]
) -> dict[str, Any]:
    """A sandbox of the item's environment: created, one command run in it (if any), deleted."""
    sb = client.create_sandbox(env_key=payload["env_key"], labels=labels, sources=sources or None)
    try:
        r = (
            client.exec(sb["id"], payload["command"], timeout=payload.get("timeout", 600))
            if payload.get("command")
            else None
        )
    finally:
        client.delete_sandbox(sb["id"])
    return {"sandbox_id": sb["id"], "exit_code": r["exit_code"] if r else None, "stdout": r["stdout"] if r else None}


@dataclass
class Item:
    id: str
    #: The layer (environment key) or image (canonical reference) the item needs, placement's key; None: anywhere.
    key: str | None
    payload: dict[str, Any]
    #: Sandboxes it holds at once (a rollout group's size).
    slots: int = 1


@dataclass
class Outcome:
    job: str
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


Event = Callable[..., None]


def run_items(
    fleet: Fleet,
    kind: str,
    items: list[Item],
    *,
    on_result: Callable[[Item, dict[str, Any]], None] | None = None,
    on_event: Event | None = None,
    progress: Any = None,
) -> Outcome:
    """Run every item once, somewhere; returns the first result of each (or its error)."""
    out = Outcome(job=uuid.uuid4().hex[:12])
    stats = out.stats
    stats.update(attempts=0, retried=0, duplicates_discarded=0, placed_warm=0, placed_cold=0, fetch_tasks=0)
    emit = _events(on_event, progress)
    labels = {"fleet_job": out.job}
    pending = deque((it, 1) for it in items)
    inflight: dict[Any, tuple[Item, int, str]] = {}
    losses: dict[str, int] = {}
    fleet.refresh(force=True)
    while pending or inflight:
        fleet.refresh()
        while pending:
            item, attempt = pending[0]
            chosen = fleet.placement.choose(item.key, item.slots)
            if chosen is None:
                break
            node, warm = chosen
            pending.popleft()
            stats["placed_warm" if warm else "placed_cold"] += 1
            ref = _submit(fleet, node, kind, item, labels, stats)
            inflight[ref] = (item, attempt, node.node_id)
            stats["attempts"] += 1
            emit("placed", id=item.id, node=node.name, attempt=attempt)
        if not inflight:
            if not fleet.placement.nodes:
                raise RuntimeError(
                    f"no node of the fleet is alive (nodes advertise the Ray resource {SLOT!r}; see `ray status`)"
                )
            time.sleep(0.2)  # every node is unusable right now: wait for one to come back or be declared dead
            fleet.refresh(force=True)
            continue
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.2)
        for ref in ready:
            item, attempt, nid = inflight.pop(ref)
            _collect(fleet, ref, item, attempt, nid, pending, out, losses, emit, on_result)
        if progress is not None:
            progress.show(
                done=len(out.results) + len(out.errors),
                running=len(inflight),
                retried=stats["retried"],
                errors=len(out.errors),
                nodes=len(fleet.placement.usable()),
            )
    if progress is not None:
        progress.finish()
    stats["swept"] = fleet.sweep("fleet_job", out.job)
    return out


def _events(on_event: Event | None, progress: Any) -> Event:
    """The caller's events; the progress times each item from its placement to its result or final error."""

    def emit(kind: str, **f: Any) -> None:
        if progress is not None and kind == "placed":
            progress.began(f["id"])
        elif progress is not None and kind in ("done", "error"):
            progress.ended(f["id"])
        if on_event:
            on_event(kind, **f)

    return emit


def _submit(fleet: Fleet, node: NodeState, kind: str, item: Item, labels: dict[str, str], stats: dict[str, Any]) -> Any:
    pin = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
    here = item.key is None or node.holds(item.key)
    sources = [] if here or item.key is None else fleet.placement.sources(item.key, exclude=node.node_id)
    fetched = None
    budget = fleet.io_budget(node.node_id)
    if sources and (budget or kind == "group"):
        # The fetch holds one unit of the node's I/O budget (Ray releases it when the fetch ends, not when the work
        # ends); the work starts once the layer or image is there. (A group's start takes no sources: always first.)
        fetch = _fetch_image if is_image(item.key) else _fetch_layer
        fetched = fetch.options(scheduling_strategy=pin, resources={IO: 1} if budget else {}).remote(
            node.url, node.token, item.key, sources
        )
        stats["fetch_tasks"] += 1
        if is_image(item.key):
            sources = []  # taken from a peer by now, else its registry is the way: the peers are not asked twice
    if kind == "group":
        return _group_attempt.options(scheduling_strategy=pin, resources={SLOT: min(item.slots, node.slots)}).remote(
            node.url, node.token, item.payload, fetched
        )
    return _attempt.options(scheduling_strategy=pin, resources={SLOT: 1}).remote(
        node.url, node.token, kind, item.payload, sources, labels, fetched
    )


def _collect(
    fleet: Fleet,
    ref: Any,
    item: Item,
    attempt: int,
    nid: str,
    pending: deque[tuple[Item, int]],
    out: Outcome,
    losses: dict[str, int],
    emit: Event,
    on_result: Callable[[Item, dict[str, Any]], None] | None,
) -> None:
    cfg = fleet.config
    try:
        result = ray.get(ref)
    except (*NODE_LOST, LayerUnavailable, ServerUnavailable, Busy, PeersOutdated) as e:
        cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) else e
        fleet.placement.done(nid, item.key, ok=False, need=item.slots)
        node_died = isinstance(e, NODE_LOST) and not isinstance(e, ray.exceptions.RayTaskError)
        server_gone = isinstance(cause, ServerUnavailable)
        if node_died or server_gone:
            fleet.suspect(nid, node_died=node_died)
        if isinstance(cause, PeersOutdated):
            fleet.peers_changed()
        lost = node_died or server_gone
        losses[item.id] = losses.get(item.id, 0) + (1 if lost else 0)
        if (lost and losses[item.id] <= cfg.max_node_losses) or (not lost and attempt < cfg.max_attempts):
            out.stats["retried"] += 1
            if isinstance(cause, Busy):
                time.sleep(0.2)
            pending.appendleft((item, attempt + (0 if lost else 1)))
            emit("retry", id=item.id, reason=type(cause).__name__, attempt=attempt)
        else:
            out.errors[item.id] = f"{type(cause).__name__}: {cause}"
            emit("error", id=item.id, error=out.errors[item.id])
        return
    except Exception as e:  # noqa: BLE001 - the item's own failure, reported as its error
        fleet.placement.done(nid, item.key, ok=False, need=item.slots)
        cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) else e
        where = fleet.placement.nodes[nid].name if nid in fleet.placement.nodes else nid[:8]
        text = str(cause).splitlines()[0][:300] if str(cause) else ""
        out.errors[item.id] = f"{type(cause).__name__} on {where}: {text}"
        emit("error", id=item.id, error=out.errors[item.id])
        return
    fleet.placement.done(nid, item.key, ok=_holds_after(result), digest=result.get("manifest_sha256"), need=item.slots)
    if item.id in out.results or item.id in out.errors:
        out.stats["duplicates_discarded"] += 1
        return
    out.results[item.id] = result
    node = fleet.placement.nodes.get(nid)
    emit("done", id=item.id, node=node.name if node else nid[:8], status=result.get("status"))
    if on_result:
        on_result(item, result)


def _holds_after(result: dict[str, Any]) -> bool:
    """Does the node hold the item's layer now? (A failed build or a missing environment leaves nothing.)"""
    if result.get("status") == "failed":
        return False
    return not (result.get("status") == "error" and not result.get("manifest_sha256"))
