"""The fleet workload's Ray part (run by bench/src/fleet.ts inside network and pid namespaces of its own): a 3-node
ray.cluster_utils cluster on this host, a real `minisandbox serve` per node, n0 holding the environments.

Measures placement overhead per sandbox (a sandbox created, used and deleted through the fleet vs directly on a node)
and evaluation throughput on 1 vs 3 nodes (the same instances, every layer already on every node). Prints one JSON
object, the last line of its output. argv[1]: the settings (JSON file).
"""

import collections
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from minisandbox import Client
from minisandbox.fleet import Fleet, FleetConfig, NodeState, Placement, evaluate
from minisandbox.fleet.dispatch import Item, run_items
from minisandbox.fleet.testing import LocalCluster

cfg = json.loads(Path(sys.argv[1]).read_text())


def p50(xs):
    return round(statistics.median(xs), 2) if xs else None


def log(msg):
    print(json.dumps({"log": msg}), flush=True)


out: dict[str, Any] = {}
t = time.monotonic()
lc = LocalCluster(cfg["base"], ("n0", "n1", "n2"), slots=cfg["slots"], io=2)
lc.connect()
out["clusterUpMs"] = round((time.monotonic() - t) * 1000)
config = FleetConfig(command=cfg["cli"], repos_dir=cfg.get("repos"))
fleet = Fleet(config, log=log)
t = time.monotonic()
fleet.refresh(force=True)
out["serversUpMs"] = round((time.monotonic() - t) * 1000)
keys = cfg["keys"]

# The placement decision alone (pure Python): choose + done on a 3-node view, warm and cold keys mixed.
view = Placement()
for i in range(3):
    view.add(NodeState(f"id{i}", f"n{i}", f"http://n{i}", "t", 8, layers=dict.fromkeys(keys[i::3])))
n = 20000
t = time.perf_counter()
for i in range(n):
    choice = view.choose(keys[i % len(keys)])
    assert choice is not None, "every node has room"
    view.done(choice[0].node_id, keys[i % len(keys)], ok=True)
out["decisionUs"] = round((time.perf_counter() - t) / n * 1e6, 2)

# Every layer on every node first: the measurements below are about placement and work, not fetches.
n0 = next(x for x in fleet.placement.nodes.values() if x.name == "n0")
t = time.monotonic()
for node in fleet.placement.nodes.values():
    if node is n0:
        continue
    for k in keys:
        Client(node.url, node.token, timeout=3600).fetch_layer(
            k, [{"url": n0.url, "token": n0.token, "manifest_sha256": n0.layers.get(k)}]
        )
fleet.refresh(force=True)
fleet._peer_urls = ()
for node in list(fleet.placement.nodes.values()):
    node.layers.update({x["key"]: x["manifest_sha256"] for x in fleet.client(node).store_layers()})
out["prefetchMs"] = round((time.monotonic() - t) * 1000)

# Placement overhead: one sandbox at a time (create, `true`, delete), directly on n0 and through the fleet, in
# alternating rounds (side by side, so a busy machine weighs on both alike); both warmed up first.
rounds = cfg["sandboxRounds"]
key = keys[0]
c = Client(n0.url, n0.token)


def direct_round():
    sb = c.create_sandbox(env_key=key)
    c.exec(sb["id"], "true")
    c.delete_sandbox(sb["id"])


def fleet_round(name):
    r = run_items(fleet, "sandbox", [Item(name, key, {"env_key": key, "command": "true"})])
    assert not r.errors, r.errors


direct_round()
run_items(fleet, "sandbox", [Item(f"warm{i}", key, {"env_key": key, "command": "true"}) for i in range(6)])
direct, via = [], []
for i in range(rounds):
    t = time.perf_counter()
    direct_round()
    direct.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    fleet_round(f"s{i}")
    via.append((time.perf_counter() - t) * 1000)
out["sandbox"] = {
    "rounds": rounds,
    "directP50Ms": p50(direct),
    "fleetP50Ms": p50(via),
    "overheadP50Ms": p50([b - a for a, b in zip(direct, via)]),
}
# Many at once: throughput through the fleet.
many = cfg["sandboxBurst"]
t = time.perf_counter()
r = run_items(fleet, "sandbox", [Item(f"b{i}", key, {"env_key": key, "command": "true"}) for i in range(many)])
wall = (time.perf_counter() - t) * 1000
out["sandboxBurst"] = {
    "sandboxes": many,
    "wallMs": round(wall),
    "perSecond": round(many / (wall / 1000), 2),
    "errors": len(r.errors),
}

# Evaluation throughput: the same gold run on 1 node, then on 3.
evals = {}
for name, only in (("oneNode", {"n0"}), ("threeNodes", None)):
    f = Fleet(FleetConfig(command=cfg["cli"], repos_dir=cfg.get("repos"), only=only), log=log)
    placed: collections.Counter[str] = collections.Counter()
    t = time.monotonic()
    res = evaluate(
        f,
        cfg["dataset"],
        "gold",
        run_id=f"bench-{name}",
        report_dir=cfg["outDir"],
        progress=False,
        instance_ids=cfg["instanceIds"],
        on_event=lambda k, placed=placed, **e: k == "placed" and placed.update([e["node"]]),
    )
    wall = time.monotonic() - t
    evals[name] = {
        "nodes": len(f.placement.nodes),
        "instances": len(cfg["instanceIds"]),
        "wallMs": round(wall * 1000),
        "instancesPerMinute": round(len(cfg["instanceIds"]) / (wall / 60), 2),
        "resolved": res["summary"]["resolved_instances"],
        "errors": len(res["errors"]),
        "placed": dict(placed),
        "summary": Path(res["summary_path"]).read_text(),
    }
out["evaluation"] = evals
out["sameReport"] = evals["oneNode"]["summary"] == evals["threeNodes"]["summary"]
for e in evals.values():
    del e["summary"]
pulls = fleet.pulls()
per = collections.Counter((node, p["key"]) for node, ps in pulls.items() for p in ps)
out["fetches"] = {"total": sum(per.values()), "maxPerNodeAndLayer": max(per.values()) if per else 0}
fleet.stop()
lc.shutdown()
print(json.dumps({"result": out}), flush=True)
