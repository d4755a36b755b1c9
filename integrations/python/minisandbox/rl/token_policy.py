"""The policy in tokens (token-in/token-out): each turn sends the trajectory's ids so far to a `Generation` (the
trainer's own — verl's server manager, SkyRL's inference engine client — or a vLLM / SGLang server) and keeps
exactly what comes back. The agent loop still reads text (the sampled ids decoded) and writes observations as text;
the session turns each observation into ids once, appends them with loss mask 0, and never re-renders the past.

    policy = TokenPolicy(VLLMCompletions("http://127.0.0.1:8001/v1", "my-policy"), tokenizer,
                         sampling={"temperature": 1.0}, max_response_tokens=8192)
    runner = TrajectoryRunner(client, policy)        # every Trajectory then has .tokens (a TokenRecord)

Limits: `max_response_tokens` bounds the trajectory's response (sampled + observation ids); a turn asks for at most
what is left (and at most the sampling's own ``max_tokens``); when nothing is left the agent stops and the record's
stop reason is "length". Engine failures are `PolicyError` (infrastructure); a template that cannot render an
observation marks the record (`problem`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from .chat import ChatTokens
from .generation import Generation, Sample
from .policy import Completion, PolicyError, ResponseLengthExceeded
from .tokens import ChatTokenizer, TemplateError, TokenRecord

#: Sampling keys the session sets itself, per turn.
_PER_TURN = ("max_tokens", "max_new_tokens")


class TokenPolicy:
    """How trajectories sample: the generation, the tokenizer, sampling params and limits. `loop`: the event loop
    the generation's coroutines must run on (a trainer's); without one each turn runs its own."""

    def __init__(
        self,
        generation: Generation,
        tokenizer: ChatTokenizer,
        *,
        sampling: Mapping[str, Any] | None = None,
        max_response_tokens: int | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        chat: ChatTokens | None = None,
    ):
        given = dict(sampling or {})
        per_turn = next((given[k] for k in _PER_TURN if given.get(k) is not None), None)
        if max_response_tokens is None and per_turn is None:
            raise ValueError("a TokenPolicy needs a limit: max_response_tokens, or max_tokens in sampling")
        for limit in (max_response_tokens, per_turn):
            if limit is not None and (not isinstance(limit, int) or limit < 1):
                raise ValueError(f"token limits must be whole numbers of at least 1, got {limit!r}")
        self.generation = generation
        self.chat = chat or ChatTokens(tokenizer, template_kwargs)
        self.sampling = {k: v for k, v in given.items() if k not in _PER_TURN}
        self.max_response_tokens = max_response_tokens
        self.max_tokens_per_turn: int | None = per_turn
        self.loop = loop

    def session(self, trajectory_id: str) -> TokenSession:
        return TokenSession(self, trajectory_id)


class TokenSession:
    """One trajectory's ids. The agent calls `complete(messages)` with its whole chat; everything after the reply
    it was last given (which must be there, unchanged) is observation."""

    def __init__(self, policy: TokenPolicy, trajectory_id: str):
        self.policy = policy
        self.trajectory_id = trajectory_id
        self.base_url = getattr(policy.generation, "base_url", type(policy.generation).__name__)
        self.model = getattr(policy.generation, "model", None) or "policy"
        self.prompt_ids: list[int] | None = None
        self.response_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] | None = []
        self.stop_reason = "stop"
        self.problem: str | None = None
        self._seen = 0
        self._last: list[int] = []
        self._last_text: str | None = None

    def complete(self, messages: list[dict[str, Any]], *, user: str | None = None) -> Completion:
        self._account(messages)
        room = self._room()
        if room <= 0:
            self.stop_reason = "length"
            raise ResponseLengthExceeded(f"the response-length limit ({self.policy.max_response_tokens}) is reached")
        prompt = [*(self.prompt_ids or []), *self.response_ids]
        started = time.perf_counter()
        s = self._run(
            self.policy.generation.sample(prompt, self.policy.sampling, session=self.trajectory_id, max_tokens=room)
        )
        latency = (time.perf_counter() - started) * 1000
        self._append(s.ids, 1, s.logprobs)
        self._last, self.stop_reason = s.ids, s.finish
        self._last_text = self.policy.chat.decode(s.ids)
        self._seen = len(messages)
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(s.ids)}
        return Completion(self._last_text, s.finish, latency, usage, s.logprobs, list(s.ids))

    def record(self) -> TokenRecord:
        lps = None if self.logprobs is None else list(self.logprobs)
        return TokenRecord(
            list(self.prompt_ids or []),
            list(self.response_ids),
            list(self.loss_mask),
            lps,
            self.stop_reason,
            "sampled",
            self.problem,
        )

    def _account(self, messages: list[dict[str, Any]]) -> None:
        """The prompt on the first call; after that the observations that follow the last reply."""
        try:
            if self.prompt_ids is None:
                self.prompt_ids = self.policy.chat.prompt(messages)
                self._seen = len(messages)
                return
            reply = messages[self._seen] if len(messages) > self._seen else {}
            if reply.get("role") != "assistant" or reply.get("content") != self._last_text:
                raise ValueError("the agent must keep the policy's last reply, unchanged, before asking again")
            ids = self.policy.chat.observation(messages[self._seen + 1 :], last=self._last)
        except TemplateError as e:
            self.problem = str(e)
            raise
        left = self._left()
        if left is not None and len(ids) > left:
            ids = ids[: max(left, 0)]
            self.stop_reason = "length"
        self._append(ids, 0, None)

    def _left(self) -> int | None:
        """What is left of the response-length limit (None: no limit)."""
        limit = self.policy.max_response_tokens
        return None if limit is None else limit - len(self.response_ids)

    def _room(self) -> int:
        """Tokens the next turn may sample."""
        limits = [self.policy.max_tokens_per_turn, self._left()]
        return min(x for x in limits if x is not None)

    def _append(self, ids: list[int], mask: int, logprobs: list[float] | None) -> None:
        self.response_ids.extend(ids)
        self.loss_mask.extend([mask] * len(ids))
        if self.logprobs is None:
            return
        if mask and logprobs is None:
            self.logprobs = None  # the engine gave none: the trajectory has none
        else:
            self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def _run(self, coro: Coroutine[Any, Any, Sample]) -> Sample:
        """The generation's coroutine on the policy's loop (from the agent's thread), else on a loop of its own."""
        loop = self.policy.loop
        if loop is not None and _running_loop() is loop:
            coro.close()
            raise RuntimeError("the agent runs on the generation's own event loop: run it in a thread")
        try:
            if loop is None:
                return asyncio.run(coro)
            return asyncio.run_coroutine_threadsafe(coro, loop).result()
        except PolicyError:
            raise
        except Exception as e:  # the trainer's engine, whatever it raises, is infrastructure
            raise PolicyError(f"generation failed: {type(e).__name__}: {e}") from e


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
