"""Checkpoint directories: atomic writes, summaries, RNG capture, base-vs-trainer detection."""

import json
import random

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from scalerl.models.loading import new_tiny_tokenizer
from scalerl.rl import checkpoint as ckpt
from scalerl.rl.steps import STEP_COLUMNS, read_steps, write_steps


@pytest.fixture(scope="module")
def model():
    cfg = LlamaConfig(vocab_size=103, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1, intermediate_size=16, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


def test_write_and_read_back(tmp_path, model):
    out = tmp_path / "chunk1"
    ckpt.write_checkpoint(out, model=model, tokenizer=new_tiny_tokenizer(),
                          state={"step": 4, "optimizer": {"x": torch.ones(2)}},
                          summary={"step": 4, "chunk": 1, "compute_flops": 1.5})
    assert ckpt.is_trainer_checkpoint(out)
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    state = ckpt.load_trainer_state(out)
    assert state["step"] == 4 and torch.equal(state["optimizer"]["x"], torch.ones(2))
    assert ckpt.read_trainer_summary(out)["compute_flops"] == 1.5
    assert [p.name for p in tmp_path.iterdir()] == ["chunk1"]  # no temporary leftovers


def test_a_state_that_numbered_chunks_from_0_is_refused_naming_the_change(tmp_path, model):
    out = tmp_path / "chunk1"
    ckpt.write_checkpoint(out, model=model, tokenizer=new_tiny_tokenizer(),
                          state={"step": 4, "optimizer": {}}, summary={"step": 4})
    state = torch.load(out / ckpt.STATE_FILE, weights_only=False)
    torch.save({**state, "format": 1, "chunk": 0}, out / ckpt.STATE_FILE)
    with pytest.raises(ValueError, match=r"format 1 .*numbered training chunks from 0 .*chunk "
                                         r"k is chunk k\+1 now.*retrain the run"):
        ckpt.load_trainer_state(out)


def test_failed_write_keeps_the_previous_directory(tmp_path, model):
    out = tmp_path / "ckpt"
    tok = new_tiny_tokenizer()
    ckpt.write_checkpoint(out, model=model, tokenizer=tok, state={"step": 2},
                          summary={"step": 2})

    def boom(tmp):
        (tmp / "half-written").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        ckpt.write_checkpoint(out, model=model, tokenizer=tok, state={"step": 3},
                              summary={"step": 3}, extra=boom)
    assert json.loads((out / ckpt.SUMMARY_FILE).read_text())["step"] == 2
    assert not (out / "half-written").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_base_model_dir_is_step_zero_but_has_no_state(tmp_path, model):
    model.save_pretrained(tmp_path / "base")
    summary = ckpt.read_trainer_summary(tmp_path / "base")
    assert summary["step"] == 0 and summary["chunk"] == 0 and summary["compute_flops"] == 0.0
    assert not ckpt.is_trainer_checkpoint(tmp_path / "base")
    with pytest.raises(FileNotFoundError, match="not a trainer checkpoint"):
        ckpt.load_trainer_state(tmp_path / "base")
    with pytest.raises(FileNotFoundError, match="neither"):
        ckpt.read_trainer_summary(tmp_path / "nothing")


def test_rng_state_round_trip():
    state = ckpt.capture_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(3))
    ckpt.restore_rng_state(state)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[0] == again[0] and first[1] == again[1]
    torch.testing.assert_close(first[2], again[2], rtol=0, atol=0)


def test_steps_parquet_schema(tmp_path):
    row = {c: 0.5 for c in STEP_COLUMNS}
    row.update(run="r", chunk=1, step=1, tokens=10, npr_retired=0, staleness_max=2)
    path = write_steps([row, {**row, "step": 2}], tmp_path / "steps.parquet")
    frame = read_steps(path)
    assert list(frame.columns) == list(STEP_COLUMNS)
    assert frame["step"].tolist() == [1, 2] and str(frame["staleness_max"].dtype) == "int32"
    with pytest.raises(ValueError, match="differ from STEP_COLUMNS"):
        write_steps([{**row, "extra": 1}], tmp_path / "bad.parquet")


def test_steps_of_a_scalerl_from_before_the_time_columns(tmp_path):
    """A steps.parquet, or a partial save's rows, without the time_* columns: NaN, not an
    error (a chunk resumed across the upgrade still writes its steps.parquet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scalerl.rl.steps import TIME_COLUMNS, with_time_columns

    old = {c: 0.5 for c in STEP_COLUMNS if c not in TIME_COLUMNS}
    old.update(run="r", chunk=1, step=1, tokens=10, npr_retired=0, staleness_max=2)
    pq.write_table(pa.Table.from_pylist([old]), tmp_path / "old.parquet")
    frame = read_steps(tmp_path / "old.parquet")
    assert frame[list(TIME_COLUMNS)].isna().all().all() and frame["step"].tolist() == [1]
    write_steps([with_time_columns(old)], tmp_path / "new.parquet")  # the resumed chunk's rows
    assert read_steps(tmp_path / "new.parquet")["time_grade_s"].isna().all()
    with pytest.raises(ValueError, match=r"missing steps column\(s\) \['loss'\]"):
        pq.write_table(pa.Table.from_pylist([{k: v for k, v in old.items() if k != "loss"}]),
                       tmp_path / "broken.parquet")
        read_steps(tmp_path / "broken.parquet")
