"""What one push sends and the host slots that carry it (`scalerl.rollout.weight_transfer`).

Layouts are checked on a tiny Qwen3 (tied embedding/head, QK-norm, GQA) against hand-derived
byte counts; the slots' reader/writer protocol with threads whose order is forced (no timing):
the writer's wait callback is what releases the reader, so a write that did not wait would
finish with the reader still registered."""

import multiprocessing
import threading

import pytest
import torch

from scalerl.config import ConfigError
from scalerl.rollout.weight_transfer import (
    HostSlots,
    MappingStream,
    choose_transport,
    map_slot_files,
    unique_named,
    weight_layout,
)


def _qwen3(tie: bool = True):
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, intermediate_size=64,
                      tie_word_embeddings=tie)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def _hand_numel(tie: bool) -> int:
    """Qwen3 with hidden 32, 2 layers, 4 heads x 8, 2 KV heads x 8, MLP 64, vocab 96."""
    h, q, kv, inner, vocab = 32, 4 * 8, 2 * 8, 64, 96
    layer = h * q + 2 * h * kv + q * h + 3 * h * inner + 2 * h + 2 * 8  # attn, MLP, norms, qk
    return vocab * h * (1 if tie else 2) + 2 * layer + h


@pytest.mark.parametrize("tie", [True, False])
def test_a_push_sends_each_tensor_once_in_the_generator_dtype(tie):
    model = _qwen3(tie)
    layout = weight_layout(model.state_dict().items(), "bfloat16")
    assert layout.payload == _hand_numel(tie) * 2  # bf16: 2 bytes per parameter
    assert dict(layout.aliases) == ({"lm_head.weight": "model.embed_tokens.weight"} if tie
                                    else {})
    assert "lm_head.weight" not in layout.names or not tie
    assert {e.dtype for e in layout.entries} == {"bfloat16"}
    assert all(e.offset % 256 == 0 for e in layout.entries)
    # the trainer's float32 masters plus the tied head as a second tensor (the old push)
    assert sum(t.numel() * 4 for t in model.state_dict().values()) == (
        (_hand_numel(True) + 96 * 32) * 4 if tie else _hand_numel(False) * 4)


def test_tied_tensors_are_found_by_identity_not_by_name():
    a = torch.zeros(3, 2)
    unique, aliases = unique_named([("x", a), ("y", a.view(3, 2)), ("z", a.clone())])
    assert [n for n, _ in unique] == ["x", "z"]
    assert aliases == [("y", "x")]


def test_buckets_cut_runs_of_about_bucket_bytes():
    named = [(f"t{i}", torch.zeros(n)) for i, n in enumerate([10, 10, 30, 5, 5])]
    layout = weight_layout(named, "float32", bucket_bytes=80)  # 20 floats per bucket
    assert [[e.name for e in b] for b in layout.buckets()] == [["t0", "t1"], ["t2"],
                                                               ["t3", "t4"]]
    assert layout.from_dict(layout.to_dict()) == layout


def test_slots_round_trip_cast_and_map_by_path():
    model = _qwen3()
    stream = MappingStream(model.state_dict(), "bfloat16")
    slots = HostSlots.create(stream.layout, 2, multiprocessing.get_context("fork"))
    try:
        assert slots.write(7, stream) == stream.layout.payload
        assert slots.newest == 7
        with slots.reading() as got:
            assert got.version == 7 and got.slot == 1
            for name, tensor in model.state_dict().items():
                if name != "lm_head.weight":
                    torch.testing.assert_close(got[name], tensor.to(torch.bfloat16),
                                               atol=0, rtol=0)
        mapped = map_slot_files(slots.attach_info())[1]  # what vLLM's engine core maps
        torch.testing.assert_close(mapped["model.norm.weight"],
                                   model.state_dict()["model.norm.weight"].bfloat16())
        with pytest.raises(RuntimeError, match="slot 0 holds version -1, not the version 6"):
            with slots.reading(6):
                pass
        with pytest.raises(ValueError, match="lacks"):
            slots.write(8, [("model.norm.weight", torch.ones(32))])
    finally:
        slots.unlink()


def test_a_reader_blocks_only_the_writer_of_its_own_slot():
    named = {"w": torch.zeros(4)}
    slots = HostSlots.create(weight_layout(named.items()), 2, multiprocessing.get_context("fork"))
    try:
        slots.write(0, [("w", torch.full((4,), 0.0))])
        holding, release = threading.Event(), threading.Event()

        def reader():
            with slots.reading(0):
                holding.set()
                release.wait()

        thread = threading.Thread(target=reader)
        thread.start()
        holding.wait()
        # the other slot: written while version 0 is being read, no wait at all
        slots.write(1, [("w", torch.full((4,), 1.0))], wait=lambda: pytest.fail("waited"))
        waits = []

        def wait():  # the writer of slot 0 polls here until the reader is gone
            waits.append(1)
            release.set()

        slots.write(2, [("w", torch.full((4,), 2.0))], wait=wait)
        thread.join()
        assert waits, "the write into a slot being read did not wait for its reader"
        with slots.reading() as got:
            assert got.version == 2 and got["w"].tolist() == [2.0] * 4
    finally:
        slots.unlink()


def test_transport_by_placement():
    pick = dict(engine="vllm", async_engine=True, cuda=True, fixed_lag=None)
    assert choose_transport("auto", colocated=True, **pick) == "ipc"
    assert choose_transport("auto", colocated=False, **pick) == "nccl"
    assert choose_transport("auto", colocated=False, **{**pick, "cuda": False}) == "shm"
    assert choose_transport("auto", colocated=False, **{**pick, "engine": "hf"}) == "shm"
    assert choose_transport("auto", colocated=False, **{**pick, "fixed_lag": 1}) == "shm"
    assert choose_transport("shm", colocated=False, **pick) == "shm"
    with pytest.raises(ConfigError, match="NCCL refuses two ranks on one GPU"):
        choose_transport("nccl", colocated=True, **pick)
    with pytest.raises(ConfigError, match="needs CUDA"):
        choose_transport("ipc", colocated=True, **{**pick, "cuda": False})
    with pytest.raises(ConfigError, match="fixed schedule"):
        choose_transport("nccl", colocated=False, **{**pick, "fixed_lag": 0})
