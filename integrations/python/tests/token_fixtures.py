"""What the token-in/token-out tests sample with: a real tokenizer (a byte-level BPE trained here with
``tokenizers``, wrapped by ``transformers``) with two chat templates — Qwen2.5's shape (prefix-stable) and Qwen3's
(earlier reasoning dropped: not prefix-stable) — and a scripted policy that samples ids the way a model does, behind
three doors that follow the frameworks' current interfaces: verl's ``AsyncLLMServerManager.generate``, SkyRL's
``InferenceEngineInterface.generate``, and a vLLM / SGLang server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from minisandbox.rl.agent import FORMAT_ERROR, INSTANCE_TEMPLATE, SYSTEM_TEMPLATE
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from .loopback import JSONServer

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

QWEN25_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: Qwen3's rule: an assistant turn before the last user message loses its reasoning (`<think>...</think>`).
QWEN3_TEMPLATE = (
    "{%- set ns = namespace(last=-1) %}"
    "{%- for m in messages %}{%- if m['role'] == 'user' %}{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}{%- set content = m['content'] %}"
    "{%- if m['role'] == 'assistant' and loop.index0 < ns.last and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)

CORPUS = [
    SYSTEM_TEMPLATE,
    INSTANCE_TEMPLATE,
    FORMAT_ERROR,
    "THOUGHT: look at the repository first.\n\n```bash\ngit status --short && ls\n```",
    "<think>The tests fail; the fix is in calc.</think>THOUGHT: apply it.",
    "<returncode>0</returncode>\n<output>\ndiff --git a/calc.py b/calc.py\n</output>",
    "You are a helpful assistant. I am a user. echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]


def tokenizer(template: str = QWEN25_TEMPLATE) -> PreTrainedTokenizerFast:
    """A small byte-level BPE (every text encodes and decodes back) with `template` as its chat template."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    # Neither library types these constructors.
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    bpe_trainer: Any = trainers.BpeTrainer
    trainer = bpe_trainer(vocab_size=700, special_tokens=SPECIAL, initial_alphabet=alphabet)
    bpe.train_from_iterator(CORPUS * 4, trainer)
    fast: Any = PreTrainedTokenizerFast
    tok: PreTrainedTokenizerFast = fast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = template
    return tok


@dataclass
class Call:
    """One sampling: what the policy was given and what it sampled."""

    session: str
    prompt_ids: list[int]
    ids: list[int]
    logprobs: list[float]
    max_tokens: int
    sampling: dict[str, Any]


@dataclass
class ScriptedSampler:
    """Samples each session's next scripted reply. Its ids are not the tokenizer's own encoding of the text (one
    token per character, as a sampling model may well produce), so re-tokenising the text cannot give them back;
    logprobs are drawn at random. A reply longer than `max_tokens` is cut there ("length")."""

    tok: PreTrainedTokenizerFast
    scripts: dict[str, list[str]]
    calls: list[Call] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sample(
        self, session: str, prompt_ids: list[int], max_tokens: int, sampling: dict[str, Any]
    ) -> tuple[list[int], list[float], str]:
        with self.lock:
            script = self.scripts.get(session) or self.scripts.get("*") or []
            text = (
                script.pop(0)
                if script
                else "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
            )
            ids = [i for ch in text for i in self.tok.encode(ch, add_special_tokens=False)]
            ids.append(int(self.tok.eos_token_id))
            finish = "stop"
            if len(ids) > max_tokens:
                ids, finish = ids[:max_tokens], "length"
            logprobs = [-round(self.rng.random() * 3, 6) for _ in ids]
            self.calls.append(Call(session, list(prompt_ids), ids, logprobs, max_tokens, dict(sampling)))
            return ids, logprobs, finish

    def of(self, session: str) -> list[Call]:
        return [c for c in self.calls if c.session == session]


@dataclass
class TokenOutput:
    """verl's ``verl.workers.rollout.replica.TokenOutput``."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    routed_experts: Any = None
    stop_reason: str | None = None
    num_preempted: int | None = None


class VerlServerManager:
    """verl's ``AsyncLLMServerManager.generate`` as its vLLM server answers: ``max_tokens`` popped from the sampling
    params, logprobs only when ``logprobs`` is true, stop reason "completed" for a stop and for the length limit."""

    def __init__(self, sampler: ScriptedSampler):
        self.sampler = sampler
        self.loops: set[int] = set()

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
    ) -> TokenOutput:
        self.loops.add(id(asyncio.get_running_loop()))
        max_tokens = int(sampling_params.pop("max_tokens"))
        want_logprobs = bool(sampling_params.pop("logprobs", False))
        ids, lps, _ = self.sampler.sample(request_id, prompt_ids, max_tokens, sampling_params)
        return TokenOutput(ids, lps if want_logprobs else None, stop_reason="completed")


class SkyRLEngineClient:
    """SkyRL's ``InferenceEngineInterface.generate`` (``RemoteInferenceClient``): token ids only, one session id
    per prompt, logprobs when ``sampling_params["logprobs"]`` is not None, vLLM's finish reasons."""

    model_name = "policy"

    def __init__(self, sampler: ScriptedSampler):
        self.sampler = sampler
        self.loops: set[int] = set()
        self.models: list[str | None] = []

    async def generate(self, input_batch: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        self.loops.add(id(asyncio.get_running_loop()))
        self.models.append(model)
        if input_batch.get("prompt_token_ids") is None:
            raise ValueError("RemoteInferenceClient only accepts `prompt_token_ids`, not `prompts`.")
        params = input_batch.get("sampling_params") or {}
        out: dict[str, Any] = {"responses": [], "response_ids": [], "stop_reasons": [], "response_logprobs": []}
        for prompt, session in zip(input_batch["prompt_token_ids"], input_batch["session_ids"]):
            ids, lps, finish = self.sampler.sample(str(session), prompt, int(params["max_tokens"]), params)
            out["responses"].append(self.sampler.tok.decode(ids, skip_special_tokens=True))
            out["response_ids"].append(ids)
            out["stop_reasons"].append(finish)
            out["response_logprobs"].append(lps)
        if params.get("logprobs") is None:
            out["response_logprobs"] = None
        out["rollout_expert_indices"] = None
        return out


class InferenceServer:
    """A vLLM-style ``/v1/completions`` (prompt as token ids; ``token_ids`` in the choice when ``return_token_ids``,
    tokens as ``token_id:N`` when ``return_tokens_as_token_ids``) and SGLang's ``/generate`` (``input_ids``;
    ``meta_info.output_token_logprobs``), on 127.0.0.1."""

    def __init__(self, sampler: ScriptedSampler):
        self.sampler = sampler
        self.requests: list[tuple[str, dict[str, Any]]] = []
        #: Answer as vLLM before ``return_token_ids``: the sampled ids only as ``token_id:N`` tokens.
        self.legacy = False
        self.http = JSONServer(self._answer)
        self.url = self.http.url

    def _answer(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        self.requests.append((path, body))
        return 200, self.completions(body) if path == "/v1/completions" else self.generate(body)

    def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        assert all(isinstance(i, int) for i in prompt), "the prompt is token ids"
        params = {k: v for k, v in body.items() if k not in ("prompt", "model", "user")}
        ids, lps, finish = self.sampler.sample(body.get("user", ""), prompt, int(body["max_tokens"]), params)
        tokens = [f"token_id:{i}" if body.get("return_tokens_as_token_ids") else self._piece(i) for i in ids]
        choice: dict[str, Any] = {
            "index": 0,
            "text": self.sampler.tok.decode(ids, skip_special_tokens=True),
            "logprobs": {"tokens": tokens, "token_logprobs": lps, "top_logprobs": None, "text_offset": []},
            "finish_reason": finish,
            "stop_reason": None,
        }
        if body.get("return_token_ids") and not self.legacy:
            choice.update(token_ids=ids, prompt_token_ids=prompt)
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)}
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": body["model"],
            "choices": [choice],
            "usage": usage,
        }

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        params = body["sampling_params"]
        ids, lps, finish = self.sampler.sample("", body["input_ids"], int(params["max_new_tokens"]), params)
        meta = {
            "finish_reason": {"type": finish},
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids),
            "output_token_logprobs": [[lp, i, None] for lp, i in zip(lps, ids)] if body.get("return_logprob") else [],
        }
        return {"text": self.sampler.tok.decode(ids, skip_special_tokens=True), "output_ids": ids, "meta_info": meta}

    def _piece(self, i: int) -> str:
        return str(self.sampler.tok.convert_ids_to_tokens(i))

    def close(self) -> None:
        self.http.close()
