"""Trainer checkpoints: a Hugging Face model directory plus the full trainer state.

Layout of a checkpoint directory (the output of `scalerl train --out DIR`):

    config.json, model.safetensors, ...   the policy (`save_pretrained`), loadable by any stage
    tokenizer files                       (`tokenizer.save_pretrained`)
    trainer_state.pt                      torch.save of the resumable state (below)
    trainer_state.json                    a small summary readable without torch:
                                          run, chunk, step, version, compute, config hash
    steps.parquet                         one row per optimizer step of this chunk (final
                                          checkpoints only; partial saves keep the rows in
                                          trainer_state.pt)

trainer_state.pt holds: optimizer and LR-schedule state, Python/NumPy/torch(/CUDA) RNG
states, the data-sampler state (per-task No-Positive-Resampling samplers with their
pass-rate history, the task-choice RNG, prompts drawn but not yet trained on), compute
counters, the global step, the policy version and, for partial saves, the steps rows so far.

Atomicity: `write_checkpoint` builds the directory under a temporary sibling name and swaps it
in (`scalerl.utils.io.atomic_path`), so a crash leaves either the old directory or the new
one, never half of one. A base model directory (chunk 0; chunk 1's input) is any HF model directory
without trainer_state.pt. Several trainer ranks write the same layout plus the optimizer and
model shards in dcp/ (`scalerl.parallel.checkpoint`), with the state files of
`write_state_files`; their trainer_state.pt has no optimizer entry.

Deliberately left out: keeping several checkpoints per chunk.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scalerl.utils.failpoints import failpoint
from scalerl.utils.io import atomic_path

__all__ = [
    "STATE_FILE",
    "SUMMARY_FILE",
    "capture_rng_state",
    "is_trainer_checkpoint",
    "load_trainer_state",
    "read_trainer_summary",
    "restore_rng_state",
    "write_checkpoint",
    "write_state_files",
]

STATE_FILE = "trainer_state.pt"
SUMMARY_FILE = "trainer_state.json"
STATE_FORMAT = 2  # 2: chunks numbered from 1 (chunk 0 = the base model), as in the workflow


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy (global) and torch CPU/CUDA RNG states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def is_trainer_checkpoint(path: str | Path) -> bool:
    """True for a directory written by `write_checkpoint` (has trainer_state.pt)."""
    return (Path(path) / STATE_FILE).is_file()


def read_trainer_summary(path: str | Path) -> dict[str, Any]:
    """The JSON summary of a checkpoint: run, chunk, step, version, compute_* and more.

    For a base model directory (no trainer state) this returns the step-0 summary
    `{"step": 0, "chunk": 0, "version": 0, "compute_flops": 0.0, ...}` so evaluation can treat
    the base model as the point at zero compute.
    """
    path = Path(path)
    summary_file = path / SUMMARY_FILE
    if not summary_file.is_file():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is neither a trainer checkpoint nor a model dir")
        return {"step": 0, "chunk": 0, "version": 0, "compute_flops": 0.0,
                "compute_device_hours": 0.0, "tokens": 0}
    return json.loads(summary_file.read_text())


def load_trainer_state(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    """The resumable trainer state of a checkpoint; raises for a base model directory."""
    state_file = Path(path) / STATE_FILE
    if not state_file.is_file():
        raise FileNotFoundError(
            f"{path} has no {STATE_FILE}: it is not a trainer checkpoint (a base model "
            "directory is only valid as the input of chunk 1)"
        )
    # weights_only=False: the state holds RNG tuples and plain Python containers we wrote.
    try:
        state = torch.load(state_file, map_location=map_location, weights_only=False)
    except (RuntimeError, EOFError, OSError) as err:
        raise ValueError(f"{state_file}: unreadable trainer state ({err}); the checkpoint is "
                         "damaged: delete the checkpoint dir and re-run its chunk") from err
    if state.get("format") == 1:
        raise ValueError(
            f"{state_file}: trainer state format 1 was written by a scalerl that numbered "
            "training chunks from 0 (its chunk k is chunk k+1 now, as in the workflow's "
            "checkpoint directories and the eval Parquet); retrain the run from its base "
            "model, or continue it with the scalerl that wrote it")
    if state.get("format") != STATE_FORMAT:
        raise ValueError(f"{state_file}: unsupported trainer state format {state.get('format')}")
    sharded = state.get("sharded") and (Path(path) / "dcp").is_dir()  # optimizer in dcp/
    if "optimizer" not in state and not sharded:
        raise ValueError(f"{state_file}: no optimizer state (key 'optimizer'); the checkpoint "
                         "cannot resume: delete the checkpoint dir and re-run its chunk")
    return state


def write_checkpoint(
    path: str | Path,
    *,
    model: Any,
    tokenizer: Any,
    state: dict[str, Any],
    summary: dict[str, Any],
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write model + tokenizer + state (+ `extra(tmp_dir)` files) atomically to `path`."""
    path = Path(path)
    from scalerl.models.loading import save_model_dir

    with atomic_path(path, directory=True) as tmp:
        save_model_dir(model, tokenizer, tmp)  # HF model dir (+ the tiny char tokenizer files)
        failpoint("checkpoint_write", path.name)  # a harness may freeze the write here
        write_state_files(tmp, state=state, summary=summary)
        if extra is not None:
            extra(tmp)
    return path


def write_state_files(directory: Path, *, state: dict[str, Any], summary: dict[str, Any],
                      sharded: bool = False) -> None:
    """trainer_state.pt and trainer_state.json into a checkpoint being written; `sharded`:
    the optimizer state lives in dcp/ (`scalerl.parallel.checkpoint`)."""
    extra = {"sharded": True} if sharded else {}
    torch.save({**state, **extra, "format": STATE_FORMAT}, directory / STATE_FILE)
    (directory / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
