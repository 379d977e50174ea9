"""The FP32 head with bfloat16 operands (`scalerl.models.logprobs`, `operands="bfloat16"`):
fp32 accumulation of bf16-rounded operands, checked against float64 references by hand, in
the chunked Function's forward and backward, and the numerics knob that picks it."""

import pytest
import torch

from scalerl.models.config import ModelConfig
from scalerl.models.loading import build_tiny_model
from scalerl.models.logprobs import fp32_linear, head_token_logprobs, sequence_logprobs
from scalerl.rl.numerics import StepNumerics


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).double()


def test_bf16_operands_are_fp32_sums_of_exact_products():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 256, generator=g)  # [N, H] float32 hidden states
    w = 0.05 * torch.randn(300, 256, generator=g)  # [V, H] float32 master weights
    ref = _bf16(x) @ _bf16(w).t()  # [N, V] the same operands, float64 sums
    out = fp32_linear(x, w, operands="bfloat16")  # [N, V]
    assert out.dtype == torch.float32
    # only the float32 summation differs: 256 terms, |sum| of |products| ~ 256 * 0.04
    bound = 256 * 2**-24 * (_bf16(x).abs() @ _bf16(w).abs().t())  # [N, V]
    assert ((out.double() - ref).abs() <= bound).all()
    # the rounding of the operands is what remains against the float32 operands (~2^-8)
    exact = x.double() @ w.double().t()  # [N, V]
    assert (out.double() - exact).abs().max() > 1e3 * (out.double() - ref).abs().max()
    assert torch.equal(fp32_linear(x, w, operands="float32"), fp32_linear(x, w))
    with pytest.raises(ValueError, match="operands 'fp16'"):
        fp32_linear(x, w, operands="fp16")


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(ModelConfig(name="tiny-s", seed=3)).train()


def _reference(hidden, weight, targets, temperature):
    """log softmax((bf16(h) bf16(W)^T) / T)[target] in float64 and its gradients (w.r.t. the
    float32 h and W through the rounding taken as the identity)."""
    h = hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    rounded_h = h + (_bf16(hidden) - h).detach()  # value rounded, gradient straight through
    rounded_w = w + (_bf16(weight) - w).detach()
    logp = torch.log_softmax(rounded_h @ rounded_w.t() / temperature, -1)  # [N, V]
    picked = logp.gather(-1, targets[:, None]).squeeze(-1)  # [N]
    return picked, h, w


def test_chunked_bf16_operand_head_matches_a_float64_reference(model):
    g = torch.Generator().manual_seed(1)
    weight = model.get_output_embeddings().weight  # [V, H] float32
    hidden = torch.randn(11, weight.shape[1], generator=g, requires_grad=True)  # [N, H]
    targets = torch.randint(0, weight.shape[0], (11,), generator=g)  # [N]
    seed = torch.randn(11, generator=g)  # [N] incoming gradient
    model.zero_grad(set_to_none=True)
    logp, _ = head_token_logprobs(model, hidden, targets, temperature=0.7, chunk_tokens=4,
                                  head_operands="bfloat16")  # [N]
    (logp * seed).sum().backward()
    ref, h, w = _reference(hidden, weight, targets, 0.7)
    (ref * seed.double()).sum().backward()
    torch.testing.assert_close(logp.double(), ref.detach(), atol=2e-6, rtol=0)
    # the backward rounds the logits' gradient to bf16 too (2^-8 relative per element, so sums
    # that cancel keep an error of ~2^-8 of the gradient's scale)
    for got, want in ((hidden.grad, h.grad), (weight.grad, w.grad)):
        scale = float(want.abs().max())
        torch.testing.assert_close(got.double(), want, atol=4e-3 * scale, rtol=1e-2)
        assert (got.double() - want).abs().max() > 1e-7 * scale  # bf16, not fp32, gradients


def test_sequence_logprobs_bf16_operands_chunked_equals_unchunked(model):
    ids = torch.randint(6, 103, (2, 8), generator=torch.Generator().manual_seed(2))  # [2, 8]
    with torch.no_grad():
        full = sequence_logprobs(model, ids, head_operands="bfloat16")  # [2, 8]
        chunked = sequence_logprobs(model, ids, head_operands="bfloat16", chunk_tokens=3)
        fp32 = sequence_logprobs(model, ids)  # [2, 8]
    torch.testing.assert_close(chunked, full, atol=1e-6, rtol=0)
    assert 0 < (full - fp32).abs().max() < 0.05  # the operands' rounding, no more


def test_numerics_knob_resolves_by_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert StepNumerics().head_operands(cpu) == "float32"  # CPU unchanged
    assert StepNumerics().head_operands(cuda) == "bfloat16"  # tensor cores, vLLM's rounding
    assert StepNumerics(lm_head_operands="float32").head_operands(cuda) == "float32"
    assert StepNumerics(lm_head_operands="bfloat16").head_operands(cpu) == "bfloat16"
