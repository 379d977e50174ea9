"""Compute accounting: FLOP estimate by hand, parameter counting, cumulative counters."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from scalerl.rl.compute import ComputeCounter, count_flop_params, step_flops


def _llama(tied: bool) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1, intermediate_size=16, tie_word_embeddings=tied)
    return LlamaForCausalLM(cfg)


def test_step_flops_by_hand():
    # N = 1000; 30 forward-only tokens -> 2*1000*30 = 60_000; 10 trained -> 6*1000*10 = 60_000
    assert step_flops(1000, forward_tokens=30, trained_tokens=10) == 120_000.0
    with pytest.raises(ValueError, match="non-negative"):
        step_flops(1000, forward_tokens=-1, trained_tokens=0)


@pytest.mark.parametrize("tied", [True, False])
def test_flop_params_drop_the_input_embedding_only(tied):
    model = _llama(tied)
    # One layer, hidden 8, MLP 16, vocab 10:
    #   attention q,k,v,o: 4 * 8*8 = 256; MLP gate,up,down: 3 * 8*16 = 384; 2 RMSNorm: 16
    #   final norm: 8; LM head 10*8 = 80 (counted once, whether tied to the embedding or not)
    #   input embedding 10*8 = 80: left out when untied (a lookup)
    expected = 256 + 384 + 16 + 8 + 80
    assert count_flop_params(model) == expected
    total = sum(p.numel() for p in model.parameters())
    assert total == expected + (0 if tied else 80)


def test_counter_accumulates_and_round_trips():
    c = ComputeCounter(n_params=100, n_devices=2)
    used = c.add_step(wall_seconds=1800.0, prompt_tokens=[3, 3], completion_tokens=[5, 7],
                      trained_tokens=18)
    # forward: 2*100*(6 + 12) = 3600; trained: 6*100*18 = 10800; hours: 0.5 h * 2 devices
    assert used.flops == 14_400.0
    assert used.device_hours == pytest.approx(1.0)
    assert used.generated_tokens == 12
    c.add_step(wall_seconds=0.0, prompt_tokens=[1], completion_tokens=[1], trained_tokens=0)
    assert c.flops == 14_400.0 + 400.0 and c.tokens == 13
    other = ComputeCounter(n_params=100)
    other.load_state_dict(c.state_dict())
    assert (other.flops, other.device_hours, other.tokens) == (c.flops, c.device_hours, 13)
    assert other.n_devices == 1  # devices held are a property of the new process


def test_counter_rejects_foreign_state_and_bad_input():
    c = ComputeCounter(n_params=100)
    with pytest.raises(ValueError, match="different model"):
        c.load_state_dict(ComputeCounter(n_params=5).state_dict())
    with pytest.raises(ValueError, match="wall_seconds"):
        c.add_step(wall_seconds=-1, prompt_tokens=[], completion_tokens=[], trained_tokens=0)
    with pytest.raises(ValueError, match="n_params"):
        ComputeCounter(n_params=0)


def test_real_model_counts_match_torch():
    model = _llama(tied=True)
    assert count_flop_params(model) == sum(p.numel() for p in model.parameters())
    assert isinstance(count_flop_params(torch.nn.Linear(3, 2)), int)  # no embeddings at all
