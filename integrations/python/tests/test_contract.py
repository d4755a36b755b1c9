"""The adapters agree with the server's wire contract (``contract_check.py`` against ``wire-contract.json``), and the
check finds a drift when there is one."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jsonschema")
pytest.importorskip("pydantic")

import contract_check

CONTRACT = Path(contract_check.__file__).with_name("wire-contract.json")


def contract() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CONTRACT.read_text())
    return data


def test_the_adapters_agree_with_the_committed_contract() -> None:
    r = subprocess.run([sys.executable, contract_check.__file__], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "CONTRACT OK"


def test_a_changed_default_a_renamed_field_and_a_missing_read_field_are_found() -> None:
    c = copy.deepcopy(contract())
    c["swerex"]["BashAction"]["properties"]["timeout"]["default"] = 5
    c["swerex"]["Command"]["properties"]["merge_streams"] = c["swerex"]["Command"]["properties"].pop(
        "merge_output_streams"
    )
    del c["native"]["SandboxInfo"]["properties"]["runtime_url"]
    problems = contract_check.check(c)
    assert any(p.startswith("BashAction.timeout: default None in Python, 5") for p in problems), problems
    assert any(p.startswith("Command: fields") for p in problems), problems
    assert any("SandboxInfo: the adapters read ['runtime_url']" in p for p in problems), problems


def test_a_body_the_contract_refuses_is_found() -> None:
    c = copy.deepcopy(contract())
    c["native"]["ExecRequest"]["additionalProperties"] = False
    c["native"]["ExecRequest"]["properties"].pop("merge_output")
    problems = contract_check.check(c)
    assert any("ExecRequest sent by the adapters does not validate" in p for p in problems), problems
