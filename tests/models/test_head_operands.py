"""The FP32 head with bfloat16 operands (`scalerl.models.logprobs`, `operands="bfloat16"`):
fp32 accumulation of bf16-rounded operands, checked against float64 references by hand, in
the chunked Function's forward and backward, and the numerics knob that picks it."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


class _OpLog(TorchDispatchMode):
    """Every aten op below autograd: (op, input dtypes, output dtype, output numel)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [a.dtype for a in args if isinstance(a, torch.Tensor)]
        if isinstance(out, torch.Tensor):
            self.calls.append((func, ins, out.dtype, out.numel()))
        return out


class _Head(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.lm_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        self.lm_head.weight = torch.nn.Parameter(weight)

    def get_output_embeddings(self):
        return self.lm_head


GEMMS = (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm, torch.ops.aten.matmul,
         torch.ops.aten.linear)


def _check_cuda_path(log, vocab, hidden, n_gemms):
    """Every GEMM is torch.mm(bf16, bf16, out_dtype=float32), and no float32 copy of the
    [V, H] weight is made (its float32 gradient is allocated as zeros, not copied)."""
    gemms = [c for c in log.calls if c[0].overloadpacket in GEMMS]
    assert len(gemms) == n_gemms
    for func, ins, out, _ in gemms:
        assert (func, ins, out) == (torch.ops.aten.mm.dtype, [torch.bfloat16] * 2, torch.float32)
    copies = [c for c in log.calls if c[0] in (torch.ops.aten._to_copy.default,
                                               torch.ops.aten.clone.default)
              and c[2] == torch.float32 and c[3] == vocab * hidden]
    assert copies == [], "a float32 copy of the [V, H] head weight was made"


def test_the_cuda_path_of_the_fp32_head_on_the_meta_device():
    """The meta device shares CUDA's op schema, dtype and autograd rules (it has
    torch.mm(..., out_dtype) and no derivative for it): the head's GEMM choice and what it
    calls there is what CUDA runs. Master weights and hidden states float32, bf16 operands:
    the trainer's FP32 head on CUDA (config/gpu.yaml)."""
    from scalerl.models.logprobs import head_gemm

    assert head_gemm("meta", "bfloat16") == "mm_out_dtype"
    assert head_gemm("meta", "float32") == "float32"
    vocab, hidden, n, chunk = 1000, 64, 24, 8
    model = _Head(torch.empty(vocab, hidden, device="meta"))  # [V, H] fp32 masters
    states = torch.empty(n, hidden, device="meta", requires_grad=True)  # [N, H]
    targets = torch.zeros(n, dtype=torch.long, device="meta")  # [N]
    with _OpLog() as log:
        logp, _ = head_token_logprobs(model, states, targets, chunk_tokens=chunk,
                                      head_operands="bfloat16")  # [N]
        logp.sum().backward()
    assert logp.dtype == torch.float32
    assert states.grad.dtype == model.lm_head.weight.grad.dtype == torch.float32
    # forward, recomputed forward and the two gradients, per chunk
    _check_cuda_path(log, vocab, hidden, 4 * (n // chunk))
    # the unchunked head (the reference path) has a backward too, with the same op
    with _OpLog() as log:
        logits = fp32_linear(states, model.lm_head.weight, operands="bfloat16")  # [N, V]
        logits.sum().backward()
    assert logits.dtype == torch.float32
    _check_cuda_path(log, vocab, hidden, 3)
