"""Check the Python adapters against the server's wire contract (``wire-contract.json``, generated from src/wire).

Run ``python contract_check.py [wire-contract.json]``: it prints one line per problem and exits 1 when the adapters
and the contract disagree (a field renamed, a default changed, a type changed on either side), 0 when they agree.

* SWE-ReX models: every request and response model of ``minisandbox.swerex.runtime`` (swe-rex's own when installed) has
  the contract's fields, required fields, defaults and types.
* Native and rollout APIs: the bodies the deployment, the mini-swe-agent environment and ``minisandbox.rl`` send
  validate against the contract's schemas (``jsonschema``), and the answer fields they read exist in the contract.
* The fleet's plans (``plan``): the fields ``minisandbox.fleet`` reads of what ``prepare --plan``,
  ``evaluate --plan`` and ``evaluate --summary-only --json`` print, and of a node's answers to its jobs, exist in
  the contract.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
from minisandbox import minisweagent as env
from minisandbox.rl import client as rl
from minisandbox.swerex import deployment, runtime

# SWE-ReX models the runtime client sends or reads, by contract name (the `{}` answers have no fields).
SWEREX_MODELS = {
    "CreateBashSessionRequest": runtime.CreateBashSessionRequest,
    "BashAction": runtime.BashAction,
    "BashInterruptAction": runtime.BashInterruptAction,
    "CloseBashSessionRequest": runtime.CloseBashSessionRequest,
    "Command": runtime.Command,
    "ReadFileRequest": runtime.ReadFileRequest,
    "WriteFileRequest": runtime.WriteFileRequest,
    "IsAliveResponse": runtime.IsAliveResponse,
    "CreateBashSessionResponse": runtime.CreateBashSessionResponse,
    "BashObservation": runtime.BashObservation,
    "CloseBashSessionResponse": runtime.CloseBashSessionResponse,
    "CommandResponse": runtime.CommandResponse,
    "ReadFileResponse": runtime.ReadFileResponse,
    "EmptyResponse": runtime.WriteFileResponse,
}

# Answer fields the adapters read, by contract model.
READ_FIELDS = {
    ("native", "SandboxInfo"): ["id", "runtime_url"],
    ("native", "ErrorResponse"): ["detail"],
    ("native", "ExecResponse"): ["stdout", "exit_code", "timed_out"],
    ("swerex", "CommandResponse"): ["stdout", "exit_code"],
    ("swerex", "SwerexceptionBody"): ["swerexception"],
    ("rollout", "GroupInfo"): ["id", "instance_id", "env_key", "problem_statement", "timings", "rollouts"],
    ("rollout", "RolloutInfo"): [
        "id",
        "group_id",
        "instance_id",
        "repetition",
        "trajectory_id",
        "parent",
        "sandbox_id",
        "from_pool",
        "state",
        "start_ms",
    ],
    ("rollout", "RolloutOutcome"): ["status", "reward", "resolved", "failure"],
    ("rollout", "ResetResponse"): ["rollout", "reset_ms"],
    ("rollout", "CheckpointResponse"): ["checkpoint_id"],
    ("rollout", "GroupList"): ["groups"],
    ("rollout", "RolloutList"): ["rollouts"],
    # What minisandbox.fleet reads of the plans the CLI prints (prepare --plan, evaluate --plan, --summary-only).
    ("plan", "PreparePlan"): ["environments", "errors"],
    ("plan", "PlannedEnvironment"): ["env_key", "instance_ids", "instance"],
    ("plan", "PlanError"): ["instance_id"],
    ("plan", "EvaluationPlan"): ["run_id", "model", "jobs"],
    ("plan", "PlannedJob"): ["instance_id", "env_key", "log_dir", "instance", "model_patch", "model_name_or_path"],
    ("plan", "EvaluationSummary"): ["summary", "summaryPath"],
    ("native", "PrepareResponse"): ["status", "error"],
    ("native", "EvaluationResponse"): ["status", "files"],
}


def norm(s: dict[str, Any]) -> str:
    """A type schema reduced to what both generators agree on (titles, bounds and defaults left out)."""
    if "anyOf" in s:
        return "|".join(sorted(norm(x) for x in s["anyOf"]))
    if "const" in s:
        return f"const:{s['const']}"
    if "enum" in s:
        return "enum:" + ",".join(sorted(map(str, s["enum"]))) if len(s["enum"]) > 1 else f"const:{s['enum'][0]}"
    t = s.get("type", "any")
    if t == "array":
        return f"array<{norm(s.get('items', {}))}>"
    if t == "object" and isinstance(s.get("additionalProperties"), dict):
        return f"object<{norm(s['additionalProperties'])}>"
    return t


def compare_model(name: str, contract: dict[str, Any], cls: Any) -> list[str]:
    ours = cls.model_json_schema()
    problems = []
    theirs_props, ours_props = contract.get("properties", {}), ours.get("properties", {})
    if set(theirs_props) != set(ours_props):
        problems.append(f"{name}: fields {sorted(ours_props)} in Python, {sorted(theirs_props)} in the contract")
    if set(contract.get("required", [])) != set(ours.get("required", [])):
        problems.append(
            f"{name}: required {ours.get('required', [])} in Python, {contract.get('required')} in the contract"
        )
    for field in set(theirs_props) & set(ours_props):
        a, b = ours_props[field], theirs_props[field]
        if norm(a) != norm(b):
            problems.append(f"{name}.{field}: type {norm(a)} in Python, {norm(b)} in the contract")
        if a.get("default") != b.get("default"):
            problems.append(
                f"{name}.{field}: default {a.get('default')!r} in Python, {b.get('default')!r} in the contract"
            )
    return problems


def sent_bodies() -> list[tuple[str, str, dict[str, Any]]]:
    """Every body the adapters send, with every option set."""
    full: dict[str, Any] = {
        "dir": "/srv/repo",
        "ttl_seconds": 600.0,
        "idle_timeout_seconds": 60.0,
        "network": True,
        "limits": {"memory_bytes": 2**31, "pids": 512, "cpu_seconds": 600, "disk_bytes": 2**33},
    }
    dep = deployment.MinisandboxDeploymentConfig(**full, env={"A": "1"}, labels={"run": "r1"}, auth_token="")
    mini = env.MinisandboxEnvironmentConfig(**full, api_key="", env={"B": "2"}, cwd="/testbed", python="3.11")
    return [
        ("native", "CreateSandboxRequest", deployment.create_sandbox_body(dep)),
        ("native", "CreateSandboxRequest", env.create_sandbox_body(mini)),
        ("native", "ExecRequest", env.execute_payload(mini, "echo hi", "", 30)),
        ("swerex", "BashAction", runtime.BashAction(command="ls").model_dump()),
        ("swerex", "Command", runtime.Command(command=["ls"], env={"X": "1"}).model_dump()),
        ("rollout", "CreateGroupRequest", rl.group_body("fixture__calc-1", 8, gold_check=True, ttl_seconds=600.0)),
        ("rollout", "RewardRequest", rl.reward_body("in_place", 300.0, "fraction")),
        ("rollout", "ResetRequest", rl.reset_body()),
        ("rollout", "ResetRequest", rl.reset_body("rg-1.0~1")),
        ("rollout", "ForkRequest", rl.fork_body(2)),
        ("rollout", "ForkRequest", rl.fork_body(2, "rg-1.0~1")),
        ("native", "ExecRequest", rl.exec_body("ls", 60.0, "/testbed", {"A": "1"}, "in", merge_output=True)),
    ]


def check(contract: dict[str, Any]) -> list[str]:
    problems = []
    for name, cls in SWEREX_MODELS.items():
        problems += compare_model(name, contract["swerex"][name], cls)
    for side, name, body in sent_bodies():
        try:
            jsonschema.validate(body, contract[side][name])
        except jsonschema.ValidationError as e:
            problems.append(f"{name} sent by the adapters does not validate: {e.message} at {list(e.absolute_path)}")
    for (side, name), fields in READ_FIELDS.items():
        missing = [f for f in fields if f not in contract[side][name].get("properties", {})]
        if missing:
            problems.append(f"{name}: the adapters read {missing}, which the contract does not have")
    return problems


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("wire-contract.json"))
    found = check(json.loads(path.read_text()))
    for p in found:
        print(p)
    print("CONTRACT OK" if not found else f"{len(found)} problem(s)")
    sys.exit(1 if found else 0)
