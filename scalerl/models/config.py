"""`ModelConfig`: which policy model to use and how to run it, plus the named tiny sizes.

A model is either one of the embedded tiny sizes (built from scratch, character tokenizer,
SFT warm start by `scalerl base`) or a Hugging Face model given by a local directory or a hub
id. Tiny sizes (head dim 32 everywhere: vLLM's CPU attention needs head sizes >= 32):

| name   | hidden | layers | heads | MLP  | params (vocab 103, tied) |
|--------|--------|--------|-------|------|--------------------------|
| tiny-s |   64   |   2    |   2   |  256 | 0.138 M                  |
| tiny-m |  128   |   4    |   4   |  512 | 1.06 M                   |
| tiny-l |  192   |   6    |   6   |  768 | 3.56 M                   |

Deliberately left out: quantization, LoRA and tensor parallelism (not needed at this scale;
GPU users get them from vLLM for generation if they want them).
"""

from __future__ import annotations

import dataclasses

from scalerl.config import Config, ConfigError, field_


@dataclasses.dataclass(frozen=True)
class TinySize:
    """Shape of one named tiny model."""

    hidden: int
    layers: int
    heads: int
    intermediate: int


TINY_SIZES: dict[str, TinySize] = {
    "tiny-s": TinySize(hidden=64, layers=2, heads=2, intermediate=256),
    "tiny-m": TinySize(hidden=128, layers=4, heads=4, intermediate=512),
    "tiny-l": TinySize(hidden=192, layers=6, heads=6, intermediate=768),
}

DTYPES = ("float32", "bfloat16", "float16")


def is_tiny(name: str) -> bool:
    return name in TINY_SIZES


@dataclasses.dataclass(frozen=True)
class ModelConfig(Config):
    """The policy model: a tiny size name, a local Hugging Face model directory, or a hub id."""

    name: str = field_(
        "tiny-m",
        "tiny size (tiny-s | tiny-m | tiny-l), a local HF model directory, or a HF hub id",
    )
    dtype: str = field_("float32", "parameter dtype for training and generation", choices=DTYPES)
    fp32_lm_head: bool = field_(
        True,
        "compute the LM head in float32 (logits = h.float() @ W.float().T) on the generator and "
        "on the trainer; ScaleRL (Khatri et al. 2025, sec. 3.2 / Fig. 5b, after MiniMax-M1)",
    )
    prompt_format: str = field_(
        "auto",
        "raw: bos + prompt text; chat: the tokenizer's chat template (one user turn, generation "
        "prompt added); auto: chat when the tokenizer has a chat template, else raw",
        choices=("auto", "raw", "chat"),
    )
    seed: int = field_(0, "initialisation seed of a tiny model (same seed -> same weights)", ge=0)
    arch: str = field_("llama", "architecture of a tiny model", choices=("llama", "qwen2"))
    max_positions: int = field_(
        1024, "context length of a tiny model (prompt + generation)", ge=16
    )
    attn_implementation: str = field_(
        "sdpa", "transformers attention kernel", choices=("sdpa", "eager")
    )
    trust_remote_code: bool = field_(False, "allow custom modelling code from a HF model repo")
    allow_download: bool = field_(
        False, "resolve a hub id online; False: only the local HF cache is used (no network)"
    )

    def validate(self) -> None:
        super().validate()
        if not self.name:
            raise ConfigError("name: give a tiny size (tiny-s, tiny-m, tiny-l) or a HF model")
        if self.name.startswith("tiny-") and not is_tiny(self.name):
            raise ConfigError(
                f"name: unknown tiny size {self.name!r}; choose one of {', '.join(TINY_SIZES)}"
            )

    @property
    def is_tiny(self) -> bool:
        return is_tiny(self.name)

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)
