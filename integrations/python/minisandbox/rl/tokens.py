"""A trajectory record as token ids and a loss mask, the way SkyRL's generators and verl's agent loops hand
multi-turn data to the trainer: prompt = system + task (with the generation prompt), response = every later token,
mask 1 on the policy's own tokens (assistant turns), 0 on observations and templates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class ChatTokenizer(Protocol):
    """What is used of a Hugging Face tokenizer."""

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        *,
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> list[int]: ...


def _render(tokenizer: ChatTokenizer, messages: list[dict[str, Any]], generation_prompt: bool) -> list[int]:
    chat = [{"role": m["role"], "content": m["content"]} for m in messages]
    return list(tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=generation_prompt))


class HasRecord(Protocol):
    """A trajectory (``minisandbox.rl.Trajectory``): what it is as a record."""

    def to_record(self) -> dict[str, Any]: ...


def tokenize_trajectory(
    record: Mapping[str, Any] | HasRecord, tokenizer: ChatTokenizer, *, max_response_tokens: int | None = None
) -> dict[str, Any]:
    """{"prompt_ids", "response_ids", "response_mask", "truncated"} of a trajectory record (or Trajectory)."""
    rec = record if isinstance(record, Mapping) else record.to_record()
    messages = rec["messages"]
    k = rec.get("prompt_messages", 2)
    prompt = _render(tokenizer, messages[:k], True)
    response: list[int] = []
    mask: list[int] = []
    previous = prompt
    for i in range(k, len(messages)):
        own = messages[i]["role"] == "assistant"
        # After an observation the model is prompted again: the generation prompt belongs to the observation.
        full = _render(tokenizer, messages[: i + 1], generation_prompt=not own)
        common = _common_prefix(previous, full)
        if common < len(previous):
            raise ValueError(f"chat template is not prefix-stable at message {i}: the tokens before it changed")
        delta = full[common:]
        response.extend(delta)
        mask.extend([1 if own else 0] * len(delta))
        previous = full
    truncated = max_response_tokens is not None and len(response) > max_response_tokens
    if truncated:
        response, mask = response[:max_response_tokens], mask[:max_response_tokens]
    return {"prompt_ids": prompt, "response_ids": response, "response_mask": mask, "truncated": truncated}


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
