"""Token ids the agent loop itself appends between sampled turns: the prompt, each observation with the next
generation prompt, and the end-of-turn token a sampled turn lacks. Observations are rendered on a fixed base
conversation (system + user, no assistant turn) and cut after it, so their ids never depend on how the template
renders earlier assistant turns (the approach SkyRL's generator and verl's tool loop take): templates that rewrite
history (Qwen3 drops earlier reasoning) give the same observation ids as any other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .tokens import ChatTokenizer, TemplateError, render

BASE = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "I am a user."},
]


class ChatTokens:
    """The loop's own ids for one tokenizer (and chat template arguments, e.g. ``enable_thinking``)."""

    def __init__(self, tokenizer: ChatTokenizer, template_kwargs: Mapping[str, Any] | None = None):
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos: int | None = int(eos) if isinstance(eos, int) else None
        base = render(tokenizer, BASE, False, self.template_kwargs)
        # Up to the base's last end-of-turn token: what the template puts after it (a newline) opens the next turn.
        if self.eos is not None and self.eos in base:
            base = base[: len(base) - base[::-1].index(self.eos)]
        self.base = base

    def prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """The prompt: the opening messages with the generation prompt."""
        return render(self.tokenizer, messages, True, self.template_kwargs)

    def observation(self, messages: list[dict[str, Any]], *, last: list[int]) -> list[int]:
        """Ids after a sampled turn (`last`): its end-of-turn token if it stopped without one, the observation
        messages and the next generation prompt."""
        full = render(self.tokenizer, [*BASE, *messages], True, self.template_kwargs)
        if full[: len(self.base)] != self.base:
            raise TemplateError("the chat template renders its opening messages differently when more follow")
        close = [self.eos] if self.eos is not None and (not last or last[-1] != self.eos) else []
        return close + full[len(self.base) :]

    def decode(self, ids: list[int]) -> str:
        """The text of sampled ids, as the agent reads it (special tokens left out)."""
        decode = getattr(self.tokenizer, "decode", None)
        if decode is None:
            raise TypeError("token-in/token-out needs a tokenizer that can decode (a Hugging Face tokenizer)")
        return str(decode(ids, skip_special_tokens=True))
