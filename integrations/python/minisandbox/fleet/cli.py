"""``python -m minisandbox.fleet``: fleet-wide jobs from a shell on any node of the Ray cluster (the head, typically).

It runs as one more Ray driver (``ray.init(address=...)``), so it needs no job server and no ``ray[default]``::

    python -m minisandbox.fleet evaluate --dataset swe.jsonl --predictions preds.jsonl --run-id r1
    python -m minisandbox.fleet prepare --dataset swe.jsonl
    python -m minisandbox.fleet status
    python -m minisandbox.fleet up      # servers that outlive this command (for trainers); `down` stops them
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import sys
from typing import TYPE_CHECKING, Any

from ..command import CliNotFoundError
from .config import NAMESPACE, SLOT, FleetConfig, default_command

if TYPE_CHECKING:  # ray is imported by main, not when the module is
    from .fleet import Fleet


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m minisandbox.fleet", description="minisandbox on every node of a Ray cluster"
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--address",
        default="auto",
        help="Ray cluster (host:port of its GCS; default auto: $RAY_ADDRESS or this machine's cluster)",
    )
    common.add_argument(
        "--minisandbox",
        help="how to run the minisandbox CLI on every node (default: $MINISANDBOX_CLI, else `minisandbox`)",
    )
    common.add_argument("--repos", help="local clones for environment builds on every node (DIR/<owner>/<name>)")
    common.add_argument(
        "--shared-store",
        action="append",
        default=[],
        help="a store directory every node can read (shared storage), tried before peers",
    )
    common.add_argument("--json", action="store_true", help="JSON lines on stdout: progress events, then the result")
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument("--dataset", required=True, help="SWE-bench / SWE-smith dataset (JSON, JSONL or parquet)")
    data.add_argument(
        "--instance-ids", nargs="+", action="extend", default=[], help="only these instances (repeatable)"
    )
    data.add_argument("--images", help="rows on Docker/OCI images: auto, row, swebench or none (as minisandbox's)")
    data.add_argument("--image-template", help="each row's image from a template, e.g. 'ghcr.io/org/env.{instance_id}'")
    sub = p.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", parents=[common], help="nodes, slots and layers")
    st.add_argument("--html", metavar="FILE", help="also write the nodes and where each environment is warm as a page")
    sub.add_parser("up", parents=[common], help="start a server on every node, left running (detached)")
    sub.add_parser("down", parents=[common], help="stop the servers `up` started")
    sub.add_parser("prepare", parents=[common, data], help="every environment of a dataset present on some node")
    ev = sub.add_parser("evaluate", parents=[common, data], help="evaluate predictions over the whole fleet")
    ev.add_argument("--predictions", required=True, help="predictions (JSON list, JSONL, preds.json) or gold / empty")
    ev.add_argument("--run-id", help="run id (default minisandbox-<timestamp>); instances already run are skipped")
    ev.add_argument("--report-dir", default=".", help="where logs/run_evaluation/... and the summary go")
    ev.add_argument("--timeout", type=float, default=1800, help="whole-instance timeout in seconds")
    ev.add_argument("--rerun", action="store_true", help="re-run instances that already have a report.json")
    ev.add_argument("--html", action="store_true", help="also write <model>.<run_id>.html beside the summary")
    return p


def _config(a: argparse.Namespace, detached: bool = False) -> FleetConfig:
    command = shlex.split(a.minisandbox) if a.minisandbox else default_command()
    images = [*(["--images", a.images] if getattr(a, "images", None) else [])]
    images += ["--image-template", a.image_template] if getattr(a, "image_template", None) else []
    return FleetConfig(
        command=command, repos_dir=a.repos, shared_stores=a.shared_store, detached=detached, image_args=images
    )


def _emit(a: argparse.Namespace, kind: str, payload: Any) -> None:
    if a.json:
        print(json.dumps({"event": kind, **payload}), flush=True)


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    import ray

    from . import jobs
    from .fleet import Fleet

    if not _connect(ray, a):
        return 1
    log = (
        (lambda m: print(json.dumps({"event": "log", "message": m}), flush=True))
        if a.json
        else (lambda m: print(f"minisandbox fleet: {m}", file=sys.stderr))
    )
    if a.command == "down":
        return _down(ray)
    fleet = Fleet(_config(a, detached=a.command == "up"), log=log)
    try:
        fleet.refresh(force=True)
        if a.command in ("status", "up"):
            return _status(a, fleet)
        if a.command == "prepare":
            return _prepare(a, fleet)
        return _evaluate(a, fleet)
    except (jobs.FleetJobError, CliNotFoundError) as e:
        print(f"minisandbox fleet: {e}", file=sys.stderr)
        return 2
    finally:
        fleet.stop()


def _connect(ray: Any, a: argparse.Namespace) -> bool:
    """Join the cluster as one more driver. No cluster is one line saying how to get one, not Ray's traceback (nor,
    for an address nothing listens on, a minute of Ray's retries)."""
    where = "on this machine (--address auto, $RAY_ADDRESS unset)" if a.address == "auto" else f"at {a.address}"
    try:
        _answers(a.address)
        ray.init(
            address=a.address,
            namespace=NAMESPACE,
            logging_level="ERROR",
            log_to_driver=False,
            ignore_reinit_error=True,  # called from a driver already connected (a program, a test)
        )
        return True
    except (ConnectionError, OSError) as e:
        print(
            f"minisandbox fleet: no running Ray cluster {where}: {str(e).split('. ')[0]}; start one with "
            'ray start --head --resources=\'{"minisandbox_slot": 16, "minisandbox_io": 2}\', '
            "or give --address HOST:6379",
            file=sys.stderr,
        )
        return False


def _answers(address: str) -> None:
    """An explicit ``HOST:PORT`` must accept a connection within a few seconds (OSError otherwise)."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return
    socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()


def _progress(a: argparse.Namespace) -> bool | str:
    return "json" if a.json else True


def _status(a: argparse.Namespace, fleet: Fleet) -> int:
    nodes = fleet.status()
    if getattr(a, "html", None):
        from . import jobs

        print(f"HTML status written to {jobs.status_html(fleet, a.html)}", file=sys.stderr)
    if a.json:
        _emit(a, "result", {"nodes": nodes})
    else:
        for n in nodes:
            print(f"{n['node']}\t{n['url']}\t{n['slots']} slots\t{n['layers']} layers")
    if not nodes:
        print(f"minisandbox fleet: no node advertises the {SLOT} resource (ray start --resources=...)", file=sys.stderr)
    return 0 if nodes else 1


def _prepare(a: argparse.Namespace, fleet: Fleet) -> int:
    from . import jobs

    out = jobs.prepare(fleet, a.dataset, instance_ids=a.instance_ids, progress=_progress(a))
    if a.json:
        _emit(a, "result", out)
    else:
        for e in out["environments"]:
            print(
                f"{e.get('image') or e['env_key'][:12]}\t{e['status']}\t{e['node'] or '-'}\t"
                f"{len(e['instance_ids'])} instances" + (f"\t{e['error'].splitlines()[0]}" if e.get("error") else "")
            )
        for e in out["errors"]:
            print(f"{e['instance_id']}: {e['error']}")
    return 1 if out["failed"] else 0


def _evaluate(a: argparse.Namespace, fleet: Fleet) -> int:
    """The run's report; instances the fleet could not evaluate at all (say, their environment could not be built on
    the node that took over a lost one's work) are named, and make the run fail (exit 1)."""
    from . import jobs

    out = jobs.evaluate(
        fleet,
        a.dataset,
        a.predictions,
        run_id=a.run_id,
        report_dir=a.report_dir,
        instance_ids=a.instance_ids,
        timeout_s=a.timeout,
        rerun=a.rerun,
        html=a.html,
        progress=_progress(a),
    )
    if a.json:
        _emit(a, "result", out)
        return 1 if out["errors"] else 0
    s = out["summary"]
    print(
        f"{s['total_instances']} instances: {s['resolved_instances']} resolved, "
        f"{s['unresolved_instances']} unresolved, {s['error_instances']} errors, "
        f"{s['empty_patch_instances']} empty patches"
    )
    for iid, err in sorted(out["errors"].items()):
        print(f"  {iid}: not evaluated: {err}", file=sys.stderr)
    print(f"Report written to {out['summary_path']}")
    if out["html_path"]:
        print(f"HTML report written to {out['html_path']}")
    if out["errors"]:
        print(f"minisandbox fleet: {len(out['errors'])} instance(s) could not be evaluated (above)", file=sys.stderr)
    return 1 if out["errors"] else 0


def _down(ray: Any) -> int:
    """Stop every node's detached supervisor (its server closes its sandboxes first)."""
    stopped = 0
    for n in ray.nodes():
        try:
            sup = ray.get_actor(f"node-{n['NodeID']}", namespace=NAMESPACE)
        except ValueError:
            continue
        try:
            ray.get(sup.stop.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - a supervisor that cannot stop its server is killed below
            pass
        ray.kill(sup)
        stopped += 1
    print(f"stopped {stopped} server(s)", file=sys.stderr)
    return 0
