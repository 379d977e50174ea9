"""sequence_logprobs / lm_head_logits: exact values, padding, FP32 head, tied and untied heads."""

import math

import pytest
import torch

from scalerl.models.config import ModelConfig
from scalerl.models.loading import build_tiny_model
from scalerl.models.logprobs import lm_head_logits, positions_from_mask, sequence_logprobs


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(ModelConfig(name="tiny-s", seed=5))


def test_matches_the_full_forward(model):
    ids = torch.tensor([[1, 40, 41, 42, 43, 44]])
    logits = model(ids).logits  # [1, 6, V] (HF head, float32 model)
    expected = torch.log_softmax(logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    got = sequence_logprobs(model, ids)
    assert got[0, 0] == 0.0
    torch.testing.assert_close(got[0, 1:], expected, atol=1e-6, rtol=0)


def test_zero_final_norm_gives_uniform_logprobs():
    # RMSNorm weight 0 -> hidden 0 -> all logits 0 -> p = 1/103 for every token:
    # log p = -ln 103 = -4.634728988..., entropy = ln 103.
    m = build_tiny_model(ModelConfig(name="tiny-s"))
    with torch.no_grad():
        m.model.norm.weight.zero_()
    ids = torch.tensor([[1, 9, 10, 11]])
    logp, ent = sequence_logprobs(m, ids, return_entropy=True)
    torch.testing.assert_close(logp[0, 1:], torch.full((3,), -math.log(103)))
    torch.testing.assert_close(ent[0, 1:], torch.full((3,), math.log(103)))


def test_left_and_right_padding_do_not_change_values(model):
    seq = [1, 40, 41, 42]
    plain = sequence_logprobs(model, torch.tensor([seq]))[0]
    left = torch.tensor([[0, 0] + seq])
    left_lp = sequence_logprobs(model, left, (left != 0).long())[0, 2:]
    right = torch.tensor([seq + [0, 0]])
    right_lp = sequence_logprobs(model, right, (right != 0).long())[0, :4]
    torch.testing.assert_close(left_lp[1:], plain[1:], atol=1e-5, rtol=0)
    torch.testing.assert_close(right_lp, plain, atol=1e-6, rtol=0)
    assert positions_from_mask(torch.tensor([[0, 0, 1, 1, 1]])).tolist() == [[0, 0, 0, 1, 2]]


def test_temperature_divides_the_logits(model):
    ids = torch.tensor([[1, 40, 41, 42]])
    logits = model(ids).logits[0, :-1]  # [3, V]
    expected = torch.log_softmax(logits / 0.5, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    torch.testing.assert_close(sequence_logprobs(model, ids, temperature=0.5)[0, 1:], expected,
                               atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="temperature"):
        sequence_logprobs(model, ids, temperature=0.0)


def test_fp32_head_on_a_bf16_model(model):
    bf16 = build_tiny_model(ModelConfig(name="tiny-s", seed=5)).to(torch.bfloat16)
    hidden = torch.randn(2, 3, 64).to(torch.bfloat16)
    w = bf16.lm_head.weight
    fp32 = lm_head_logits(bf16, hidden, fp32_lm_head=True)
    assert fp32.dtype == torch.float32
    torch.testing.assert_close(fp32, hidden.float() @ w.float().T, atol=1e-6, rtol=0)
    low = lm_head_logits(bf16, hidden, fp32_lm_head=False)  # bf16 matmul, then upcast
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, (hidden @ w.T).float())
    assert not torch.equal(low, fp32)  # bf16 rounding of the logits is what the switch removes


def test_untied_head_is_used():
    m = build_tiny_model(ModelConfig(name="tiny-s"))
    from transformers import AutoModelForCausalLM

    cfg = m.config
    cfg.tie_word_embeddings = False
    untied = AutoModelForCausalLM.from_config(cfg)
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    with torch.no_grad():
        untied.lm_head.weight.zero_()  # zero head -> uniform, whatever the embeddings
    lp = sequence_logprobs(untied, torch.tensor([[1, 9, 10]]))
    torch.testing.assert_close(lp[0, 1:], torch.full((2,), -math.log(103)))


def test_gradients_flow(model):
    ids = torch.tensor([[1, 40, 41, 42]])
    sequence_logprobs(model, ids).sum().backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None
    model.zero_grad()
