"""A multi-node Ray cluster on one host for tests (``ray.cluster_utils.Cluster``), each node with its own minisandbox
home (``MINISANDBOX_HOME`` in its raylet's environment), name (a node label) and the sandbox slots it advertises.

Run it inside a network namespace of its own with only ``lo`` up (``unshare --net --pid --fork --kill-child
--mount-proc``): outside one, Ray binds the machine's interface address even when asked for 127.0.0.1, and the pid
namespace is what makes every process of the cluster go when the test ends, however it ends (keep a shell as the
namespace's pid 1, ``sh -c 'ip link set lo up && "$@"' sh python ...``: it reaps orphans). Keep ``base`` short
(Ray's socket paths live under it; AF_UNIX paths end at 107 bytes).
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray
from ray.cluster_utils import Cluster

from .config import IO, NAME_LABEL, NAMESPACE, SLOT

__all__ = ["FAST_FAILURE", "LocalCluster"]

#: Node death noticed in about a second instead of about fifteen (Ray's defaults: 3 s x 5 health checks).
FAST_FAILURE = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_timeout_ms": 500,
    "health_check_initial_delay_ms": 0,
}


class LocalCluster:
    def __init__(
        self,
        base: str,
        names: tuple[str, ...] = ("n0", "n1", "n2"),
        *,
        slots: int = 2,
        io: int = 2,
        fast_failure: bool = True,
    ) -> None:
        self.base, self.slots, self.io = base, slots, io
        # Ray never deletes its session dirs, and cluster_utils writes <tmp>/ray/ray_current_cluster whatever
        # temp_dir says: RAY_TMPDIR moves both (the driver and every node read it).
        os.environ["RAY_TMPDIR"] = base
        head = self.node_args(names[0])
        if fast_failure:
            head["_system_config"] = FAST_FAILURE
        t = time.monotonic()
        self.cluster = Cluster(initialize_head=True, head_node_args=head)
        self.nodes: dict[str, Any] = {names[0]: self.cluster.head_node}
        for name in names[1:]:
            self.add(name, wait=False)
        self.cluster.wait_for_nodes()
        self.up_s = time.monotonic() - t

    def home(self, name: str) -> str:
        return os.path.join(self.base, name, "home")

    def node_args(self, name: str) -> dict[str, Any]:
        return {
            "num_cpus": 1,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "object_store_memory": 80 << 20,
            "resources": {SLOT: self.slots, IO: self.io},
            "labels": {NAME_LABEL: name},
            # What `MINISANDBOX_HOME=... ray start` does on a real machine: the raylet's environment, its workers'.
            "env_vars": {"MINISANDBOX_HOME": self.home(name)},
        }

    def add(self, name: str, wait: bool = True) -> str:
        node = self.cluster.add_node(wait=wait, **self.node_args(name))
        self.nodes[name] = node
        return node.node_id

    def node_id(self, name: str) -> str:
        return self.nodes[name].node_id

    def remove(self, name: str, graceful: bool = True) -> None:
        """Remove a node; ``graceful=False`` SIGKILLs its processes (not the head: the driver is on it)."""
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=graceful)

    @property
    def address(self) -> str:
        return self.cluster.address

    def connect(self) -> None:
        ray.init(address=self.cluster.address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)

    def shutdown(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()
