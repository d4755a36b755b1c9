"""The package supports Python 3.9 (pyproject's requires-python): it compiles and its standard-library parts run there
against a real server. The type checker cannot target 3.9 and the extras' wheels may not exist for it, so what only
3.10 evaluates at run time (``X | None`` in pydantic models) is checked in the source."""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import minisandbox
import pytest

from .conftest import Server

PACKAGE = Path(minisandbox.__file__).parent


def python39() -> str | None:
    """``$MINISANDBOX_TEST_PYTHON39``, else pyenv's 3.9, else a python3.9 on PATH (not a pyenv shim: it needs pyenv's
    own environment to choose)."""
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))
    on_path = shutil.which("python3.9")
    if on_path and "/shims/" in on_path:
        on_path = None
    return os.environ.get("MINISANDBOX_TEST_PYTHON39") or (pyenv[-1] if pyenv else None) or on_path


@pytest.fixture(scope="module")
def py39() -> str:
    found = python39()
    if not found:
        pytest.skip("SKIPPED LOUDLY: no Python 3.9 (set MINISANDBOX_TEST_PYTHON39, or put python3.9 on PATH)")
    return found


def run39(py39: str, code: str, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(PACKAGE.parent), "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run(
        [py39, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_every_module_compiles_under_python_3_9(py39: str) -> None:
    code = """
        import pathlib, sys
        for p in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
            compile(p.read_text(), str(p), "exec", dont_inherit=True)
        print("compiled")
    """
    assert run39(py39, code, str(PACKAGE)) == "compiled\n"


def test_the_standard_library_parts_run_under_python_3_9(py39: str, server: Server, workdir: Path) -> None:
    code = """
        import sys
        import minisandbox.configs, minisandbox.sweagent, minisandbox.rl.skyrl, minisandbox.rl.verl
        from minisandbox import Client, SandboxNotFoundError
        from minisandbox.minisweagent import MinisandboxEnvironment, Submitted
        url, token, src = sys.argv[1:4]
        c = Client(url, token)
        sb = c.create_sandbox(dir=src)
        assert c.exec(sb["id"], "cat /testbed/f")["stdout"] == "from 3.9\\n"
        c.delete_sandbox(sb["id"])
        try:
            c.get_sandbox(sb["id"])
            raise SystemExit("no error")
        except SandboxNotFoundError:
            pass
        with MinisandboxEnvironment(url=url, api_key=token, allow_empty=True) as env:
            assert env.execute("sleep 5", timeout=1)["returncode"] == -1
            try:
                env.execute("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
                raise SystemExit("not submitted")
            except Submitted:
                pass
        print(sys.version_info[:2])
    """
    (workdir / "f").write_text("from 3.9\n")
    assert run39(py39, code, server.url, server.token, str(workdir)) == "(3, 9)\n"


def test_pydantic_models_use_no_annotation_that_python_3_9_cannot_evaluate() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if "BaseModel" not in bases:
                continue
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and any(
                    isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for n in ast.walk(stmt.annotation)
                ):
                    found.append(f"{path.relative_to(PACKAGE)}:{stmt.lineno} {node.name}")
    assert found == [], "pydantic evaluates these on Python 3.9, which has no `X | Y`: use Optional / Union"
    assert any("swerex" in str(p) for p in PACKAGE.rglob("models.py")), "the models were looked at"
