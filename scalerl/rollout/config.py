"""Engine settings and the request and forced-interruption helpers every engine shares (the
engine factory is `scalerl.rollout.factory`).

Forced interruption (ScaleRL, Khatri et al. 2025, sec. 3.2 "length control"; the paper inserts
"Okay, time is up. ... </think>" at a random position between 10k and 12k thinking tokens):
a per-sample thinking budget is drawn uniformly from [lo, hi] (`draw_think_budget`), stored in
`Request.think_budget`; when a sample has generated that many tokens without ending its
thinking (`</think>`), the engine appends the interruption text (loss-masked, logprob 0) and
then allows `Request.answer_budget` more tokens. A request must satisfy
`think_budget + len(interruption tokens) + answer_budget <= max_new_tokens`
(`check_request`), so the hard cap never cuts the inserted text.

Deliberately left out: top-p/top-k/repetition penalties (they bias the importance ratio).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from scalerl.config import Config, field_
from scalerl.rollout.base import DEFAULT_INTERRUPTION_TEXT, Request
from scalerl.rollout.vllm_settings import VllmSettings
from scalerl.text import THINK_CLOSE

THINK_END_TEXT = THINK_CLOSE  # what ends the thinking part (scalerl.text)


class RequestError(ValueError):
    """A request the engine cannot serve (budgets, context length); says how to fix it."""


@dataclasses.dataclass(frozen=True)
class EngineConfig(Config):
    """How samples are generated (shared by the HF/torch and vLLM engines)."""

    backend: str = field_("hf", "generation engine: hf (torch, CPU/CUDA) or vllm", choices=("hf", "vllm"))
    temperature: float = field_(1.0, "sampling temperature (logprobs are of softmax(logits/T))", gt=0)
    max_batch: int = field_(64, "sequences decoded together (KV-cache slots)", ge=1)
    seed: int = field_(0, "sampling seed; a request's sample depends on (seed, prompt_id, sample_idx)", ge=0)
    interruption_text: str = field_(
        DEFAULT_INTERRUPTION_TEXT,
        "text inserted when the thinking budget runs out (should end with </think>); tiny "
        "character-level models use a short one such as '</think>'",
    )
    device: str = field_("auto", "hf engine device: auto (cuda if available), cpu, cuda",
                         choices=("auto", "cpu", "cuda"))
    threads: int = field_(0, "torch CPU threads in the generator (0: leave as is)", ge=0)
    vllm_kv_cache_mb: int = field_(
        256, "vLLM KV-cache size in MiB (CPU: RAM reserved); 0: size it from "
        "vllm_gpu_memory_utilization instead", ge=0,
    )
    vllm_gpu_memory_utilization: float = field_(
        0.5, "vLLM: share of device memory it may use (used when vllm_kv_cache_mb is 0)",
        gt=0, le=1,
    )
    vllm_max_model_len: int = field_(0, "vLLM context length (0: the model's own)", ge=0)
    vllm: VllmSettings | None = field_(
        None, "vLLM settings (scalerl.rollout.vllm_settings; the run config's `vllm:`); null: "
        "the three vllm_* fields above, eager mode and per-request seeds (small CPU engines)",
    )

    def resolved_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device


def draw_think_budget(rng: random.Random, lo: int, hi: int) -> int:
    """A thinking budget drawn uniformly from the integers lo..hi (both included)."""
    if not 1 <= lo <= hi:
        raise ValueError(f"think budget range must satisfy 1 <= lo <= hi, got [{lo}, {hi}]")
    return rng.randint(lo, hi)


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of plain text (no bos/eos added)."""
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]


def eos_token_ids(tokenizer, model_config=None, generation_config=None) -> set[int]:
    """Every id that ends a sample: tokenizer eos plus the model's/generation config's eos."""
    ids: set[int] = set()
    for source in (tokenizer, model_config, generation_config):
        value = getattr(source, "eos_token_id", None)
        if value is None:
            continue
        ids.update(int(v) for v in (value if isinstance(value, list | tuple) else [value]))
    if not ids:
        raise ValueError("the tokenizer/model define no eos token; generation could never stop")
    return ids


def check_request(req: Request, n_interrupt_tokens: int, max_context: int | None) -> None:
    """Reject requests whose budgets or context length cannot be honoured."""
    if not req.prompt_ids:
        raise RequestError(f"request {req.prompt_id}/{req.sample_idx}: empty prompt")
    if req.max_new_tokens < 1:
        raise RequestError(f"request {req.prompt_id}: max_new_tokens must be >= 1")
    if req.think_budget is not None:
        if req.think_budget < 1 or req.answer_budget < 0:
            raise RequestError(
                f"request {req.prompt_id}: think_budget must be >= 1 and answer_budget >= 0"
            )
        need = req.think_budget + n_interrupt_tokens + req.answer_budget
        if need > req.max_new_tokens:
            raise RequestError(
                f"request {req.prompt_id}: think_budget {req.think_budget} + interruption "
                f"{n_interrupt_tokens} tokens + answer_budget {req.answer_budget} = {need} > "
                f"max_new_tokens {req.max_new_tokens}; raise max_new_tokens or lower the budgets"
            )
    if max_context is not None and len(req.prompt_ids) + req.max_new_tokens > max_context:
        raise RequestError(
            f"request {req.prompt_id}: prompt {len(req.prompt_ids)} + max_new_tokens "
            f"{req.max_new_tokens} tokens exceed the model context {max_context}"
        )


def ends_with(tokens: Sequence[int], suffix: Sequence[int]) -> bool:
    n = len(suffix)
    return n > 0 and len(tokens) >= n and list(tokens[-n:]) == list(suffix)


def contains(tokens: Sequence[int], sub: Sequence[int]) -> bool:
    n = len(sub)
    if n == 0:
        return False
    tokens = list(tokens)
    return any(tokens[i : i + n] == list(sub) for i in range(len(tokens) - n + 1))


def sample_seed(seed: int, prompt_id: str, sample_idx: int) -> int:
    """A stable 63-bit seed per (engine seed, prompt, sample): results do not depend on batching."""
    import hashlib

    digest = hashlib.sha256(f"{seed}\x00{prompt_id}\x00{sample_idx}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
