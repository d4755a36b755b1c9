"""What a fleet needs to know: how to run minisandbox on each node, and the names it uses in Ray."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..command import cli_command

__all__ = ["IO", "NAMESPACE", "NAME_LABEL", "SLOT", "FleetConfig", "default_command"]

#: Ray custom resources a node advertises: sandboxes at once, and layer fetches at once.
SLOT = "minisandbox_slot"
IO = "minisandbox_io"
#: Ray node label: a stable name for the node (a label value is at most 63 letters, digits, "-", "_" and "."). A node's
#: home is not a label (a path is not a valid label value): it is ``$MINISANDBOX_HOME`` in the environment ``ray
#: start`` ran in (Ray's workers inherit it), else the default home of the user running Ray there.
NAME_LABEL = "minisandbox.node"
NAMESPACE = "minisandbox"


def default_command() -> list[str]:
    """``$MINISANDBOX_CLI`` (split like a shell would), else ``minisandbox`` on the node's PATH."""
    return cli_command()


@dataclass
class FleetConfig:
    #: How to run the minisandbox CLI, on every node and on the driver (e.g. ``["node", "/opt/msb/cli.js"]``).
    command: list[str] = field(default_factory=default_command)
    #: Local clones for environment builds on every node (``serve --repos``); None: clone from the network.
    repos_dir: str | None = None
    #: The dataset every node's server knows (``serve --dataset``, the same path on every node): needed for rollout
    #: groups, which name their task by instance id.
    dataset: str | None = None
    #: Store directories on shared storage every node can read (tried before peers).
    shared_stores: list[str] = field(default_factory=list)
    #: Supervisors (and their servers) outlive the driver that started them (``up`` / ``down``, RL trainers).
    detached: bool = False
    #: Only nodes with these names (label ``minisandbox.node``, else the node id's first 8 characters).
    only: set[str] | None = None
    #: Attempts per item for its own failures (a layer no one could supply, a refused request).
    max_attempts: int = 3
    #: Extra runs per item because its node was lost (not counted as the item's attempts).
    max_node_losses: int = 8
    #: More ``minisandbox serve`` options on every node.
    serve_args: list[str] = field(default_factory=list)
    #: Which rows run on a Docker/OCI image, as the CLI's flags say it (``["--images", "swebench"]``, ``["--images",
    #: "row"]``, ``["--image-template", "ghcr.io/org/env.{instance_id}"]``): the driver's plans name each row's image
    #: (nodes pull it), and every node's server (with ``dataset``) runs rollouts on it. Empty: ``auto``, a row's own
    #: image when the driver's store has it.
    image_args: list[str] = field(default_factory=list)
    #: Seconds between looks at Ray's node table while work runs.
    refresh_s: float = 0.5
