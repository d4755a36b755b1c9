"""The policy as text: any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, a trainer's inference server).
Its trajectories carry text only; for the ids the policy sampled use `TokenPolicy` (``minisandbox.rl.token_policy``).

Every policy gives each trajectory a session (`policy.session(trajectory_id)`): the agent loop asks it for the next
reply with `complete(messages)`; a token session also keeps the trajectory's ids (`record()`)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Protocol

from .tokens import TokenRecord


class PolicyError(Exception):
    """The endpoint failed (unreachable, an error status, a malformed answer): an infrastructure failure."""


class ResponseLengthExceeded(Exception):
    """No token is left of the trajectory's response-length limit: the agent stops (stop reason "length")."""


@dataclass
class Completion:
    content: str
    finish_reason: str | None
    latency_ms: float
    usage: dict[str, Any] = field(default_factory=dict)
    #: Token log-probabilities when the endpoint returned them (`logprobs: true` in `sampling`).
    logprobs: list[Any] | None = None
    #: The ids the policy sampled (token-in/token-out); None for a text endpoint.
    token_ids: list[int] | None = None


class Session(Protocol):
    """One trajectory's view of the policy."""

    def complete(self, messages: list[dict[str, Any]], *, user: str | None = None) -> Completion: ...

    def record(self) -> TokenRecord | None: ...


def post_json(url: str, body: dict[str, Any], *, api_key: str | None, timeout: float, retries: int) -> Any:
    """POST JSON, answer JSON; server errors, 429 and unreachable endpoints are retried with backoff, and what
    still fails is a `PolicyError`."""
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    last: Exception | None = None
    for attempt in range(retries + 1):
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            last = PolicyError(f"policy endpoint answered {e.code}: {e.read()[:500].decode(errors='replace')}")
            if e.code < 500 and e.code != 429:
                break
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError) as e:
            last = PolicyError(f"policy endpoint {url}: {getattr(e, 'reason', e)}")
        if attempt < retries:
            time.sleep(min(2.0**attempt, 10.0))
    raise last or PolicyError("policy endpoint failed")


class OpenAIPolicy:
    """POST {base_url}/chat/completions; `base_url` like OPENAI_BASE_URL (".../v1")."""

    def __init__(
        self,
        base_url: str | None = None,
        model: str = "policy",
        *,
        api_key: str | None = None,
        sampling: dict[str, Any] | None = None,
        timeout: float = 600.0,
        retries: int = 2,
    ):
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "http://127.0.0.1:8000/v1").rstrip("/")
        self.model = model
        self._key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.sampling = dict(sampling or {})
        self.timeout = timeout
        self.retries = retries

    def complete(self, messages: list[dict[str, Any]], *, user: str | None = None) -> Completion:
        body: dict[str, Any] = {"model": self.model, "messages": [_wire(m) for m in messages], **self.sampling}
        if user is not None:
            body["user"] = user
        started = time.perf_counter()
        answer = post_json(
            f"{self.base_url}/chat/completions", body, api_key=self._key, timeout=self.timeout, retries=self.retries
        )
        try:
            return _completion(answer, (time.perf_counter() - started) * 1000)
        except (KeyError, IndexError, TypeError) as e:
            raise PolicyError(f"policy endpoint {self.base_url}: malformed answer ({e!r})") from e

    def session(self, trajectory_id: str) -> TextSession:
        return TextSession(self, trajectory_id)


class TextSession:
    """A trajectory on a text endpoint: requests carry its id as `user`; there are no sampled ids to keep."""

    def __init__(self, policy: OpenAIPolicy, trajectory_id: str):
        self.policy = policy
        self.trajectory_id = trajectory_id
        self.base_url, self.model = policy.base_url, policy.model

    def complete(self, messages: list[dict[str, Any]], *, user: str | None = None) -> Completion:
        return self.policy.complete(messages, user=user or self.trajectory_id)

    def record(self) -> TokenRecord | None:
        return None


def _wire(message: dict[str, Any]) -> dict[str, Any]:
    """What the endpoint gets of a message: role and content (our bookkeeping stays here)."""
    return {"role": message["role"], "content": message["content"]}


def _completion(answer: dict[str, Any], latency_ms: float) -> Completion:
    choice = answer["choices"][0]
    content = choice["message"].get("content")
    if not isinstance(content, str):
        raise PolicyError(f"policy endpoint returned no text content: {json.dumps(choice)[:300]}")
    logprobs = (choice.get("logprobs") or {}).get("content")
    return Completion(content, choice.get("finish_reason"), latency_ms, answer.get("usage") or {}, logprobs)
