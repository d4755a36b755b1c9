"""A thin client of ``minisandbox serve``'s native API, standard library only.

    from minisandbox import Client
    with Client() as c:                                  # $MINISANDBOX_URL, token from the server's token file
        sb = c.create_sandbox(instance_id="fixture__calc-1")
        print(c.exec(sb["id"], "cd /testbed && git status")["stdout"])
        c.delete_sandbox(sb["id"])

Every answer is the server's JSON (the wire contract, ``wire-contract.json``); every refusal raises the error class of
its ``code`` (``minisandbox.errors``); no answer at all raises ``ServerUnreachableError``.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import LimitError, MinisandboxError, ServerUnreachableError, error_for
from .token import default_token

__all__ = ["DEFAULT_URL", "Client", "exec_body"]

DEFAULT_URL = "http://127.0.0.1:8000"


class Client:
    """One server. ``url`` default: ``$MINISANDBOX_URL``; ``token`` default: ``$MINISANDBOX_API_KEY``, else the token
    file ``minisandbox serve`` wrote under ``home`` (``""`` sends none)."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, home: str | None = None, timeout: float = 600.0
    ):
        self.url = (url or os.environ.get("MINISANDBOX_URL") or DEFAULT_URL).rstrip("/")
        if token is None:
            token = os.environ.get("MINISANDBOX_API_KEY") or default_token(home)
        self.token = token
        self.timeout = timeout

    # ---------------------------------------------------------------------------------------------- transport

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None, raw: bool = False
    ) -> Any:
        """One call: JSON in, JSON out (``raw``: the answer's bytes). Errors as described in the module doc."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("X-API-Key", self.token)
        what = f"{method} {path.split('?')[0]}"
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                content = resp.read()
                return content if raw else json.loads(content or b"null")
        except urllib.error.HTTPError as e:
            content = e.read()
            try:
                parsed: Any = json.loads(content)
            except ValueError:
                parsed = content.decode(errors="replace")
            err = error_for(e.code, parsed, what)
            if isinstance(err, LimitError) and e.headers.get("Retry-After"):
                err.retry_after = float(e.headers["Retry-After"])
            raise err from None
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            raise ServerUnreachableError(
                f"{what}: no answer from minisandbox at {self.url} ({reason}); start one with `minisandbox serve`",
                code="unreachable",
            ) from None

    def close(self) -> None:
        """Nothing to release (no connection is kept); for symmetry with ``with``."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------------------------------------- sandboxes

    def healthy(self) -> bool:
        try:
            return self.request("GET", "/healthz", timeout=5).get("status") == "ok"
        except MinisandboxError:
            return False

    def create_sandbox(self, **body: Any) -> dict[str, Any]:
        """``POST /sandboxes``: ``dir | instance_id | env_key``, ``network``, ``limits``, ``ttl_seconds``,
        ``idle_timeout_seconds``, ``env``, ``cwd``, ``labels`` (the contract's ``CreateSandboxRequest``)."""
        return self.request("POST", "/sandboxes", {k: v for k, v in body.items() if v is not None})

    def get_sandbox(self, sandbox_id: str) -> dict[str, Any]:
        return self.request("GET", f"/sandboxes/{_q(sandbox_id)}")

    def list_sandboxes(self, **labels: str) -> list[dict[str, Any]]:
        """Live sandboxes (those carrying every given label, when given)."""
        return self.request("GET", f"/sandboxes{_labels(labels)}")["sandboxes"]

    def delete_sandboxes(self, **labels: str) -> list[str]:
        """Delete every sandbox carrying all these labels (at least one); returns their ids."""
        if not labels:
            raise ValueError("delete_sandboxes needs at least one label")
        return self.request("DELETE", f"/sandboxes{_labels(labels)}")["deleted"]

    def delete_sandbox(self, sandbox_id: str) -> bool:
        """Delete a sandbox; False when it was already gone."""
        try:
            return bool(self.request("DELETE", f"/sandboxes/{_q(sandbox_id)}")["deleted"])
        except MinisandboxError as e:
            if e.status == 404:
                return False
            raise

    def exec(
        self,
        sandbox_id: str,
        command: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        merge_output: bool = False,
    ) -> dict[str, Any]:
        """One command in a fresh process (a string runs under ``bash -c``). ``timeout`` in seconds: on expiry the
        whole process tree is killed and the answer has ``timed_out`` and the output so far."""
        body = exec_body(command, timeout, cwd, env, stdin, merge_output)
        wait = None if timeout is None else timeout + 60
        return self.request("POST", f"/sandboxes/{_q(sandbox_id)}/exec", body, timeout=wait)

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        return self.request("GET", f"/sandboxes/{_q(sandbox_id)}/files?path={_q(path)}", raw=True)

    def diff(self, sandbox_id: str) -> str:
        return self.request("GET", f"/sandboxes/{_q(sandbox_id)}/diff")["diff"]

    def evaluate(self, sandbox_id: str) -> Any:
        return self.request("POST", f"/sandboxes/{_q(sandbox_id)}/evaluate", {})["result"]

    # ---------------------------------------------------------------------- many nodes (admin token)

    def store_layers(self) -> list[dict[str, Any]]:
        """Layers this node holds: ``key``, ``manifest_sha256``, ``materialized`` (in its cache, not only its store)."""
        return self.request("GET", "/store/layers")["layers"]

    def store_listing(self) -> dict[str, Any]:
        """``layers`` (as ``store_layers``) and ``images``: each name an image of this node's store goes by (a
        canonical reference) with its root filesystem's layer (``name``, ``rootfs``; none from older servers)."""
        listing = self.request("GET", "/store/layers")
        return {"layers": listing["layers"], "images": listing.get("images") or []}

    def set_peers(self, urls: Sequence[str]) -> list[str]:
        """Replace the servers this one may fetch layers from (beside ``serve --peer-allow``)."""
        return self.request("PUT", "/peers", {"urls": list(urls)})["peers"]

    def fetch_layer(self, key: str, sources: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """Make layer ``key`` present in this node's cache, fetching it from ``sources`` (``{url, token,
        manifest_sha256}``) when missing."""
        return self.request("POST", f"/cache/layers/{_q(key)}", {"sources": list(sources)})

    def fetch_image(self, name: str, sources: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """Make image ``name`` (a reference) present in this node's store, taking it from ``sources`` (``{url,
        token}``: peers that hold it) when missing: by file, only what this store lacks, all of it verified. Raises
        ``layer_unavailable`` when no source could give it (its registry is then the way: a job pulls it)."""
        return self.request("POST", "/cache/images", {"name": name, "sources": list(sources)})

    def prepare_environment(
        self,
        instance: dict[str, Any],
        *,
        sources: Sequence[Mapping[str, Any]] = (),
        build: bool = True,
        image: str | None = None,
    ) -> dict[str, Any]:
        """Make an instance's environment present on this node: already here, fetched, or built; on ``image`` (a
        plan's), that image: here, or pulled. ``instance`` is normalized, as a plan gives it (``task_format`` set:
        the contract's ``TaskInstance``)."""
        body: dict[str, Any] = {"instance": instance, "sources": list(sources), "build": build}
        if image is not None:
            body["image"] = image
        return self.request("POST", "/environments", body)

    def evaluate_job(
        self,
        instance: dict[str, Any],
        model_patch: str,
        model_name_or_path: str,
        *,
        timeout_seconds: float | None = None,
        labels: dict[str, str] | None = None,
        sources: Sequence[Mapping[str, Any]] = (),
        build: bool = True,
        image: str | None = None,
    ) -> dict[str, Any]:
        """Evaluate one instance (normalized, as a plan gives it) as the SWE-bench harness does, on ``image`` when
        its plan names one; the answer carries its files (base64)."""
        body: dict[str, Any] = {
            "instance": instance,
            "model_patch": model_patch,
            "model_name_or_path": model_name_or_path,
            "sources": list(sources),
            "build": build,
        }
        if image is not None:
            body["image"] = image
        if timeout_seconds is not None:
            body["timeout_seconds"] = timeout_seconds
        if labels:
            body["labels"] = labels
        wait = None if timeout_seconds is None else timeout_seconds + 600
        return self.request("POST", "/evaluations", body, timeout=wait)


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _labels(labels: dict[str, str]) -> str:
    return "?" + "&".join(f"label={_q(f'{k}={v}')}" for k, v in labels.items()) if labels else ""


def exec_body(
    command: str | list[str],
    timeout: float | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    merge_output: bool = False,
) -> dict[str, Any]:
    """The body of an exec (the contract's ``ExecRequest``), for a sandbox or a rollout; ``timeout`` in seconds."""
    body = {
        "command": command,
        "timeout_ms": None if timeout is None else timeout * 1000,
        "cwd": cwd,
        "env": env,
        "stdin": stdin,
        "merge_output": merge_output,
    }
    return {k: v for k, v in body.items() if v is not None}
