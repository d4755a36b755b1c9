"""Token-in/token-out generation: prompt ids in; the sampled ids, their logprobs and why sampling stopped out.

- `VerlGeneration`: verl's ``AsyncLLMServerManager`` (an agent loop's ``self.server_manager``):
  ``await generate(request_id=..., prompt_ids=..., sampling_params=...)`` -> ``TokenOutput(token_ids, log_probs,
  stop_reason)``; the request id keeps a trajectory on one server (prefix cache).
- `SkyRLGeneration`: SkyRL's inference engine client (``InferenceEngineInterface``, e.g. ``RemoteInferenceClient``;
  older releases' ``InferenceEngineClient``): ``await generate(InferenceEngineInput) -> InferenceEngineOutput``
  (``response_ids``, ``response_logprobs``, ``stop_reasons``), one session id per trajectory.
- `VLLMCompletions`: a vLLM server's ``/v1/completions`` with the prompt as token ids, ``return_token_ids`` (sampled
  ids as ``choices[0].token_ids``; older servers: ``return_tokens_as_token_ids``, tokens as ``token_id:N``) and
  ``logprobs``.
- `SGLangGeneration`: an SGLang server's native ``/generate`` with ``input_ids`` and ``return_logprob``
  (``meta_info.output_token_logprobs``: ``[logprob, id, text]`` per sampled token).

Each `sample` asks for at most `max_tokens` new tokens (what is left of the trajectory's response length, or less);
an engine that fails raises `PolicyError` (an infrastructure failure, not the policy's)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from .policy import PolicyError, post_json


@dataclass
class Sample:
    ids: list[int]
    logprobs: list[float] | None
    #: "stop" or "length" (`max_tokens` reached).
    finish: str


class Generation(Protocol):
    async def sample(
        self, prompt_ids: list[int], sampling: dict[str, Any], *, session: str, max_tokens: int
    ) -> Sample: ...


def _finish(reason: Any, ids: list[int], max_tokens: int) -> str:
    """An engine's finish reason in our two words; an aborted request is the engine's failure."""
    if reason in ("abort", "aborted"):
        raise PolicyError("the inference engine aborted the request")
    if reason in ("stop", "length"):
        return str(reason)
    # verl says "completed" for both, others may say nothing: a reply as long as allowed was cut.
    return "length" if len(ids) >= max_tokens else "stop"


def _logprobs(values: Any, ids: list[int]) -> list[float] | None:
    if values is None:
        return None
    out = [float(v) for v in values]
    if len(out) != len(ids):
        raise PolicyError(f"the engine returned {len(out)} logprobs for {len(ids)} sampled tokens")
    return out


class VerlGeneration:
    """verl's server manager. Sampling params are verl's (``temperature``, ``top_p``, ``top_k``, ``logprobs``...)."""

    def __init__(self, server_manager: Any):
        self.server_manager = server_manager

    async def sample(self, prompt_ids: list[int], sampling: dict[str, Any], *, session: str, max_tokens: int) -> Sample:
        # The server pops max_tokens from the dict it is given: a fresh one per turn.
        params = {**sampling, "max_tokens": max_tokens}
        out = await self.server_manager.generate(
            request_id=session, prompt_ids=list(prompt_ids), sampling_params=params
        )
        ids = [int(i) for i in out.token_ids]
        return Sample(ids, _logprobs(out.log_probs, ids), _finish(out.stop_reason, ids, max_tokens))


class SkyRLGeneration:
    """SkyRL's inference engine client. Sampling params are the engine backend's (vLLM's: ``max_tokens``,
    ``temperature``, ``logprobs``: 0 for the sampled token's own...), as SkyRL's trainer passes them."""

    def __init__(self, client: Any, *, model: str | None = None):
        self.client = client
        self.model = model

    async def sample(self, prompt_ids: list[int], sampling: dict[str, Any], *, session: str, max_tokens: int) -> Sample:
        request = {
            "prompts": None,
            "prompt_token_ids": [list(prompt_ids)],
            "sampling_params": {**sampling, "max_tokens": max_tokens},
            "session_ids": [session],
        }
        if self.model is None:
            out = await self.client.generate(request)
        else:
            out = await self.client.generate(request, model=self.model)
        ids = [int(i) for i in out["response_ids"][0]]
        lps = out.get("response_logprobs")
        return Sample(ids, _logprobs(lps[0] if lps else None, ids), _finish(out["stop_reasons"][0], ids, max_tokens))


class _HTTPGeneration:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 600.0, retries: int = 2):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        url, key, timeout, retries = f"{self.base_url}{path}", self.api_key, self.timeout, self.retries
        return await asyncio.to_thread(post_json, url, body, api_key=key, timeout=timeout, retries=retries)


class VLLMCompletions(_HTTPGeneration):
    """vLLM's OpenAI-compatible completions (`base_url` like ".../v1"). Sampling params are vLLM's."""

    def __init__(self, base_url: str, model: str = "policy", **kwargs: Any):
        super().__init__(base_url, **kwargs)
        self.model = model

    async def sample(self, prompt_ids: list[int], sampling: dict[str, Any], *, session: str, max_tokens: int) -> Sample:
        body = {
            **sampling,
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "user": session,
        }
        answer = await self._post("/completions", body)
        try:
            choice = answer["choices"][0]
            lp = choice.get("logprobs") or {}
            ids = choice.get("token_ids")
            if ids is None:
                ids = [int(str(t).rpartition("token_id:")[2]) for t in lp["tokens"]]
            ids = [int(i) for i in ids]
            return Sample(
                ids, _logprobs(lp.get("token_logprobs"), ids), _finish(choice["finish_reason"], ids, max_tokens)
            )
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise PolicyError(f"{self.base_url}/completions: no sampled token ids in the answer ({e!r})") from e


class SGLangGeneration(_HTTPGeneration):
    """SGLang's native ``/generate`` (`base_url`: the server's root). Sampling params are SGLang's
    (``temperature``, ``top_p``...; ``max_new_tokens`` is set here)."""

    async def sample(self, prompt_ids: list[int], sampling: dict[str, Any], *, session: str, max_tokens: int) -> Sample:
        params = {**sampling, "max_new_tokens": max_tokens}
        body = {"input_ids": list(prompt_ids), "sampling_params": params, "return_logprob": True}
        answer = await self._post("/generate", body)
        try:
            meta = answer["meta_info"]
            triples = meta["output_token_logprobs"]
            ids = [int(t[1]) for t in triples]
            finish = (meta.get("finish_reason") or {}).get("type")
            return Sample(ids, _logprobs([t[0] for t in triples], ids), _finish(finish, ids, max_tokens))
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise PolicyError(f"{self.base_url}/generate: no sampled token ids in the answer ({e!r})") from e
