"""Model architecture numbers for the memory planner: `ModelArch`, its exact parameter count,
and where the numbers come from (a local HF model directory, the local HF cache, a built-in
table of public Qwen3 sizes, or scalerl's tiny sizes).

`resolve_arch(spec)` accepts, in this order:

1. a local Hugging Face model directory (its `config.json`);
2. a tiny size name (`tiny-s`, `tiny-m`, `tiny-l`: `scalerl.models.config.TINY_SIZES`, the
   character vocabulary, head dim hidden/heads, tied embeddings);
3. a hub id or label from `PUBLIC_ARCHS` (`Qwen/Qwen3-1.7B`, `qwen3-1.7b`, ...: matched
   case-insensitively on the full id or its last part);
4. a hub id whose `config.json` is in the local Hugging Face cache (no network).

Parameter count of a Llama / Qwen2 / Qwen3 dense decoder (h hidden, L layers, q = heads x
head_dim, k = kv_heads x head_dim, i intermediate, V vocab):

    per layer = h*q + 2*h*k + q*h          q, k, v, o projections
              + (q + 2k)      if qkv_bias  (Qwen2)
              + 2*head_dim    if qk_norm   (Qwen3 q_norm, k_norm)
              + 3*h*i                      gate, up, down
              + 2*h                        two RMSNorm weights
    total     = L * per layer + V*h (embeddings) + V*h (untied LM head only) + h (final norm)

Deliberately left out: mixture-of-experts, sliding-window and multimodal architectures
(`arch_from_hf_config` rejects model types it does not model rather than guessing).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scalerl.config import Config, ConfigError, field_

__all__ = ["ModelArch", "PUBLIC_ARCHS", "arch_from_hf_config", "resolve_arch", "tiny_arch"]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")


@dataclasses.dataclass(frozen=True)
class ModelArch(Config):
    """The numbers of a dense decoder-only transformer that memory depends on."""

    name: str = field_("model", "label shown in the plan (hub id, directory or tiny size)")
    hidden: int = field_(128, "hidden size h", ge=1)
    layers: int = field_(4, "decoder layers L", ge=1)
    heads: int = field_(4, "attention (query) heads", ge=1)
    kv_heads: int = field_(4, "key/value heads (GQA: fewer than heads)", ge=1)
    head_dim: int = field_(32, "dimension of one head (Qwen3: 128, not hidden/heads)", ge=1)
    intermediate: int = field_(512, "SwiGLU MLP inner size i", ge=1)
    vocab: int = field_(103, "vocabulary size V (rows of the embedding and the LM head)", ge=1)
    tied_embeddings: bool = field_(True, "the LM head shares the input embedding matrix")
    max_positions: int = field_(1024, "context length the model supports "
                                "(max_position_embeddings)", ge=1)
    qk_norm: bool = field_(False, "RMSNorm on queries and keys per head (Qwen3)")
    qkv_bias: bool = field_(False, "bias on the q, k, v projections (Qwen2)")

    def validate(self) -> None:
        super().validate()
        if self.heads % self.kv_heads:
            raise ConfigError(f"{self.name}: heads = {self.heads} is not a multiple of "
                              f"kv_heads = {self.kv_heads}")

    @property
    def q_width(self) -> int:
        """Query width q = heads x head_dim (Qwen3-0.6B: 2048 with hidden 1024)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Key (and value) width k = kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Parameters of one decoder layer (formula in the module docstring)."""
        h, q, k, i = self.hidden, self.q_width, self.kv_width, self.intermediate
        attention = h * q + 2 * h * k + q * h
        attention += (q + 2 * k) if self.qkv_bias else 0
        attention += 2 * self.head_dim if self.qk_norm else 0
        return attention + 3 * h * i + 2 * h

    def embedding_params(self) -> int:
        """Embedding matrix plus the LM head when it is not tied."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def n_params(self) -> int:
        """Every distinct parameter (a tied embedding counted once)."""
        return self.layers * self.layer_params() + self.embedding_params() + self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes one token takes: 2 (K and V) x L x kv_heads x head_dim x dtype."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


# Public architectures, from the config.json of each model on the Hugging Face hub
# (https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json and likewise Qwen3-1.7B,
# Qwen3-4B, Qwen3-8B). They reproduce the published parameter counts exactly (tested):
# 596,049,920 / 1,720,574,976 / 4,022,468,096 (the Keras-Hub Qwen3 presets list these) and
# 8,190,735,360 for Qwen3-8B (model card: 8.2B, untied head). Non-embedding count of
# Qwen3-1.7B: 1.41B (model card: 1.4B).
_QWEN3 = dict(vocab=151936, head_dim=128, kv_heads=8, max_positions=40960, qk_norm=True)
PUBLIC_ARCHS: dict[str, ModelArch] = {
    "Qwen/Qwen3-0.6B": ModelArch(name="Qwen/Qwen3-0.6B", hidden=1024, layers=28, heads=16,
                                 intermediate=3072, tied_embeddings=True, **_QWEN3),
    "Qwen/Qwen3-1.7B": ModelArch(name="Qwen/Qwen3-1.7B", hidden=2048, layers=28, heads=16,
                                 intermediate=6144, tied_embeddings=True, **_QWEN3),
    "Qwen/Qwen3-4B": ModelArch(name="Qwen/Qwen3-4B", hidden=2560, layers=36, heads=32,
                               intermediate=9728, tied_embeddings=True, **_QWEN3),
    "Qwen/Qwen3-8B": ModelArch(name="Qwen/Qwen3-8B", hidden=4096, layers=36, heads=32,
                               intermediate=12288, tied_embeddings=False, **_QWEN3),
}


def tiny_arch(name: str, *, arch: str = "llama", max_positions: int | None = None) -> ModelArch:
    """A tiny size as `scalerl.models.loading.tiny_hf_config` builds it (llama or qwen2)."""
    from scalerl.models.config import TINY_SIZES, ModelConfig
    from scalerl.models.tokenizer import VOCAB_SIZE

    if name not in TINY_SIZES:
        raise ConfigError(f"unknown tiny size {name!r}; choose one of {', '.join(TINY_SIZES)}")
    size = TINY_SIZES[name]
    return ModelArch(
        name=name, hidden=size.hidden, layers=size.layers, heads=size.heads,
        kv_heads=size.heads, head_dim=size.hidden // size.heads,
        intermediate=size.intermediate, vocab=VOCAB_SIZE, tied_embeddings=True,
        max_positions=max_positions or ModelConfig().max_positions, qk_norm=False,
        qkv_bias=arch == "qwen2",
    )


def arch_from_hf_config(config: Mapping[str, Any], name: str) -> ModelArch:
    """A `ModelArch` from the dict of a Hugging Face `config.json`."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(f"{name}: model_type {model_type!r} is not modelled by the planner "
                          f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)} dense decoders)")
    try:
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        return ModelArch(
            name=name, hidden=hidden, layers=int(config["num_hidden_layers"]), heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]), vocab=int(config["vocab_size"]),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            max_positions=int(config.get("max_position_embeddings", 2048)),
            qk_norm=model_type == "qwen3",
            qkv_bias=model_type == "qwen2" or bool(config.get("attention_bias", False)),
        )
    except KeyError as err:
        raise ConfigError(f"{name}: config.json has no {err.args[0]!r}") from None


def _from_json(path: Path, name: str) -> ModelArch:
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the model config: {err}") from None
    return arch_from_hf_config(config, name)


def _public(spec: str) -> ModelArch | None:
    wanted = spec.lower()
    for hub_id, arch in PUBLIC_ARCHS.items():
        if wanted in (hub_id.lower(), hub_id.split("/")[-1].lower()):
            return arch
    return None


def _cached_config(hub_id: str) -> Path | None:
    """config.json of a hub id from the local Hugging Face cache, without network."""
    if hub_id.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(hub_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def resolve_arch(spec: str | Path | ModelArch, *, tiny_kind: str = "llama") -> ModelArch:
    """The architecture behind a model directory, tiny size, table entry or cached hub id."""
    if isinstance(spec, ModelArch):
        return spec
    text = str(spec)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} has no config.json: not a Hugging Face model directory")
        return _from_json(path / "config.json", text)
    if text.startswith("tiny-"):
        return tiny_arch(text, arch=tiny_kind)
    public = _public(text)
    if public is not None:
        return public
    cached = _cached_config(text)
    if cached is not None:
        return _from_json(cached, text)
    raise ConfigError(
        f"model {text!r}: not a model directory, tiny size, known hub id "
        f"({', '.join(PUBLIC_ARCHS)}) or hub id in the local HF cache; pass --model with a "
        "model directory (config.json) or one of those")
