"""Trainer checkpoints: a Hugging Face model directory, the model and AdamW state, and the rest
of the trainer state; one format at every world size.

Layout of a checkpoint directory (the output of `scalerl train --out DIR`):

    config.json, model.safetensors, ...   the policy (`save_pretrained`), loadable by any stage
    tokenizer files                       (`tokenizer.save_pretrained`)
    dcp/                                  the model and AdamW state (torch.distributed.
                                          checkpoint, one file per trainer rank that wrote
                                          it: `scalerl.parallel.checkpoint`, which writes the
                                          whole directory atomically)
    trainer_state.pt                      torch.save of the rest of the resumable state
    trainer_state.json                    a small summary readable without torch:
                                          run, chunk, step, version, compute, config hash
    steps.parquet                         one row per optimizer step of this chunk (final
                                          checkpoints only; partial saves keep the rows in
                                          trainer_state.pt)

trainer_state.pt holds: the LR-schedule state, Python/NumPy/torch(/CUDA) RNG states, the
data-sampler state (per-task No-Positive-Resampling samplers with their pass-rate history,
the task-choice RNG, prompts drawn but not yet trained on), compute counters, the global step,
the policy version and, for partial saves, the steps rows so far. It is written by
`write_state_files` inside the directory `scalerl.parallel.checkpoint.write_checkpoint` is
building. A checkpoint written at any number of trainer ranks resumes at any other.

A base model directory (chunk 0; chunk 1's input) is any HF model directory without
trainer_state.pt.

Deliberately left out: keeping several checkpoints per chunk.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scalerl.parallel.checkpoint import DCP_DIR

__all__ = [
    "STATE_FILE",
    "SUMMARY_FILE",
    "capture_rng_state",
    "is_trainer_checkpoint",
    "load_trainer_state",
    "read_trainer_summary",
    "restore_rng_state",
    "write_state_files",
]

STATE_FILE = "trainer_state.pt"
SUMMARY_FILE = "trainer_state.json"
# 2: chunks numbered from 1 (chunk 0 = the base model), as in the workflow; 3: the model and
# AdamW state in dcp/ at every world size (format 2 did that at several ranks only)
STATE_FORMAT = 3


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
    """True for a directory written by the trainer (has trainer_state.pt)."""
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
    if state.get("format") == 2 and "optimizer" in state:
        raise ValueError(
            f"{state_file}: trainer state format 2 written at one trainer rank keeps the "
            "optimizer state in trainer_state.pt; this scalerl keeps the model and AdamW state "
            f"in {DCP_DIR}/ at every world size. Continue the run with the scalerl that wrote "
            "it, or re-run this chunk from the previous chunk's checkpoint")
    if state.get("format") not in (2, STATE_FORMAT):  # 2 at several ranks: this layout
        raise ValueError(f"{state_file}: unsupported trainer state format {state.get('format')}")
    if not (Path(path) / DCP_DIR).is_dir():
        raise ValueError(f"{state_file}: no optimizer state ({DCP_DIR}/ is missing beside it); "
                         "the checkpoint cannot resume: delete the checkpoint dir and re-run "
                         "its chunk")
    return state


def write_state_files(directory: Path, *, state: dict[str, Any], summary: dict[str, Any]
                      ) -> None:
    """trainer_state.pt and trainer_state.json into a checkpoint being written (the model and
    AdamW state are in dcp/ beside them, `scalerl.parallel.checkpoint.write_checkpoint`)."""
    torch.save({**state, "format": STATE_FORMAT}, directory / STATE_FILE)
    (directory / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
