"""The policy: any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, a trainer's inference server)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any


class PolicyError(Exception):
    """The endpoint failed (unreachable, an error status, a malformed answer): an infrastructure failure."""


@dataclass
class Completion:
    content: str
    finish_reason: str | None
    latency_ms: float
    usage: dict[str, Any] = field(default_factory=dict)
    #: Token log-probabilities when the endpoint returned them (`logprobs: true` in `sampling`).
    logprobs: list[Any] | None = None


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
        headers = {"content-type": "application/json"}
        if self._key:
            headers["authorization"] = f"Bearer {self._key}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            started = time.perf_counter()
            req = urllib.request.Request(
                f"{self.base_url}/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
            )
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    answer = json.loads(resp.read())
                return _completion(answer, (time.perf_counter() - started) * 1000)
            except urllib.error.HTTPError as e:
                last = PolicyError(f"policy endpoint answered {e.code}: {e.read()[:500].decode(errors='replace')}")
                if e.code < 500 and e.code != 429:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, KeyError) as e:
                last = PolicyError(f"policy endpoint {self.base_url}: {getattr(e, 'reason', e)}")
            if attempt < self.retries:
                time.sleep(min(2.0**attempt, 10.0))
        raise last or PolicyError("policy endpoint failed")


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
