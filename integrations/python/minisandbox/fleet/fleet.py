"""``Fleet``: one ``NodeSupervisor`` (and so one ``minisandbox serve``) per alive Ray node that advertises sandbox
slots; the driver's view of their load and layers; nodes lost and nodes joining, as Ray reports them."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..client import Client
from .config import IO, NAME_LABEL, NAMESPACE, SLOT, FleetConfig
from .placement import NodeState, Placement
from .supervisor import NodeSupervisor

__all__ = ["Fleet"]


def node_name(node: dict[str, Any]) -> str:
    return (node.get("Labels") or {}).get(NAME_LABEL) or node["NodeID"][:8]


class Fleet:
    """The fleet as one driver sees it. Use as a context manager, or call ``stop()``: supervisors this fleet started
    stop their servers (closing every sandbox); with ``detached`` they are left running for other drivers."""

    def __init__(self, config: FleetConfig | None = None, *, log: Callable[[str], None] | None = None) -> None:
        if not ray.is_initialized():
            ray.init(address="auto", namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
        self.config = config or FleetConfig()
        self.log = log or (lambda message: None)
        self.placement = Placement()
        self.supervisors: dict[str, Any] = {}
        #: node ids whose supervisor this fleet created (the others were there already: another driver's, or detached)
        self.created: set[str] = set()
        self.lost: list[str] = []
        self.joined: list[str] = []
        self._io: dict[str, bool] = {}
        self._dead: set[str] = set()
        self._checks: dict[str, Any] = {}
        #: node id -> when to try again to start its supervisor (after a failure, not at every refresh)
        self._retry_at: dict[str, float] = {}
        self._last_refresh = 0.0
        self._peer_urls: tuple[str, ...] = ()

    def __enter__(self) -> Fleet:
        self.refresh(force=True)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------ membership

    def _alive(self) -> dict[str, dict[str, Any]]:
        only = self.config.only
        return {
            n["NodeID"]: n
            for n in ray.nodes()
            if n.get("Alive")
            and n.get("Resources", {}).get(SLOT, 0) > 0
            and n["NodeID"] not in self._dead
            and (only is None or node_name(n) in only)
        }

    def _supervisor(self, node: dict[str, Any]) -> Any:
        nid = node["NodeID"]
        name = f"node-{nid}"
        try:
            return ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            pass
        opts: dict[str, Any] = {
            "name": name,
            "namespace": NAMESPACE,
            "get_if_exists": True,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(nid, soft=False),
        }
        if self.config.detached:
            opts["lifetime"] = "detached"
        self.created.add(nid)
        return NodeSupervisor.options(**opts).remote(  # type: ignore[attr-defined]  # an actor class (ray.remote)
            home=None,  # the node's own: $MINISANDBOX_HOME where Ray runs there, else its default home
            token=secrets.token_urlsafe(24),
            command=self.config.command,
            slots=int(node["Resources"][SLOT]),
            host=node["NodeManagerAddress"],
            repos_dir=self.config.repos_dir,
            dataset=self.config.dataset,
            shared_stores=self.config.shared_stores,
            serve_args=[*self.config.serve_args, *(self.config.image_args if self.config.dataset else [])],
        )

    def refresh(self, force: bool = False) -> None:
        """Drop nodes Ray declared dead; start (or find) a supervisor on every new node and learn its layers."""
        if not force and time.monotonic() - self._last_refresh < self.config.refresh_s:
            return
        self._last_refresh = time.monotonic()
        self._settle_checks()
        alive = self._alive()
        for nid in list(self.placement.nodes):
            if nid not in alive:
                self.log(f"node {self.placement.nodes[nid].name} lost")
                self.lost.append(nid)
                self.placement.drop(nid)
                self.supervisors.pop(nid, None)
                self._checks.pop(nid, None)
        now = time.monotonic()
        new = {
            nid: n
            for nid, n in alive.items()
            if nid not in self.placement.nodes and self._retry_at.get(nid, 0.0) <= now
        }
        started = {nid: self._supervisor(n) for nid, n in new.items()}
        infos = {nid: sup.info.remote() for nid, sup in started.items()}
        for nid, ref in infos.items():
            try:
                info = ray.get(ref, timeout=180)
                listing = Client(info["url"], info["token"], timeout=60).store_listing()
            except Exception as e:  # noqa: BLE001 - died while joining: tried again at the next refresh
                self.log(f"node {node_name(new[nid])} could not join: {type(e).__name__}: {str(e)[:300]}")
                self.created.discard(nid)
                self._retry_at[nid] = time.monotonic() + 10.0
                continue
            n = new[nid]
            self.supervisors[nid] = started[nid]
            self._io[nid] = n["Resources"].get(IO, 0) >= 1
            self.placement.add(
                NodeState(
                    nid,
                    node_name(n),
                    info["url"],
                    info["token"],
                    int(n["Resources"][SLOT]),
                    layers=_held(listing),
                )
            )
            if self.joined or self.lost:
                self.log(f"node {node_name(n)} joined with {len(listing['layers'])} layers")
            self.joined.append(nid)
        self._register_peers()

    def _register_peers(self) -> None:
        """Every server may fetch layers from every other one (and from nothing else)."""
        urls = tuple(sorted(n.url for n in self.placement.nodes.values()))
        if urls == self._peer_urls:
            return
        for n in list(self.placement.nodes.values()):
            try:
                self.client(n).set_peers([u for u in urls if u != n.url])
            except Exception as e:  # noqa: BLE001 - that node is refreshed (or dropped) like any other
                self.log(f"node {n.name}: could not register peers: {type(e).__name__}")
                self.suspect(n.node_id)
        self._peer_urls = urls

    def peers_changed(self) -> None:
        """Register every node's peers again at the next refresh (a server said it did not know one)."""
        self._peer_urls = ()
        self._last_refresh = 0.0

    def io_budget(self, node_id: str) -> bool:
        """Does the node advertise an I/O budget (the ``minisandbox_io`` resource) for layer fetches?"""
        return self._io.get(node_id, False)

    def client(self, node: NodeState, timeout: float = 60.0) -> Client:
        return Client(node.url, node.token, timeout=timeout)

    # -------------------------------------------------------------------------------------------- health

    def suspect(self, node_id: str, node_died: bool = False) -> None:
        """A task died with its node, or could not reach its server: stop placing there at once. Ray's word that the
        node died is final; otherwise its supervisor is asked (asynchronously) to make sure its server runs, and the
        node is used again when it answers."""
        n = self.placement.nodes.get(node_id)
        if node_died:
            self._dead.add(node_id)
        if n is None or not n.usable:
            return
        n.usable = False
        if not node_died and node_id in self.supervisors:
            self._checks[node_id] = self.supervisors[node_id].ensure_server.remote()

    def _settle_checks(self) -> None:
        if not self._checks:
            return
        ready, _ = ray.wait(list(self._checks.values()), num_returns=len(self._checks), timeout=0)
        for nid, ref in list(self._checks.items()):
            if ref not in ready:
                continue
            del self._checks[nid]
            n = self.placement.nodes.get(nid)
            try:
                info = ray.get(ref)
            except ray.exceptions.RayActorError:
                continue  # the supervisor went with its node: out until Ray declares it dead
            except Exception as e:  # noqa: BLE001 - its server cannot be started again: the node is left out
                self.log(f"node {n.name if n else nid[:8]} left out: its server does not start: {str(e)[:300]}")
                self._dead.add(nid)
                self.placement.drop(nid)
                self.supervisors.pop(nid, None)
                continue
            if n is not None and nid not in self._dead:
                n.url, n.usable = info["url"], True
                self._peer_urls = ()  # its URL may have changed
                self.log(f"node {n.name} back in use (server restarts: {info['restarts']})")

    # ---------------------------------------------------------------------------------------------- upkeep

    def sweep(self, label: str, value: str) -> dict[str, list[str]]:
        """Delete every sandbox labelled ``label=value`` on every usable node (work whose task was killed)."""
        out: dict[str, list[str]] = {}
        for n in self.placement.usable():
            try:
                out[n.name] = self.client(n).delete_sandboxes(**{label: value})
            except Exception as e:  # noqa: BLE001 - a sweep is best effort: the servers' idle timeouts remain
                self.log(f"node {n.name}: sweep failed: {type(e).__name__}")
        return out

    def pulls(self) -> dict[str, list[dict[str, Any]]]:
        """Per node, the layers it brought in from elsewhere (from its ``cache/pulls.jsonl``)."""
        refs = {
            self.placement.nodes[nid].name: sup.pulls.remote()
            for nid, sup in self.supervisors.items()
            if nid in self.placement.nodes
        }
        out = {}
        for name, ref in refs.items():
            try:
                out[name] = ray.get(ref, timeout=60)
            except Exception:  # noqa: BLE001 - a node that does not answer has nothing to report
                pass
        return out

    @contextlib.contextmanager
    def sandbox(self, env_key: str, *, labels: dict[str, str] | None = None, **create: Any) -> Iterator[dict[str, Any]]:
        """A sandbox of environment ``env_key`` on the node placement picks (warm first), for work driven from here
        (e.g. one agent rollout): yields the server's answer plus ``url`` and ``token`` of that node's server (give
        ``runtime_url`` and the token to a SWE-ReX client). Deleted on exit, whatever happens inside."""
        self.refresh(force=True)
        chosen = self.placement.choose(env_key)
        if chosen is None:
            raise RuntimeError("no node of the fleet has a free slot")
        node, _ = chosen
        client = self.client(node, timeout=600)
        sources = [] if node.holds(env_key) else self.placement.sources(env_key, exclude=node.node_id)
        try:
            sb = client.create_sandbox(env_key=env_key, labels=labels, sources=sources or None, **create)
        except BaseException:
            self.placement.done(node.node_id, env_key, ok=False)
            raise
        try:
            yield {**sb, "url": node.url, "token": node.token, "node": node.name}
        finally:
            try:
                client.delete_sandbox(sb["id"])
            finally:
                self.placement.done(node.node_id, env_key, ok=True)

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "node": n.name,
                "node_id": n.node_id,
                "url": n.url,
                "slots": n.slots,
                "running": n.running,
                "layers": len(n.layers),
                "layer_keys": sorted(n.layers),
                "usable": n.usable,
            }
            for n in self.placement.nodes.values()
        ]

    def stop(self) -> None:
        """Stop the servers of the supervisors this fleet started (unless detached), closing their sandboxes."""
        if self.config.detached:
            return
        for nid in list(self.created):
            sup = self.supervisors.get(nid)
            if sup is None:
                continue
            try:
                ray.get(sup.stop.remote(), timeout=60)
                ray.kill(sup)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.created.clear()


def _held(listing: dict[str, Any]) -> dict[str, str | None]:
    """What a node holds, as placement keys: its layers (with their manifests' sha256) and its images by name."""
    held: dict[str, str | None] = {x["key"]: x["manifest_sha256"] for x in listing["layers"]}
    held.update({x["name"]: None for x in listing["images"]})
    return held
