"""Fleet-wide jobs from one call: ``prepare`` (every distinct environment present on some node, each built once) and
``evaluate`` (a SWE-bench run over the whole fleet, with the same report a single node writes).

The run is laid out and summed up by the product itself (``minisandbox evaluate --plan`` / ``--summary-only``, run
here, on the driver): only the jobs in between are spread over the nodes, each returning the harness's files, which
land where a single-node run writes them.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Callable

from .._generated import JOB_FILES, NOT_EVALUATED_KINDS
from ..command import require_cli
from .dispatch import Item, run_items
from .fleet import Fleet
from .placement import placement_key
from .progress import Progress

__all__ = ["JOB_FILES", "FleetJobError", "evaluate", "prepare", "rollout_groups", "status_html"]


class FleetJobError(RuntimeError):
    """The job could not run at all (bad input, the minisandbox CLI failed, no node alive)."""


def _cli_json(fleet: Fleet, args: list[str]) -> dict[str, Any]:
    argv = [*require_cli(fleet.config.command), *args]
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise FleetJobError(f"`minisandbox {' '.join(args[:1])}` failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    if not lines:
        raise FleetJobError(f"`minisandbox {' '.join(args[:1])}` printed nothing")
    try:
        return json.loads(lines[-1]) if lines[-1].startswith("{") else json.loads(r.stdout)
    except ValueError as e:
        raise FleetJobError(f"`minisandbox {' '.join(args[:1])}` printed no JSON: {e}") from None


def status_html(fleet: Fleet, path: str) -> str:
    """The fleet's nodes and where each environment is warm, as one self-contained page (``minisandbox view``)."""
    with tempfile.TemporaryDirectory(prefix="minisandbox-fleet-") as scratch:
        status = os.path.join(scratch, "status.json")
        with open(status, "w") as f:
            json.dump({"nodes": fleet.status()}, f)
        argv = [*fleet.config.command, "view", status, "-o", path]
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise FleetJobError(f"`minisandbox view` failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout.strip()


def _as_file(value: str | list[dict[str, Any]], name: str, scratch: str) -> str:
    """A path as it is; rows (or predictions) written to a JSON file for the CLI."""
    if isinstance(value, str):
        return value
    path = os.path.join(scratch, name)
    with open(path, "w") as f:
        json.dump(value, f)
    return path


def _selection(instance_ids: list[str] | tuple[str, ...]) -> list[str]:
    """The CLI's instance filter. (No `--specs`: every node computes specs from the rows alone, so spec overrides
    belong in the rows' own `spec` field for a fleet.)"""
    args: list[str] = []
    for i in instance_ids:
        args += ["--instance-ids", i]
    return args


def prepare(
    fleet: Fleet,
    dataset: str | list[dict[str, Any]],
    *,
    instance_ids: list[str] | tuple[str, ...] = (),
    progress: bool | str = True,
    on_event: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Make every distinct environment of the dataset present on some node: one already holding it counts; the
    others are built, each once, on the least loaded nodes."""
    with tempfile.TemporaryDirectory(prefix="minisandbox-fleet-") as scratch:
        args = ["prepare", "--dataset", _as_file(dataset, "dataset.json", scratch), "--plan", *_selection(instance_ids)]
        plan = _cli_json(fleet, [*args, *fleet.config.image_args])
    fleet.refresh(force=True)
    envs = plan["environments"]
    status: dict[str, dict[str, Any]] = {}
    items = []
    for env in envs:
        key = placement_key(env)
        holders = [n.name for n in fleet.placement.usable() if n.holds(key)]
        if holders:
            status[key] = {"status": "present", "node": holders[0], "error": None}
        else:
            items.append(Item(key, key, _prepare_payload(env)))
    prog = _progress(progress, "prepare", len(items))
    placed: dict[str, str] = {}
    forward = _forward(prog, on_event)

    def events(kind: str, **f: Any) -> None:
        if kind == "placed":
            placed[f["id"]] = f["node"]
        forward(kind, **f)

    out = run_items(fleet, "prepare", items, on_event=events, progress=prog)
    for key, r in out.results.items():
        status[key] = {"status": r["status"], "node": placed.get(key), "error": r.get("error")}
    for key, err in out.errors.items():
        status[key] = {"status": "failed", "node": placed.get(key), "error": err}
    rows = [
        {"env_key": e["env_key"], **_image_of(e), "instance_ids": e["instance_ids"], **status[placement_key(e)]}
        for e in envs
    ]
    return {
        "environments": rows,
        "errors": plan["errors"],
        "stats": out.stats,
        "failed": sum(1 for r in rows if r["status"] == "failed") + len(plan["errors"]),
    }


def evaluate(
    fleet: Fleet,
    dataset: str | list[dict[str, Any]],
    predictions: str | list[dict[str, Any]],
    *,
    run_id: str | None = None,
    report_dir: str = ".",
    instance_ids: list[str] | tuple[str, ...] = (),
    timeout_s: float = 1800,
    rerun: bool = False,
    html: bool = False,
    progress: bool | str = True,
    on_event: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Evaluate ``predictions`` (a file, ``"gold"``, ``"empty"`` or a list) on ``dataset`` over the whole fleet,
    as ``minisandbox evaluate`` does on one node: same files, same summary (``<model>.<run_id>.json``); with
    ``html``, the same self-contained report beside it (``<model>.<run_id>.html``, written by the CLI)."""
    run_id = run_id or "minisandbox-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    report_dir = os.path.abspath(report_dir)
    with tempfile.TemporaryDirectory(prefix="minisandbox-fleet-") as scratch:
        run_args = [
            *("--dataset", _as_file(dataset, "dataset.json", scratch)),
            *("--predictions", _as_file(predictions, "predictions.json", scratch)),
            *("--run-id", run_id, "--report-dir", report_dir),
            *_selection(instance_ids),
            *fleet.config.image_args,
        ]
        plan = _cli_json(fleet, ["evaluate", *run_args, "--plan", *(["--rerun"] if rerun else [])])
        jobs = {j["instance_id"]: j for j in plan["jobs"]}
        built = _environments(fleet, list(jobs.values()), progress, on_event)
        prog = _progress(progress, "evaluate", len(jobs))

        def write(item: Item, result: dict[str, Any]) -> None:
            _write_files(jobs[item.id]["log_dir"], result.get("files") or {})

        items = [Item(i, placement_key(j), _job_payload(j, timeout_s)) for i, j in jobs.items()]
        out = run_items(fleet, "evaluate", items, on_result=write, on_event=_forward(prog, on_event), progress=prog)
        summary = _cli_json(fleet, ["evaluate", *run_args, "--summary-only", "--json", *(["--html"] if html else [])])
    return {
        "run_id": plan["run_id"],
        "model": plan["model"],
        "summary": summary["summary"],
        "summary_path": summary["summaryPath"],
        "html_path": summary.get("htmlPath"),
        "statuses": {i: r.get("status") for i, r in out.results.items()},
        #: instances not evaluated: never run anywhere, or their node could not build or start their environment
        "errors": {**out.errors, **_not_evaluated(out.results)},
        "build": built,
        "stats": out.stats,
        "job": out.job,
    }


def _not_evaluated(results: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Jobs a node answered without a grade because it failed (say, it took over a lost node's work and could not
    build the environment): they fail the run, as they do on one node."""
    out = {}
    for iid, r in results.items():
        error = r.get("error") or {}
        if error.get("kind") in NOT_EVALUATED_KINDS:
            out[iid] = (
                f"{error['kind']}: {(error.get('message') or '').splitlines()[0] if error.get('message') else ''}"
            )
    return out


def _job_payload(job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """What a node's ``POST /evaluations`` takes for one planned job."""
    keys = ("instance", "model_patch", "model_name_or_path")
    return {**{k: job[k] for k in keys}, **_image_of(job), "timeout_seconds": timeout_s}


def _prepare_payload(planned: dict[str, Any]) -> dict[str, Any]:
    """What a node's ``POST /environments`` takes for one planned environment (or job)."""
    return {"instance": planned["instance"], **_image_of(planned)}


def _image_of(planned: dict[str, Any]) -> dict[str, Any]:
    """``{"image": ...}`` for a planned environment or job on an image, else nothing."""
    return {"image": planned["image"]} if planned.get("image") else {}


def _forward(prog: Progress | None, on_event: Callable[..., None] | None) -> Callable[..., None]:
    """A job's events, to the caller's callback and to the progress display."""

    def events(kind: str, **f: Any) -> None:
        if on_event:
            on_event(kind, **f)
        if isinstance(prog, Progress):
            prog.event(kind, **f)

    return events


def rollout_groups(
    fleet: Fleet,
    groups: list[tuple[str, int]],
    fn: Callable[[Any], Any],
    *,
    gold_check: bool | None = None,
    ttl_seconds: float | None = None,
    progress: bool | str = True,
    on_event: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Rollout groups over the fleet: each ``(instance_id, n)`` becomes a group of ``n`` rollouts started together
    on one node (one where the task's environment is warm, else the least loaded one, which fetches it first), and
    ``fn(group)`` runs in a Ray task on that node with a ``minisandbox.rl.Group`` (drive its rollouts, take their
    rewards); the group is closed afterwards. A group lost with its node runs again elsewhere. The servers must know
    the dataset (``FleetConfig.dataset``). Returns ``{"results": {group key: {"group_id", "value"}}, "errors",
    "stats"}``, keys ``<instance_id>#<index in groups>``."""
    if not fleet.config.dataset:
        raise FleetJobError("rollout groups need the dataset on every node's server: FleetConfig(dataset=...)")
    ids = sorted({i for i, _ in groups})
    plan = _cli_json(
        fleet, ["prepare", "--dataset", fleet.config.dataset, "--plan", *_selection(ids), *fleet.config.image_args]
    )
    if plan["errors"]:
        raise FleetJobError(f"no environment for: {', '.join(e['instance_id'] for e in plan['errors'])}")
    key_of = {i: placement_key(e) for e in plan["environments"] for i in e["instance_ids"]}
    _environments(fleet, plan["environments"], progress, on_event)
    items = [
        Item(
            f"{iid}#{k}",
            key_of[iid],
            {"instance_id": iid, "n": n, "fn": fn, "gold_check": gold_check, "ttl_seconds": ttl_seconds},
            slots=n,
        )
        for k, (iid, n) in enumerate(groups)
    ]
    out = run_items(
        fleet, "group", items, on_event=on_event, progress=_progress(progress, "rollout groups", len(items))
    )
    return {"results": out.results, "errors": out.errors, "stats": out.stats}


def _environments(
    fleet: Fleet, jobs: list[dict[str, Any]], progress: bool | str, on_event: Callable[..., None] | None
) -> dict[str, Any]:
    """Build what no node holds yet, each environment once (as a single-node run builds missing ones first)."""
    fleet.refresh(force=True)
    missing: dict[str, dict[str, Any]] = {}
    for j in jobs:
        key = placement_key(j)
        if key not in missing and not fleet.placement.held_anywhere(key):
            missing[key] = _prepare_payload(j)
    if not missing:
        return {"built": 0, "failed": {}}
    prog = _progress(progress, "build environments", len(missing))
    out = run_items(
        fleet,
        "prepare",
        [Item(k, k, payload) for k, payload in missing.items()],
        on_event=on_event,
        progress=prog,
    )
    failed = {k: r.get("error") for k, r in out.results.items() if r.get("status") == "failed"}
    failed.update(out.errors)
    return {"built": sum(1 for r in out.results.values() if r.get("status") == "built"), "failed": failed}


def _write_files(log_dir: str, files: dict[str, str]) -> None:
    """The job's files, as the node wrote them; files of an earlier attempt that this one did not write go."""
    os.makedirs(log_dir, exist_ok=True)
    for name in JOB_FILES:
        path = os.path.join(log_dir, name)
        if name in files:
            tmp = f"{path}.tmp"
            with open(tmp, "wb") as f:
                f.write(base64.b64decode(files[name]))
            os.replace(tmp, path)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _progress(progress: bool | str, title: str, total: int) -> Progress | None:
    """True: one line on stderr; "json": JSON events on stdout; False: nothing."""
    if progress == "json":
        return Progress(title, total, stream=sys.stdout, json_events=True)
    return Progress(title, total) if progress else None
