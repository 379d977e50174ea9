"""Build, load and save policy models and tokenizers; format prompts.

- `build_tiny_model(cfg)`: a freshly initialised Llama/Qwen2 model of a named tiny size, with
  weights that depend only on `cfg.seed` (initialised under a private RNG state).
- `save_model_dir(model, tokenizer, path)`: a Hugging Face model directory (config.json,
  model.safetensors, generation_config.json, tokenizer files) that transformers and vLLM load.
- `resolve_model_path(cfg)`: local directory for a HF id or path (no network unless
  `cfg.allow_download`).
- `load_model(path, cfg, device)` / `load_tokenizer(path)`; a truncated or corrupt
  `*.safetensors` file raises `DamagedModelError` naming the file and the fix (delete the
  directory and re-run the stage that wrote it) instead of a raw safetensors traceback.
- `format_prompt(tokenizer, prompt_text, cfg) -> list[int]`: raw (bos + text) or chat template.
- `load_model_config(path, checkpoint)`: the ModelConfig a stage uses for a checkpoint (the
  model's MODEL.yaml, else the base directory's base_info.json, else defaults).

Deliberately left out: sharded/FSDP loading (single-process training) and adapters.
"""

from __future__ import annotations

from pathlib import Path

import torch

from scalerl.models.config import TINY_SIZES, ModelConfig
from scalerl.models.tokenizer import VOCAB_SIZE, build_char_tokenizer, char_vocab
from scalerl.text import THINK_CLOSE


class ModelNotFoundError(FileNotFoundError):
    """A model directory or hub id could not be resolved locally."""


class DamagedModelError(ValueError):
    """A model directory's weights file is truncated or corrupt."""


def tiny_hf_config(cfg: ModelConfig):
    """The transformers config of a tiny size (vocab = the character tokenizer's)."""
    from transformers import LlamaConfig, Qwen2Config

    size = TINY_SIZES[cfg.name]
    vocab = char_vocab()
    common = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        intermediate_size=size.intermediate,
        max_position_embeddings=cfg.max_positions,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=vocab["<bos>"],
        eos_token_id=vocab["<eos>"],
        pad_token_id=vocab["<pad>"],
        initializer_range=0.02,
    )
    if cfg.arch == "llama":
        return LlamaConfig(**common, attention_bias=False, mlp_bias=False)
    return Qwen2Config(**common, use_sliding_window=False)


def build_tiny_model(cfg: ModelConfig):
    """A new tiny model (float32, eval mode); same `cfg` -> bit-identical weights."""
    from transformers import AutoModelForCausalLM

    if not cfg.is_tiny:
        raise ValueError(f"{cfg.name!r} is not a tiny size; choose one of {', '.join(TINY_SIZES)}")
    hf_config = tiny_hf_config(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = AutoModelForCausalLM.from_config(
            hf_config, dtype=torch.float32, attn_implementation=cfg.attn_implementation
        )
    return model.eval()


def count_parameters(model) -> int:
    """Distinct parameters (tied embedding counted once)."""
    return sum(p.numel() for p in model.parameters())


def save_model_dir(model, tokenizer, path: str | Path) -> Path:
    """Write model + tokenizer as a HF directory into `path` (call inside `atomic_path`)."""
    from scalerl.models.tokenizer import save_char_tokenizer

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True)
    if getattr(tokenizer, "_scalerl_char", False) or _is_char_tokenizer(tokenizer):
        save_char_tokenizer(path)
    else:
        tokenizer.save_pretrained(str(path))
    return path


def _is_char_tokenizer(tokenizer) -> bool:
    return len(tokenizer) == VOCAB_SIZE and tokenizer.convert_ids_to_tokens(5) == THINK_CLOSE


def resolve_model_path(cfg: ModelConfig) -> Path:
    """Local directory of a HF model given as a path or hub id (tiny names are not paths)."""
    if cfg.is_tiny:
        raise ValueError(f"{cfg.name!r} is a tiny size: build it with `scalerl base`")
    local = Path(cfg.name).expanduser()
    if local.is_dir():
        if not (local / "config.json").exists():
            raise ModelNotFoundError(f"{local} has no config.json: not a Hugging Face model dir")
        return local
    if local.exists() or cfg.name.startswith((".", "/", "~")) or cfg.name.count("/") != 1:
        raise ModelNotFoundError(
            f"model {cfg.name!r} is neither a tiny size, a model directory nor a hub id (org/name)"
        )
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(cfg.name, local_files_only=not cfg.allow_download))
    except Exception as err:  # LocalEntryNotFoundError, connection errors, ...
        hint = "" if cfg.allow_download else " (set model.allow_download: true to fetch it)"
        raise ModelNotFoundError(
            f"hub model {cfg.name!r} is not in the local HF cache{hint}: {err}"
        ) from None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")


def load_tokenizer(path: str | Path):
    """The tokenizer saved in model dir `path`; ModelNotFoundError naming the dir when it has no
    tokenizer file (so transformers never tries the network for one)."""
    from transformers import AutoTokenizer

    path = Path(path)
    if path.is_dir() and not any((path / name).exists() for name in TOKENIZER_FILES):
        raise ModelNotFoundError(
            f"{path} has no tokenizer file (looked for {', '.join(TOKENIZER_FILES)}); copy the "
            "base model's tokenizer files into it or rebuild it with `scalerl base`")
    return AutoTokenizer.from_pretrained(str(path))


def load_model(path: str | Path, cfg: ModelConfig, device: str | torch.device = "cpu"):
    """A causal LM from a HF directory, in `cfg.dtype`, on `device`, in eval mode."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").exists():
        raise ModelNotFoundError(f"{path} is not a Hugging Face model directory (no config.json)")
    check_weights(path)
    model = AutoModelForCausalLM.from_pretrained(
        str(path),
        dtype=cfg.torch_dtype,
        attn_implementation=cfg.attn_implementation,
        trust_remote_code=cfg.trust_remote_code,
    )
    return model.to(device).eval()


def check_weights(path: str | Path) -> None:
    """Read the header of every `*.safetensors` file in model dir `path` (cheap: no tensor
    data); DamagedModelError naming the file and the fix when one is truncated or corrupt."""
    from safetensors import safe_open

    path = Path(path)
    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as handle:
                handle.keys()
        except Exception as err:  # safetensors' SafetensorError (a Rust exception) or OSError
            what = ("a trainer checkpoint: delete it and re-run its chunk (`scalerl train`, or "
                    "snakemake, which re-runs the chunk whose output is missing)"
                    if (path / "trainer_state.pt").is_file() else
                    "a model directory: delete it and rebuild it (`scalerl base`, or snakemake)")
            raise DamagedModelError(
                f"{file}: damaged weights file ({err}); {path} is {what}") from None


def new_tiny_tokenizer():
    return build_char_tokenizer()


def format_prompt(tokenizer, prompt_text: str, cfg: ModelConfig) -> list[int]:
    """Token ids of a formatted prompt: raw (bos + text) or the chat template (one user turn)."""
    fmt = cfg.prompt_format
    if fmt == "auto":
        fmt = "chat" if getattr(tokenizer, "chat_template", None) else "raw"
    if fmt == "chat":
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"prompt_format 'chat' but the tokenizer of {cfg.name!r} has no chat template; "
                "use prompt_format: raw"
            )
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt_text}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        return [int(i) for i in ids]
    ids = tokenizer.encode(prompt_text, add_special_tokens=False)
    if tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id] + ids
    return [int(i) for i in ids]


def load_model_config(path: str | Path | None, checkpoint: str | Path) -> ModelConfig:
    """The run's ModelConfig: from `path` (a MODEL.yaml of `scalerl base`, or a bare
    ModelConfig mapping), else from the `base_info.json` a base directory carries, else
    defaults (dtype float32, prompt format auto)."""
    import json

    from scalerl.config import load_mapping

    if path is not None:
        data = load_mapping(path)
        return ModelConfig.from_dict(data.get("model", {}) if "model" in data else data)
    info = Path(checkpoint) / "base_info.json"
    if info.is_file():
        model = json.loads(info.read_text()).get("config", {}).get("model")
        if model:
            return ModelConfig.from_dict(model)
    return ModelConfig(name=str(checkpoint))
