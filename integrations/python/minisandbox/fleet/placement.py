"""Placement by environment, as pure logic (no Ray): a sandbox goes to a node whose cache already holds its layer
when one has a free slot, else to the least loaded node, which then fetches the layer (from a peer that holds it).

Choosing a node reserves a slot there and marks the layer *incoming* on it: the next sandbox of the same environment
follows it instead of fetching the layer on yet another node, which keeps fetches to at most one per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["NodeState", "Placement", "is_image", "placement_key"]


def is_image(key: str | None) -> bool:
    """A placement key that is an image (its canonical reference, which always names a registry: ``host/path``), not
    a layer key: a node takes it from a peer that holds it through ``/cache/images`` (else pulls it from its registry
    with the job itself), not through ``/cache/layers``."""
    return key is not None and "/" in key


def placement_key(planned: dict[str, Any]) -> str:
    """What a planned environment or job is placed by: its image when its rows run on one, else its layer."""
    return planned.get("image") or planned["env_key"]


@dataclass
class NodeState:
    node_id: str
    name: str
    url: str
    token: str
    slots: int
    running: int = 0
    #: layer key (or image name) -> sha256 of its manifest there (None when not known yet): confirmed on this node
    layers: dict[str, str | None] = field(default_factory=dict)
    #: being fetched or built there now (counts as warm for placement, not as a source)
    incoming: set[str] = field(default_factory=set)
    #: False: lost, or suspected (its server did not answer) until its supervisor says otherwise
    usable: bool = True

    def load(self) -> float:
        return self.running / self.slots if self.slots else 1.0

    def holds(self, key: str) -> bool:
        return key in self.layers

    def __repr__(self) -> str:  # never the token
        return f"NodeState({self.name}, {self.running}/{self.slots}, {len(self.layers)} layers, usable={self.usable})"


class Placement:
    """The driver's view of every node's load and layers."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}

    def add(self, node: NodeState) -> None:
        self.nodes[node.node_id] = node

    def drop(self, node_id: str) -> None:
        self.nodes.pop(node_id, None)

    def usable(self) -> list[NodeState]:
        return [n for n in self.nodes.values() if n.usable]

    def held_anywhere(self, key: str) -> bool:
        return any(n.holds(key) for n in self.usable())

    def choose(self, key: str | None, need: int = 1) -> tuple[NodeState, bool] | None:
        """Reserve ``need`` slots (a group's sandboxes; at most a node's all) for layer ``key``: a warm node with
        room, else the least loaded one with room; None when no usable node has room. The flag: was it warm."""
        free = [n for n in self.usable() if n.running + min(need, n.slots) <= n.slots]
        if not free:
            return None
        warm = [n for n in free if key is not None and (n.holds(key) or key in n.incoming)]
        best = min(warm or free, key=lambda n: (n.load(), n.running, n.name))
        best.running += min(need, best.slots)
        if key is not None and not best.holds(key):
            best.incoming.add(key)
        return best, bool(warm) or key is None

    def sources(self, key: str, exclude: str) -> list[dict[str, Any]]:
        """Where a node can fetch ``key`` from: usable peers that hold it, least loaded first."""
        holders = sorted(
            (n for n in self.usable() if n.holds(key) and n.node_id != exclude), key=lambda n: (n.load(), n.name)
        )
        out = []
        for n in holders:
            src: dict[str, Any] = {"url": n.url, "token": n.token}
            if n.layers[key]:
                src["manifest_sha256"] = n.layers[key]
            out.append(src)
        return out

    def done(self, node_id: str, key: str | None, ok: bool, digest: str | None = None, need: int = 1) -> None:
        """An attempt on ``node_id`` ended (giving back its ``need`` slots); with ``ok`` the node now holds ``key``
        (its manifest hashing to ``digest``)."""
        n = self.nodes.get(node_id)
        if n is None:
            return
        n.running = max(0, n.running - min(need, n.slots))
        if key is None:
            return
        n.incoming.discard(key)
        if ok:
            n.layers[key] = digest or n.layers.get(key)
