"""A trajectory as the trainer sees it: prompt ids, response ids, the loss mask over them and the rollout's logprobs.

Two sources. **Sampled** (token-in/token-out, `TokenPolicy`): the ids are exactly those the policy sampled and the
observation ids the loop appended; nothing is re-rendered. **Re-tokenised** (`retokenize`, only when the policy was
a text endpoint): the chat is rendered turn by turn with the chat template, which is right only when the template is
prefix-stable; a template that is not (Qwen3-style: earlier reasoning dropped) marks that trajectory's record with a
`problem`, and trainers mask it, never the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol


class ChatTokenizer(Protocol):
    """What is used of a Hugging Face tokenizer (``PreTrainedTokenizerBase``)."""

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...


class TemplateError(ValueError):
    """The chat template cannot give this trajectory's tokens (not prefix-stable, or no stable base to render on)."""


def render(
    tokenizer: ChatTokenizer,
    messages: list[dict[str, Any]],
    generation_prompt: bool,
    template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """Token ids of `messages` under the chat template (role and content only)."""
    chat = [{"role": m["role"], "content": m["content"]} for m in messages]
    out = tokenizer.apply_chat_template(
        chat, tokenize=True, add_generation_prompt=generation_prompt, return_dict=False, **(template_kwargs or {})
    )
    # transformers 5 may still answer a BatchEncoding; older tokenizers a plain list.
    ids = out["input_ids"] if isinstance(out, Mapping) else out
    return [int(i) for i in ids]


@dataclass
class TokenRecord:
    """One trajectory in tokens. `loss_mask` is 1 exactly on sampled ids; `logprobs` (when the policy gave them) are
    the sampled ids' own, 0.0 on what the loop appended; all three lists are as long as `response_ids`."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float] | None
    #: "stop" (the last turn ended by itself), "length" (the response-length limit cut it), or the engine's reason.
    stop_reason: str
    #: "sampled" (token-in/token-out) or "retokenized" (rendered from text afterwards).
    source: str
    #: Why these tokens must not be trained on (a template problem), else None.
    problem: str | None = None

    def truncated(self, limit: int | None) -> TokenRecord:
        """At most `limit` response tokens; cutting makes the stop reason "length"."""
        if limit is None or len(self.response_ids) <= limit:
            return self
        lp = None if self.logprobs is None else self.logprobs[:limit]
        return replace(
            self,
            response_ids=self.response_ids[:limit],
            loss_mask=self.loss_mask[:limit],
            logprobs=lp,
            stop_reason="length",
        )


class HasMessages(Protocol):
    """A trajectory (``minisandbox.rl.Trajectory``): its chat and where its prompt ends."""

    messages: list[dict[str, Any]]
    prompt_messages: int


def tokenize_trajectory(
    record: Mapping[str, Any] | HasMessages, tokenizer: ChatTokenizer, *, max_response_tokens: int | None = None
) -> dict[str, Any]:
    """Re-tokenise a text trajectory: {"prompt_ids", "response_ids", "response_mask", "truncated"}. Raises
    `TemplateError` when the template is not prefix-stable. Prefer the sampled tokens (`Trajectory.tokens`)."""
    if isinstance(record, Mapping):
        messages, k = record["messages"], record.get("prompt_messages", 2)
    else:
        messages, k = record.messages, record.prompt_messages
    prompt = render(tokenizer, messages[:k], True)
    response: list[int] = []
    mask: list[int] = []
    previous = prompt
    for i in range(k, len(messages)):
        own = messages[i]["role"] == "assistant"
        # After an observation the model is prompted again: the generation prompt belongs to the observation.
        full = render(tokenizer, messages[: i + 1], generation_prompt=not own)
        if full[: len(previous)] != previous:
            raise TemplateError(f"chat template is not prefix-stable at message {i}: the tokens before it changed")
        delta = full[len(previous) :]
        response.extend(delta)
        mask.extend([1 if own else 0] * len(delta))
        previous = full
    truncated = max_response_tokens is not None and len(response) > max_response_tokens
    if truncated:
        response, mask = response[:max_response_tokens], mask[:max_response_tokens]
    return {"prompt_ids": prompt, "response_ids": response, "response_mask": mask, "truncated": truncated}


def retokenize(trajectory: HasMessages, tokenizer: ChatTokenizer) -> TokenRecord:
    """`tokenize_trajectory` as a record, for one trajectory of a batch: a template problem marks it (mask all 0,
    `problem` set) instead of raising."""
    try:
        tok = tokenize_trajectory(trajectory, tokenizer)
    except TemplateError as e:
        prompt = render(tokenizer, trajectory.messages[: trajectory.prompt_messages], True)
        return TokenRecord(prompt, [], [], None, "template_error", "retokenized", problem=str(e))
    return TokenRecord(tok["prompt_ids"], tok["response_ids"], tok["response_mask"], None, "stop", "retokenized")
