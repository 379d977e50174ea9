"""`scalerl base --config CFG.yaml --out DIR`: build the base model directory of one model.

CFG holds a `BaseConfig`: `model:` (a `ModelConfig`) and, for tiny sizes, `sft:` (an
`SFTConfig`). Tiny sizes are initialised from `model.seed`, warm-started by SFT until their
measured pass rate is inside the target band (`scalerl.basemodel.sft`), and saved as a Hugging
Face model directory (config.json, model.safetensors, generation_config.json, tokenizer files)
plus `base_info.json`. A Hugging Face model (local directory or hub id already in the local
cache) is copied as it is (`base_info.json` records where from); nothing is downloaded unless
`model.allow_download` is true. DIR is written atomically.

Deliberately left out: SFT of Hugging Face models (bring an SFT'd checkpoint).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import time
from pathlib import Path

from scalerl.basemodel.sft import SFTConfig
from scalerl.config import Config, field_, load_mapping
from scalerl.models.config import ModelConfig
from scalerl.utils.io import atomic_path, write_json_atomic
from scalerl.utils.log import progress

BASE_INFO = "base_info.json"
# Files of a HF model directory worth copying (weights, configs, tokenizer, remote code).
_COPY_SUFFIXES = (".json", ".safetensors", ".model", ".txt", ".py", ".jinja", ".tiktoken")


@dataclasses.dataclass(frozen=True)
class BaseConfig(Config):
    """What `scalerl base` builds."""

    model: ModelConfig = field_(default_factory=ModelConfig, doc="the policy model")
    sft: SFTConfig = field_(default_factory=SFTConfig, doc="SFT warm start (tiny models only)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML/JSON with model: and sft: keys")
    parser.add_argument("--out", required=True, help="output model directory")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (default: sft.threads, else torch's default)")


def run(args: argparse.Namespace) -> int:
    cfg = BaseConfig.from_dict(load_mapping(args.config))
    if args.threads:
        cfg = cfg.replace(sft={"threads": args.threads})
    out = Path(args.out)
    if cfg.model.is_tiny:
        build_tiny_base(cfg, out)
    else:
        copy_hf_base(cfg.model, out)
    return 0


def build_tiny_base(cfg: BaseConfig, out: Path) -> dict:
    """Initialise, warm-start and save a tiny model; returns base_info."""
    import torch

    from scalerl.basemodel.sft import train_sft
    from scalerl.models.loading import (
        build_tiny_model,
        count_parameters,
        new_tiny_tokenizer,
        save_model_dir,
    )

    if cfg.sft.threads:
        torch.set_num_threads(cfg.sft.threads)
    model = build_tiny_model(cfg.model)
    tokenizer = new_tiny_tokenizer()
    n_params = count_parameters(model)
    progress(f"base {cfg.model.name}: {n_params / 1e6:.3f}M parameters, SFT warm start "
             + (f"(band {cfg.sft.band_lo:.2f}-{cfg.sft.band_hi:.2f})" if cfg.sft.stop == "band"
                else f"({cfg.sft.max_steps} steps)"))
    result = train_sft(model, tokenizer, cfg.sft, fp32_lm_head=cfg.model.fp32_lm_head)
    info = {
        "model": cfg.model.name,
        "kind": "tiny",
        "parameters": n_params,
        "steps": result.steps,
        "final_loss": result.final_loss,
        "pass_rate": result.pass_rate,
        "pass_rate_by_task": result.pass_rate_by_task,
        "val_prompts": cfg.sft.final_eval_prompts,
        "in_band": result.in_band,
        "band": [cfg.sft.band_lo, cfg.sft.band_hi],
        "history": result.history,
        "train_tokens": result.train_tokens,
        "seconds": round(result.seconds, 2),
        "torch_threads": torch.get_num_threads(),
        "config": cfg.to_dict(),
    }
    with atomic_path(out, directory=True) as tmp:
        save_model_dir(result.model, tokenizer, tmp)
        write_json_atomic(tmp / BASE_INFO, info)
    progress(f"base {cfg.model.name}: wrote {out} (pass rate {result.pass_rate:.3f}, "
             f"{result.steps} steps, {result.seconds:.0f}s)")
    return info


def copy_hf_base(model_cfg: ModelConfig, out: Path) -> dict:
    """Copy a local/cached Hugging Face model into `out`; returns base_info."""
    from scalerl.models.loading import resolve_model_path

    start = time.time()
    src = resolve_model_path(model_cfg)
    files = [p for p in sorted(src.iterdir()) if p.is_file() and p.suffix in _COPY_SUFFIXES]
    if not any(p.suffix == ".safetensors" for p in files) and not any(
            p.name.endswith(".bin") for p in src.iterdir()):
        raise FileNotFoundError(f"{src} holds no weights (*.safetensors / *.bin)")
    files += [p for p in sorted(src.iterdir()) if p.is_file() and p.suffix == ".bin"]
    info = {"model": model_cfg.name, "kind": "hf", "source": str(src), "steps": 0,
            "files": [p.name for p in files],
            # the ModelConfig (dtype, prompt format) `scalerl train` / `eval` default to
            "config": {"model": model_cfg.to_dict()}}
    with atomic_path(out, directory=True) as tmp:
        for p in files:
            shutil.copy2(p.resolve(), tmp / p.name)
        info["seconds"] = round(time.time() - start, 2)
        write_json_atomic(tmp / BASE_INFO, info)
    progress(f"base {model_cfg.name}: copied {len(files)} files from {src} to {out}")
    return info
