"""Fault injection for model weights: a checkpoint dir whose model.safetensors is truncated is
refused by the trainer (as --init) and by `scalerl eval` with an error naming the file and the
fix (delete the dir, re-run its chunk), not a raw safetensors traceback; nothing is written and
the damaged dir is left unchanged."""
import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from scalerl.models.config import ModelConfig
from scalerl.models.loading import (
    DamagedModelError,
    build_tiny_model,
    load_model,
    new_tiny_tokenizer,
    save_model_dir,
)
from scalerl.rl.checkpoint import STATE_FILE, STATE_FORMAT, SUMMARY_FILE
from scalerl.rl.run_config import RunConfig
from scalerl.rl.trainer import train_chunk

RUN_CONFIG = {"run": "t", "seed": 0, "model": "tiny-s", "steps_per_chunk": 1,
              "save_every": 0, "threads": 1, "device": "cpu",
              "recipe": {
                  "prompts_per_step": 2, "generations_per_prompt": 2, "think_budget": [8, 10],
                  "answer_budget": 4, "interruption_text": "</think>", "off_policy": "on-policy",
                  "length_penalty": {"max_len": 16, "cache_len": 4}}}


def _checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def damaged_checkpoint(tmp_path) -> Path:
    """chunk1/: a trainer checkpoint (model dir + trainer state) with a half-written
    model.safetensors, beside prompts.parquet and run.yaml."""
    from scalerl.tasks.synthetic import generate_math

    ckpt = tmp_path / "chunk1"
    save_model_dir(build_tiny_model(ModelConfig(name="tiny-s")), new_tiny_tokenizer(), ckpt)
    torch.save({"format": STATE_FORMAT, "run": "t", "chunk": 1, "step": 1}, ckpt / STATE_FILE)
    (ckpt / "dcp").mkdir()  # where the model and AdamW state would be
    (ckpt / SUMMARY_FILE).write_text(json.dumps({"run": "t", "chunk": 1, "step": 1,
                                                 "compute_flops": 1.0,
                                                 "compute_device_hours": 0.1, "tokens": 1}))
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    rows = [{**ex.to_row(), "split": "train" if i < 6 else "val"}
            for i, ex in enumerate(generate_math(8, 0, difficulties=(1,)))]
    pd.DataFrame(rows).to_parquet(tmp_path / "prompts.parquet")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(RUN_CONFIG))
    return ckpt


def _assert_names_file_and_fix(message: str, ckpt: Path) -> None:
    assert str(ckpt / "model.safetensors") in message and "damaged weights file" in message
    assert "delete it and re-run its chunk" in message and str(ckpt) in message
    assert "Traceback" not in message


def test_load_model_names_the_damaged_file(damaged_checkpoint):
    before = _checksums(damaged_checkpoint)
    with pytest.raises(DamagedModelError) as err:
        load_model(damaged_checkpoint, ModelConfig(name=str(damaged_checkpoint)))
    _assert_names_file_and_fix(str(err.value), damaged_checkpoint)
    assert _checksums(damaged_checkpoint) == before


def test_trainer_refuses_a_damaged_init_checkpoint(damaged_checkpoint, tmp_path):
    before = _checksums(tmp_path)
    with pytest.raises(DamagedModelError) as err:
        train_chunk(RunConfig.from_dict(RUN_CONFIG), chunk=2, init=damaged_checkpoint,
                    prompts=tmp_path / "prompts.parquet", out=tmp_path / "chunk2")
    _assert_names_file_and_fix(str(err.value), damaged_checkpoint)
    assert _checksums(tmp_path) == before  # no chunk2, no chunk2.partial
    assert not (tmp_path / "chunk2").exists() and not (tmp_path / "chunk2.partial").exists()


def test_scalerl_eval_refuses_a_damaged_checkpoint(damaged_checkpoint, tmp_path, capsys):
    from scalerl.cli import main

    out = tmp_path / "eval" / "chunk1.parquet"
    before = _checksums(tmp_path)
    code = main(["eval", "--config", str(tmp_path / "run.yaml"), "--checkpoint",
                 str(damaged_checkpoint), "--chunk", "2", "--prompts",
                 str(tmp_path / "prompts.parquet"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    _assert_names_file_and_fix(err, damaged_checkpoint)
    assert not out.exists() and _checksums(tmp_path) == before
