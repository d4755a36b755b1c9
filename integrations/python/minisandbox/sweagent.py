"""SWE-agent's ``run-batch`` on minisandbox, by configuration alone: an instances file (``expert_file``) whose every
entry is a SWE-ReX ``remote`` deployment on the server's instance-addressed runtime ``<url>/run/<instance_id>/<key>``.
The server creates the instance's sandbox at the first request and deletes it when SWE-agent closes the runtime.

    python -m minisandbox.sweagent instances --dataset DATASET [--url URL] [--repetitions N] -o instances.json
    sweagent run-batch --config config/default.yaml --config "$(python -m minisandbox.configs sweagent)" \\
        --instances.path instances.json --output_dir OUT

The file holds the server's token (SWE-ReX's ``auth_token`` is a required string), so it is written readable by its
owner only. Standard library only (parquet datasets need pyarrow).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .client import DEFAULT_URL
from .token import default_token

__all__ = ["expert_instances", "load_rows", "main", "write_instances"]


def _rows_of_file(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    if raw[:4] == b"PAR1":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-not-found]
        except ImportError:
            raise SystemExit(
                f"{path}: a parquet dataset needs pyarrow (pip install pyarrow), or give JSON / JSONL"
            ) from None
        return pq.read_table(path).to_pylist()
    text = raw.decode("utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_rows(dataset: str) -> list[dict[str, Any]]:
    """Rows of a SWE-bench dataset: a JSON list, JSONL or parquet file, or a directory of them (each id once)."""
    p = Path(dataset)
    if not p.exists():
        raise SystemExit(f"{dataset}: no such file or directory")
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.suffix in (".json", ".jsonl", ".parquet"))
    seen: dict[str, dict[str, Any]] = {}
    for f in files:
        for row in _rows_of_file(f):
            if isinstance(row, dict) and "instance_id" in row:
                seen.setdefault(row["instance_id"], row)
    if not seen:
        raise SystemExit(f"{dataset}: no SWE-bench rows (objects with instance_id) found")
    return list(seen.values())


def expert_instances(
    rows: Iterable[dict[str, Any]], url: str, token: str, *, repetitions: int = 1, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """One SWE-agent ``BatchInstance`` per (row, repetition)."""
    base = url.rstrip("/")
    out = []
    for row in rows:
        iid = row["instance_id"]
        for rep in range(repetitions):
            host = f"{base}/run/{urllib.parse.quote(iid, safe='')}/r{rep}"
            out.append(
                {
                    "env": {
                        "deployment": {
                            "type": "remote",
                            "host": host,
                            "port": None,
                            "auth_token": token,
                            "timeout": timeout,
                        },
                        "repo": {"type": "preexisting", "repo_name": "testbed", "base_commit": row["base_commit"]},
                    },
                    "problem_statement": {
                        "type": "text",
                        "text": row.get("problem_statement", ""),
                        "id": iid if repetitions == 1 else f"{iid}__r{rep}",
                    },
                }
            )
    return out


def write_instances(path: str, instances: list[dict[str, Any]]) -> None:
    """JSON (also valid YAML), mode 0600: it carries the token."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(instances, f, indent=1)
        f.write("\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minisandbox.sweagent", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("instances", help="write a SWE-agent expert_file for a dataset on a minisandbox server")
    p.add_argument("--dataset", required=True, help="SWE-bench dataset: JSON, JSONL, parquet, or a directory")
    p.add_argument("--url", default=os.environ.get("MINISANDBOX_URL") or DEFAULT_URL)
    p.add_argument("--token", default=None, help="default: $MINISANDBOX_API_KEY, else the server's token file")
    p.add_argument("--home", default=None, help="minisandbox home whose token file to read")
    p.add_argument("--repetitions", type=int, default=1, help="attempts per instance (each its own sandbox)")
    p.add_argument("--timeout", type=float, default=30.0, help="SWE-ReX client timeout per request (seconds)")
    p.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    if a.repetitions < 1:
        ap.error("--repetitions must be at least 1")
    token = a.token if a.token is not None else (os.environ.get("MINISANDBOX_API_KEY") or default_token(a.home))
    if not token:
        ap.error("no token: give --token, set $MINISANDBOX_API_KEY, or run next to the server's home (--home)")
    instances = expert_instances(load_rows(a.dataset), a.url, token, repetitions=a.repetitions, timeout=a.timeout)
    write_instances(a.output, instances)
    print(f"{len(instances)} instance(s) written to {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
