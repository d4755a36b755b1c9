"""The fleet on a real 3-node Ray cluster on this host (run by test/fleet.test.ts inside namespaces of its own): real
`minisandbox serve` per node, each with its own home, real fixture environments and evaluations.

Prints one JSON line per check ({"check", "ok", ...}) and stops at the first failure. argv[1]: the run's settings
(JSON file written by the test).
"""

import collections
import contextlib
import io
import json
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

T0 = time.monotonic()
cfg = json.loads(Path(sys.argv[1]).read_text())

import ray  # noqa: E402
from minisandbox import Client  # noqa: E402
from minisandbox.fleet import Fleet, FleetConfig, evaluate, prepare, rollout_groups, status_html  # noqa: E402
from minisandbox.fleet import cli as fleet_cli  # noqa: E402
from minisandbox.fleet.fleet import _held  # noqa: E402
from minisandbox.fleet.testing import LocalCluster  # noqa: E402


def check(name, ok, **info):
    print(json.dumps({"check": name, "ok": bool(ok), "t": round(time.monotonic() - T0, 1), **info}), flush=True)
    if not ok:
        sys.exit(1)


def note(**info):
    print(json.dumps({"note": info}), flush=True)


def read(path):
    with open(path) as f:
        return f.read()


def summary_of(out):
    return read(out["summary_path"])


def expected_summary(name, predictions, ids):
    """What a single node's report says for these instances: the reference run's files, summed up by the product."""
    args = [
        *cfg["cli"],
        "evaluate",
        "--dataset",
        cfg["dataset"],
        "--predictions",
        predictions,
        "--run-id",
        name,
        "--report-dir",
        cfg["ref_dir"],
        "--summary-only",
        "--json",
    ]
    for i in ids:
        args += ["--instance-ids", i]
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    return read(json.loads(r.stdout)["summaryPath"])


def summary_diff(a, b):
    """The fields where two summaries differ (for failure messages)."""
    x, y = json.loads(a), json.loads(b)
    return {k: [x.get(k), y.get(k)] for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)}


def fetches(fleet):
    """(node, layer) -> how many times that node fetched that layer, from each node's pulls.jsonl."""
    c: collections.Counter[tuple[str, str]] = collections.Counter()
    for node in ("n0", "n1", "n2"):
        path = os.path.join(cfg["base"], node, "home", "cache", "pulls.jsonl")
        if os.path.exists(path):
            for line in Path(path).read_text().splitlines():
                if line.strip():
                    c[(node, json.loads(line)["key"])] += 1
    return c


def live_leases(home):
    """Node-cache leases whose holder still runs: a lease file is named lease-<start time>-<pid>-<random>, and the
    process must have that pid *and* that start time (field 22 of /proc/<pid>/stat)."""
    live = []
    for _, _, files in os.walk(os.path.join(home, "cache", "leases")):
        for name in files:
            parts = name.split("-")
            if len(parts) != 4:
                continue
            try:
                stat = Path(f"/proc/{parts[2]}/stat").read_text()
                cmd = Path(f"/proc/{parts[2]}/cmdline").read_text().replace("\0", " ")[:200]
            except OSError:
                continue
            if stat[stat.rindex(")") + 2 :].split()[19] == parts[1]:
                live.append(f"{name}: {cmd}")
    return live


def leftovers(fleet):
    """Per usable node: live sandboxes, and live leases in its node cache."""
    out = {}
    for n in fleet.placement.usable():
        sandboxes = len(Client(n.url, n.token).list_sandboxes())
        out[n.name] = {"sandboxes": sandboxes, "leases": live_leases(os.path.join(cfg["base"], n.name, "home"))}
    return out


def clean(left):
    return all(v["sandboxes"] == 0 and not v["leases"] for v in left.values())


def same_reports(out, ref_run):
    """Every instance's report.json equals the single node's, byte for byte (those that have one)."""
    base = os.path.join(cfg["ref_dir"], "logs", "run_evaluation")
    diff = []
    for iid in out["statuses"]:
        mine = os.path.join(os.path.dirname(out["summary_path"]), "logs", "run_evaluation", out["run_id"])
        for model in os.listdir(mine):
            a = os.path.join(mine, model, iid, "report.json")
            b = os.path.join(base, ref_run, model, iid, "report.json")
            if os.path.exists(a) != os.path.exists(b) or (os.path.exists(a) and read(a) != read(b)):
                diff.append(iid)
    return diff


lc = LocalCluster(cfg["base"], ("n0", "n1", "n2"), slots=2, io=2)
lc.connect()
check("cluster_up", True, seconds=round(lc.up_s, 1), nodes=len(ray.nodes()))

log = []
config = FleetConfig(command=cfg["cli"], repos_dir=cfg["repos"], dataset=cfg["dataset"])
fleet = Fleet(config, log=log.append)
t = time.monotonic()
fleet.refresh(force=True)
warm = {n.name: len(n.layers) for n in fleet.placement.nodes.values()}
check(
    "servers_started_one_per_node",
    len(fleet.placement.nodes) == 3 and warm["n0"] == cfg["seeded"],
    seconds=round(time.monotonic() - t, 1),
    layers=warm,
)
unauth = Client(fleet.placement.usable()[0].url, "").request
try:
    unauth("GET", "/sandboxes")
    authed = False
except Exception as e:  # noqa: BLE001 - whatever it raised, only a 403 passes
    authed = getattr(e, "status", None) == 403
check("servers_authenticated_by_default", authed)

# 1. prepare over the fleet: what a node holds counts; the missing environments are built, each once, in parallel.
t = time.monotonic()
prep = prepare(fleet, cfg["dataset"], progress=False)
by_status = collections.Counter(e["status"] for e in prep["environments"])
built_on = sorted(e["node"] for e in prep["environments"] if e["status"] == "built")
check(
    "prepare_builds_missing_environments_once",
    by_status == {"present": cfg["seeded"], "built": 20 - cfg["seeded"]}
    and prep["failed"] == 0
    and len(set(built_on)) == len(built_on),
    seconds=round(time.monotonic() - t, 1),
    statuses=dict(by_status),
    built_on=built_on,
)

# 2. twenty instances over three nodes: the same report as one node.
t = time.monotonic()
placed: collections.Counter[str] = collections.Counter()
gold = evaluate(
    fleet,
    cfg["dataset"],
    "gold",
    run_id="fleet-gold",
    report_dir=cfg["out_dir"],
    progress=False,
    html=True,
    on_event=lambda kind, **f: kind == "placed" and placed.update([f["node"]]),
)
check(
    "three_nodes_same_report_as_one",
    summary_of(gold) == read(cfg["ref_gold_summary"]) and not gold["errors"],
    seconds=round(time.monotonic() - t, 1),
    placed=dict(placed),
    stats=gold["stats"],
    resolved=gold["summary"]["resolved_instances"],
)
check("three_nodes_same_instance_reports", same_reports(gold, "ref-gold") == [], differ=same_reports(gold, "ref-gold"))
html_page = read(gold["html_path"]) if gold["html_path"] else ""
status_page = read(status_html(fleet, os.path.join(cfg["out_dir"], "fleet.html")))
check(
    "status_page_shows_where_each_environment_is_warm",
    all(n["node"] in status_page and all(k[:16] in status_page for k in n["layer_keys"]) for n in fleet.status()),
    nodes=[n["node"] for n in fleet.status()],
)
check(
    "html_report_beside_the_summary",
    gold["html_path"] == gold["summary_path"][: -len(".json")] + ".html"
    and html_page.count('class="pill k-resolved"') == gold["summary"]["resolved_instances"],
    html=gold["html_path"],
)
check("work_spread_over_all_nodes", len(placed) == 3 and gold["stats"]["placed_warm"] > 0, placed=dict(placed))
f = fetches(fleet)
check(
    "each_layer_fetched_at_most_once_per_node",
    f and max(f.values()) == 1,
    fetched=dict(collections.Counter(node for node, _ in f)),
)
left = leftovers(fleet)
check("no_sandbox_or_lease_left", clean(left), left=left)

# 3. a node lost mid-run (its raylet and everything on it SIGKILLed): every instance exactly once, nothing left.
attempts: collections.Counter[str] = collections.Counter()
killed = {}
kill_at = cfg.get("kill_at", 9)


def kill_on_placement(kind, **f):
    if kind == "placed":
        attempts[f["id"]] += 1
        if sum(attempts.values()) == kill_at and not killed:
            killed["node_id"] = lc.node_id("n1")
            lc.remove("n1", graceful=False)


t = time.monotonic()
mixed = evaluate(
    fleet,
    cfg["dataset"],
    cfg["mixed"],
    run_id="fleet-lost",
    report_dir=cfg["out_dir"],
    progress=False,
    on_event=kill_on_placement,
)
note(kill_at=kill_at, log=log[-8:])
check(
    "node_lost_same_report_every_instance_once",
    summary_of(mixed) == read(cfg["ref_mixed_summary"])
    and not mixed["errors"]
    and len(mixed["statuses"]) == len(set(mixed["statuses"])),
    seconds=round(time.monotonic() - t, 1),
    stats=mixed["stats"],
    attempts_per_instance=dict(collections.Counter(attempts.values())),
)
# The run may end before Ray declares the node dead (its health checks take ~1.5 s here, more on a loaded machine):
# the fleet must learn of it from Ray within a bound, not necessarily within the run.
t = time.monotonic()
while killed.get("node_id") not in fleet.lost and time.monotonic() - t < 30:
    time.sleep(0.2)
    fleet.refresh(force=True)
check(
    "node_lost_detected",
    killed.get("node_id") in fleet.lost,
    lost=len(fleet.lost),
    after_run_s=round(time.monotonic() - t, 1),
)
check(
    "node_lost_instances_ran_again_elsewhere",
    mixed["stats"]["retried"] >= 1 and max(attempts.values()) >= 2,
    retried=mixed["stats"]["retried"],
)
left = leftovers(fleet)
check("no_sandbox_or_lease_left_on_survivors", clean(left) and "n1" not in left, left=left)
f = fetches(fleet)
check("each_layer_fetched_at_most_once_per_node_after_loss", max(f.values()) == 1, fetches=sum(f.values()))

# 4. the node comes back with the same home: it rejoins with its warm cache and takes work again.
t = time.monotonic()
lc.add("n1")
fleet.refresh(force=True)
n1 = [n for n in fleet.placement.nodes.values() if n.name == "n1"]
check(
    "node_rejoined_warm",
    len(n1) == 1 and len(n1[0].layers) > 0,
    seconds=round(time.monotonic() - t, 1),
    layers=len(n1[0].layers) if n1 else None,
)
subset = cfg["subset"]
placed = collections.Counter()
again = evaluate(
    fleet,
    cfg["dataset"],
    cfg["mixed"],
    run_id="fleet-rejoined",
    report_dir=cfg["out_dir"],
    instance_ids=subset,
    progress=False,
    on_event=lambda kind, **f: kind == "placed" and placed.update([f["node"]]),
)
check(
    "rejoined_node_takes_work",
    placed["n1"] > 0
    and not again["errors"]
    and summary_of(again) == expected_summary("ref-mixed", cfg["mixed"], subset),
    placed=dict(placed),
)

# 5. a server killed on a live node: its supervisor restarts it, the work there runs again, nothing is left.
victim = next(n for n in fleet.placement.nodes.values() if n.name == "n2")
pid = ray.get(fleet.supervisors[victim.node_id].info.remote())["server_pid"]
crashed = {}


def crash_on_placement(kind, **f):
    if kind == "placed" and f["node"] == "n2" and not crashed:
        crashed["pid"] = pid
        time.sleep(0.3)
        os.kill(pid, 9)


restarted = evaluate(
    fleet,
    cfg["dataset"],
    cfg["mixed"],
    run_id="fleet-crash",
    report_dir=cfg["out_dir"],
    instance_ids=subset,
    progress=False,
    on_event=crash_on_placement,
)
# The restart is asked for asynchronously when a task finds the server gone; it may still be starting when the run
# ends (the other nodes took the work), so the supervisor is given a bound to finish it, not the run's length.
t = time.monotonic()
info = ray.get(fleet.supervisors[victim.node_id].info.remote())
while info["restarts"] < 1 and time.monotonic() - t < 60:
    time.sleep(0.5)
    fleet.refresh(force=True)
    info = ray.get(fleet.supervisors[victim.node_id].info.remote())
check(
    "server_crash_restarted_same_report",
    crashed
    and info["restarts"] >= 1
    and not restarted["errors"]
    and summary_of(restarted) == expected_summary("ref-mixed", cfg["mixed"], subset),
    restarts=info["restarts"],
    restart_wait_s=round(time.monotonic() - t, 1),
    stats=restarted["stats"],
    errors=restarted["errors"],
    differ=summary_diff(summary_of(restarted), expected_summary("ref-mixed", cfg["mixed"], subset)),
    statuses=restarted["statuses"],
)
left = leftovers(fleet)
check("no_sandbox_or_lease_left_after_crash", clean(left), left=left)

# 6. the command line: a second driver joining the cluster by its address.
t = time.monotonic()
env = {**os.environ, "MINISANDBOX_CLI": " ".join(cfg["cli"])}
cli = subprocess.run(
    [
        sys.executable,
        "-m",
        "minisandbox.fleet",
        "evaluate",
        "--address",
        lc.address,
        "--dataset",
        cfg["dataset"],
        "--predictions",
        cfg["mixed"],
        "--run-id",
        "fleet-cli",
        "--report-dir",
        cfg["out_dir"],
        "--repos",
        cfg["repos"],
        *[a for i in subset for a in ("--instance-ids", i)],
        "--json",
    ],
    capture_output=True,
    text=True,
    timeout=600,
    env=env,
    check=False,
)
events = [json.loads(line) for line in cli.stdout.splitlines() if line.startswith("{")]
result: dict[str, Any] = next((e for e in events if e.get("event") == "result"), {})
check(
    "cli_second_driver_same_report",
    cli.returncode == 0
    and result.get("summary_path")
    and read(result["summary_path"]) == expected_summary("ref-mixed", cfg["mixed"], subset)
    and any(e.get("event") == "progress" for e in events),
    seconds=round(time.monotonic() - t, 1),
    rc=cli.returncode,
    errors=result.get("errors"),
    stderr=cli.stderr[-1500:],
)

# 6b. an instance no node can build (say, the one node that held it was lost): named, and the command exits 1.
# (In this driver: the command's own code, without the cost of another driver joining.)
unbuildable = os.path.join(cfg["out_dir"], "unbuildable.json")
row = {**json.loads(Path(cfg["dataset"]).read_text())[0], "instance_id": "nobody__missing-1", "repo": "nobody/missing"}
Path(unbuildable).write_text(json.dumps([row]))
t = time.monotonic()
said = io.StringIO()
with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
    rc = fleet_cli.main(
        [
            *("evaluate", "--address", lc.address, "--minisandbox", " ".join(cfg["cli"]), "--repos", cfg["repos"]),
            *("--dataset", unbuildable, "--predictions", "gold", "--run-id", "fleet-unbuildable"),
            *("--report-dir", cfg["out_dir"]),
        ]
    )
check(
    "cli_instance_not_evaluated_fails_the_run",
    rc == 1
    and "nobody__missing-1: not evaluated: Environment Build Failed" in said.getvalue()
    and "1 instance(s) could not be evaluated" in said.getvalue()
    and os.path.exists(os.path.join(cfg["out_dir"], "gold.fleet-unbuildable.json")),
    seconds=round(time.monotonic() - t, 1),
    rc=rc,
    stderr=said.getvalue()[-1500:],
)

# 7. one sandbox for work driven from here (e.g. a rollout): placed warm, deleted on exit.
key = next(iter(next(n for n in fleet.placement.nodes.values() if n.name == "n0").layers))
with fleet.sandbox(key, labels={"purpose": "rollout"}) as sb:
    ran = Client(sb["url"], sb["token"]).exec(sb["id"], "git -C /testbed rev-parse --is-inside-work-tree")
    node_url = sb["url"]
check(
    "fleet_sandbox_placed_warm_and_deleted",
    ran["stdout"].strip() == "true"
    and not Client(
        node_url, next(n.token for n in fleet.placement.nodes.values() if n.url == node_url)
    ).list_sandboxes(),
    node=sb["node"],
)

# 8. rollout groups (RL): each group started on one node, its members driven there by the caller's function.
rows = {r["instance_id"]: r for r in json.loads(Path(cfg["dataset"]).read_text())}


def gold_group(group, rows=rows):
    """Every member starts at the task's base commit; the first gets the gold patch and its reward."""
    heads = [r.exec("git rev-parse HEAD", cwd="/testbed")["stdout"].strip() for r in group.rollouts]
    first = group.rollouts[0]
    first.write_file("/tmp/fix.diff", rows[group.instance_id]["patch"])
    applied = first.exec("git apply /tmp/fix.diff", cwd="/testbed")["exit_code"]
    outcome = first.reward()
    return {
        "at_base": all(h == rows[group.instance_id]["base_commit"] for h in heads),
        "applied": applied,
        "status": outcome["status"],
        "reward": outcome["reward"],
        "members": len(group.rollouts),
    }


t = time.monotonic()
placed = collections.Counter()
wanted = [(cfg["subset"][k], 2) for k in (0, 1, 2)]
groups = rollout_groups(
    fleet,
    wanted,
    gold_group,
    progress=False,
    on_event=lambda kind, **f: kind == "placed" and placed.update([f["node"]]),
)
values = [r["value"] for r in groups["results"].values()]
check(
    "rollout_groups_over_the_fleet",
    not groups["errors"]
    and len(values) == 3
    and all(
        v["at_base"] and v["applied"] == 0 and v["status"] == "scored" and v["reward"] == 1 and v["members"] == 2
        for v in values
    ),
    seconds=round(time.monotonic() - t, 1),
    placed=dict(placed),
    values=values,
    errors=groups["errors"],
)
live = {
    n.name: len(Client(n.url, n.token).request("GET", "/rollouts/groups")["groups"]) for n in fleet.placement.usable()
}
left = leftovers(fleet)
check("no_group_sandbox_or_lease_left", clean(left) and not any(live.values()), groups=live, left=left)

# 9. rows on an image: one placed on a node lacking it takes it from the node that holds it (the others' registry
# is blocked), by file, before its work starts; every row graded on it as on the holder.
n0 = next(n for n in fleet.placement.usable() if n.name == "n0")
home0 = os.path.join(cfg["base"], "n0", "home")
subprocess.run(
    [
        *cfg["cli"],
        *("--home", home0, "images", "import", cfg["image_layout"]),
        *("--name", cfg["image_name"], "--tag", cfg["image_ref"]),
    ],
    check=True,
    capture_output=True,
)
n0.layers.update(_held(Client(n0.url, n0.token).store_listing()))  # what the fleet learns of a node as it joins
t = time.monotonic()
placed = collections.Counter()
config.image_args = ["--images", "row"]
on_image = evaluate(
    fleet,
    cfg["image_dataset"],
    "gold",
    run_id="fleet-image",
    report_dir=cfg["out_dir"],
    progress=False,
    on_event=lambda kind, **f: kind == "placed" and placed.update([f["node"]]),
)
config.image_args = []


def peer_records(node):
    """Image records of a node's store taken from a peer (their ``peer`` origin)."""
    d = os.path.join(cfg["base"], node, "home", "store", "images", "records")
    out = [json.loads(Path(d, f).read_text()).get("peer") for f in os.listdir(d)] if os.path.isdir(d) else []
    return [p for p in out if p]


taken = {n: peer_records(n) for n in ("n1", "n2")}
check(
    "image_taken_from_a_peer_by_a_node_lacking_it",
    not on_image["errors"]
    and on_image["summary"]["resolved_instances"] == 3
    and len(placed) >= 2
    and any(taken.values())
    and all(p == "{0.scheme}://{0.netloc}".format(urllib.parse.urlsplit(n0.url)) for ps in taken.values() for p in ps)
    and on_image["stats"]["fetch_tasks"] >= 1,
    seconds=round(time.monotonic() - t, 1),
    placed=dict(placed),
    taken=taken,
    stats=on_image["stats"],
    errors=on_image["errors"],
)
left = leftovers(fleet)
check("no_sandbox_or_lease_left_after_images", clean(left), left=left)

t = time.monotonic()
fleet.stop()
lc.shutdown()
check("done", True, shutdown_seconds=round(time.monotonic() - t, 1))
