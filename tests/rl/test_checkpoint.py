"""Checkpoint directories at one rank: the trainer's writer (`scalerl.parallel.checkpoint`, one
format at every world size; several ranks and resharding: tests/parallel), atomic writes,
summaries, RNG capture, base-vs-trainer detection."""

import json
import random

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from scalerl.models.loading import new_tiny_tokenizer
from scalerl.parallel.checkpoint import load_checkpoint_state, write_checkpoint
from scalerl.parallel.shard import shard_policy
from scalerl.parallel.world import SINGLE
from scalerl.rl import checkpoint as ckpt
from scalerl.rl.steps import STEP_COLUMNS, read_steps, write_steps


@pytest.fixture(scope="module")
def model():
    cfg = LlamaConfig(vocab_size=103, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1, intermediate_size=16, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


def _trained(model, seed: int = 0):
    """(policy, AdamW) after one step on random gradients: the optimizer has state."""
    policy = shard_policy(model, SINGLE)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    for p in policy.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return policy, optimizer


def _write(out, model, state, summary, extra=None):
    policy, optimizer = _trained(model)

    def write_main(tmp):
        ckpt.write_state_files(tmp, state=state, summary=summary)
        if extra is not None:
            extra(tmp)

    write_checkpoint(out, policy=policy, optimizer=optimizer, tokenizer=new_tiny_tokenizer(),
                     world=SINGLE, write_main=write_main)
    return policy, optimizer


def test_write_and_read_back(tmp_path, model):
    out = tmp_path / "chunk1"
    policy, optimizer = _write(out, model, {"step": 4},
                               {"step": 4, "chunk": 1, "compute_flops": 1.5})
    assert ckpt.is_trainer_checkpoint(out)
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert sorted(p.name for p in (out / "dcp").iterdir()) == [".metadata", "__0_0.distcp"]
    state = ckpt.load_trainer_state(out)
    assert state["step"] == 4 and state["format"] == ckpt.STATE_FORMAT == 3
    assert "optimizer" not in state  # the model and AdamW state are in dcp/
    assert ckpt.read_trainer_summary(out)["compute_flops"] == 1.5
    assert [p.name for p in tmp_path.iterdir()] == ["chunk1"]  # no temporary leftovers
    fresh = LlamaForCausalLM(model.config)  # other weights, no optimizer state
    policy_b = shard_policy(fresh, SINGLE)
    optimizer_b = torch.optim.AdamW(policy_b.parameters(), lr=0.5)
    load_checkpoint_state(out, policy_b, optimizer_b)
    for (name, a), b in zip(policy.state_dict().items(), policy_b.state_dict().values()):
        torch.testing.assert_close(b, a, atol=0, rtol=0, msg=name)
    sa, sb = optimizer.state_dict(), optimizer_b.state_dict()
    assert sb["param_groups"][0]["lr"] == 1e-2 and sa["state"].keys() == sb["state"].keys()
    for key, va in sa["state"].items():
        for field in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(sb["state"][key][field], va[field], atol=0, rtol=0)


def test_a_one_rank_state_of_format_2_is_refused_naming_the_change(tmp_path, model):
    out = tmp_path / "chunk1"
    _write(out, model, {"step": 4}, {"step": 4})
    state = torch.load(out / ckpt.STATE_FILE, weights_only=False)
    torch.save({**state, "format": 2, "optimizer": {}}, out / ckpt.STATE_FILE)
    with pytest.raises(ValueError, match=r"format 2 written at one trainer rank .*optimizer "
                                         r"state in trainer_state.pt.*re-run this chunk"):
        ckpt.load_trainer_state(out)
    torch.save({**state, "format": 2}, out / ckpt.STATE_FILE)  # format 2 of several ranks
    assert ckpt.load_trainer_state(out)["step"] == 4  # the same layout: it resumes


def test_a_state_that_numbered_chunks_from_0_is_refused_naming_the_change(tmp_path, model):
    out = tmp_path / "chunk1"
    _write(out, model, {"step": 4}, {"step": 4})
    state = torch.load(out / ckpt.STATE_FILE, weights_only=False)
    torch.save({**state, "format": 1, "chunk": 0}, out / ckpt.STATE_FILE)
    with pytest.raises(ValueError, match=r"format 1 .*numbered training chunks from 0 .*chunk "
                                         r"k is chunk k\+1 now.*retrain the run"):
        ckpt.load_trainer_state(out)


def test_failed_write_keeps_the_previous_directory(tmp_path, model):
    out = tmp_path / "ckpt"
    _write(out, model, {"step": 2}, {"step": 2})

    def boom(tmp):
        (tmp / "half-written").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        _write(out, model, {"step": 3}, {"step": 3}, extra=boom)
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
