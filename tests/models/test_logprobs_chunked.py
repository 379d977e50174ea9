"""The memory-bounded head: chunked / selected-position log-probs and entropy equal the
full-vocabulary reference (values and gradients), keep no [tokens, V] tensor for the backward,
and the FP32 head is never autocast."""

import pytest
import torch

from scalerl.models.config import ModelConfig
from scalerl.models.loading import build_tiny_model
from scalerl.models.logprobs import (
    fp32_linear,
    head_token_logprobs,
    lm_head_logits,
    mm_out_dtype_supported,
    sequence_logprobs,
)

V = 103  # the character tokenizer's vocabulary (tiny models)


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(ModelConfig(name="tiny-s", seed=3)).train()


def _batch():
    """3 right-padded rows of 9 tokens; loss positions 3.. (row 2 ends at 6)."""
    ids = torch.randint(6, V, (3, 9), generator=torch.Generator().manual_seed(0))  # [3, 9]
    attention = torch.ones_like(ids)
    attention[2, 6:] = 0
    loss_mask = torch.zeros_like(ids, dtype=torch.bool)
    loss_mask[:, 3:] = True
    loss_mask[2, 6:] = False
    return ids, attention, loss_mask


def _scores(model, **kwargs):
    """Masked log-probs, entropy and parameter gradients of Σ w·logp over the loss positions."""
    ids, attention, loss_mask = _batch()
    model.zero_grad(set_to_none=True)
    logp, ent = sequence_logprobs(model, ids, attention, temperature=0.7, return_entropy=True,
                                  **kwargs)  # [3, 9], [3, 9]
    assert logp.requires_grad and not ent.requires_grad  # the entropy carries no graph
    weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(1))  # [3, 9]
    (logp * weights * loss_mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return logp * loss_mask, ent * loss_mask, grads


@pytest.mark.parametrize("kwargs", [
    {"chunk_tokens": 1}, {"chunk_tokens": 4}, {"chunk_tokens": 100},
    {"token_mask": "loss"}, {"token_mask": "loss", "chunk_tokens": 2},
])
def test_chunked_equals_the_full_vocabulary_reference(model, kwargs):
    if kwargs.get("token_mask") == "loss":
        kwargs = {**kwargs, "token_mask": _batch()[2]}
    ref_logp, ref_ent, ref_grads = _scores(model)
    logp, ent, grads = _scores(model, **kwargs)
    torch.testing.assert_close(logp, ref_logp, atol=1e-6, rtol=0)
    # entropies are ~ln V = 4.6, where float32 resolves ~5e-7: compare to 1e-6 relative
    torch.testing.assert_close(ent, ref_ent, atol=1e-6, rtol=1e-6)
    for name, ref in ref_grads.items():  # within 1e-6 of each gradient's largest entry
        torch.testing.assert_close(grads[name], ref, atol=1e-6 * float(ref.abs().max()), rtol=0,
                                   msg=lambda m, name=name: f"{name}: {m}")
    assert float(ref_grads["model.embed_tokens.weight"].abs().max()) > 0.1  # a real gradient


def test_unselected_positions_are_zero(model):
    ids, attention, loss_mask = _batch()
    with torch.no_grad():
        logp, ent = sequence_logprobs(model, ids, attention, return_entropy=True,
                                      token_mask=loss_mask, chunk_tokens=2)
    assert (logp[~loss_mask] == 0).all() and (ent[~loss_mask] == 0).all()
    assert (logp[loss_mask] < 0).all() and (ent[loss_mask] > 0).all()


def test_head_with_bias_matches_autograd_of_log_softmax():
    # A plain nn.Linear head with a bias: values and gradients of h, W and b against autograd
    # of log_softmax((h W^T + b) / T) gathered at the targets.
    gen = torch.Generator().manual_seed(2)
    head = torch.nn.Linear(8, 11, bias=True)
    torch.nn.init.normal_(head.weight, generator=gen)
    torch.nn.init.normal_(head.bias, generator=gen)

    class Head(torch.nn.Module):
        def get_output_embeddings(self):
            return head

    hidden = torch.randn(7, 8, generator=gen, requires_grad=True)  # [7, 8]
    targets = torch.randint(0, 11, (7,), generator=gen)  # [7]
    grad_out = torch.randn(7, generator=gen)  # [7]
    logp, ent = head_token_logprobs(Head(), hidden, targets, temperature=1.3, chunk_tokens=3,
                                    return_entropy=True)
    (logp * grad_out).sum().backward()
    got = [hidden.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()]
    hidden.grad = head.weight.grad = head.bias.grad = None
    logp_all = torch.log_softmax(head(hidden) / 1.3, dim=-1)  # [7, 11]
    expected = logp_all.gather(-1, targets[:, None]).squeeze(-1)  # [7]
    (expected * grad_out).sum().backward()
    torch.testing.assert_close(logp, expected.detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(ent, -(logp_all.exp() * logp_all).sum(-1).detach(), atol=1e-6,
                               rtol=0)
    for g, ref in zip(got, [hidden.grad, head.weight.grad, head.bias.grad]):
        torch.testing.assert_close(g, ref, atol=1e-6, rtol=1e-6)


def _saved_vocab_tensors(model, **kwargs) -> list[tuple[int, ...]]:
    """Shapes of the tensors autograd keeps for the backward whose last dim is V, other than
    the head weight itself."""
    ids, attention, loss_mask = _batch()
    weight_ptr = model.lm_head.weight.data_ptr()
    shapes = []

    def pack(t):
        if t.dim() >= 1 and t.shape[-1] == V and t.data_ptr() != weight_ptr:
            shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sequence_logprobs(model, ids, attention, return_entropy=True, **kwargs)
    return shapes


def test_the_chunked_backward_keeps_no_logits(model):
    # The reference keeps the [3, 8, V] log-softmax for its backward; the chunked Function keeps
    # hidden states and one log-normaliser per position and recomputes the logits.
    assert (3, 8, V) in _saved_vocab_tensors(model)
    assert _saved_vocab_tensors(model, token_mask=_batch()[2], chunk_tokens=4) == []


def test_token_mask_errors(model):
    ids, attention, loss_mask = _batch()
    with pytest.raises(ValueError, match="token_mask must be a bool tensor of shape"):
        sequence_logprobs(model, ids, token_mask=loss_mask.long())
    loss_mask[0, 0] = True
    with pytest.raises(ValueError, match="True at position 0"):
        sequence_logprobs(model, ids, token_mask=loss_mask)
    with pytest.raises(ValueError, match="chunk_tokens must be >= 0"):
        head_token_logprobs(model, torch.zeros(2, 64), torch.zeros(2, dtype=torch.long),
                            chunk_tokens=-1)


def test_fp32_linear_of_bf16_inputs_is_exact_products_in_fp32():
    # bf16 × bf16 products are exact in float32, so either path (out_dtype mm or .float())
    # equals the float64 product to float32 accumulation error, whatever autocast says.
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(5, 64, generator=gen).to(torch.bfloat16)  # [5, 64]
    w = torch.randn(9, 64, generator=gen).to(torch.bfloat16)  # [9, 64]
    exact = (x.double() @ w.double().T).float()  # [5, 9]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fp32_linear(x, w)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, exact, atol=1e-5, rtol=1e-6)
    assert not torch.equal(out, (x @ w.T).float())  # a bf16 result would be rounded
    assert isinstance(mm_out_dtype_supported("cpu"), bool)


def test_the_fp32_head_is_not_autocast(model):
    hidden = torch.randn(4, 64, generator=torch.Generator().manual_seed(5))  # [4, 64]
    plain = lm_head_logits(model, hidden, fp32_lm_head=True)  # [4, V]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = lm_head_logits(model, hidden, fp32_lm_head=True)
        low = lm_head_logits(model, hidden, fp32_lm_head=False)  # the ablation: bf16 head
    assert torch.equal(inside, plain)
    assert inside.dtype == low.dtype == torch.float32 and not torch.equal(low, plain)
    torch.testing.assert_close(low, plain, atol=0.05, rtol=0.02)  # only bf16 rounding apart


def test_chunked_model_dtype_head_matches_the_reference(model):
    # fp32_lm_head=False in a float32 model is the same float32 math on both paths.
    ids, attention, loss_mask = _batch()
    with torch.no_grad():
        ref = sequence_logprobs(model, ids, attention, fp32_lm_head=False)
        got = sequence_logprobs(model, ids, attention, fp32_lm_head=False,
                                token_mask=loss_mask, chunk_tokens=3)
    torch.testing.assert_close(got[loss_mask], ref[loss_mask], atol=1e-6, rtol=0)


def test_bf16_weights_chunked_fp32_head_matches_the_reference():
    # A bf16 model (the weight cast to float32 once per pass): the same float32 head math as
    # the reference, so the values agree to float32 rounding; gradients come back in bf16.
    bf16 = build_tiny_model(ModelConfig(name="tiny-s", seed=3)).to(torch.bfloat16)
    ids, attention, loss_mask = _batch()
    ref = sequence_logprobs(bf16, ids, attention)
    (ref * loss_mask).sum().backward()
    ref_grad = bf16.lm_head.weight.grad.clone()
    bf16.zero_grad(set_to_none=True)
    got = sequence_logprobs(bf16, ids, attention, token_mask=loss_mask, chunk_tokens=4)
    (got * loss_mask).sum().backward()
    assert got.dtype == torch.float32 and bf16.lm_head.weight.grad.dtype == torch.bfloat16
    torch.testing.assert_close(got[loss_mask], ref[loss_mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(bf16.lm_head.weight.grad.float(), ref_grad.float(),
                               atol=0.02 * float(ref_grad.abs().max()), rtol=0.01)


@pytest.mark.gpu
def test_on_cuda_the_chunked_fp32_head_matches_the_cpu_reference(model):
    """The CUDA path of the trainer's scoring: float32 on CUDA equals the CPU values (no TF32
    in matmuls by default: to 1e-4), and the body under bf16 autocast with the chunked FP32
    head stays within bf16's rounding of them (2^-8 relative on activations of a 2-layer body:
    stated 0.1 nats on any token, measured mean far below)."""
    ids, attention, loss_mask = _batch()
    with torch.no_grad():
        ref = sequence_logprobs(model, ids, attention, temperature=0.7)  # [3, 9] CPU float32
        cuda = build_tiny_model(ModelConfig(name="tiny-s", seed=3)).to("cuda")
        dev = [t.to("cuda") for t in (ids, attention, loss_mask)]
        fp32 = sequence_logprobs(cuda, dev[0], dev[1], temperature=0.7, token_mask=dev[2],
                                 chunk_tokens=4).cpu()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            mixed = sequence_logprobs(cuda, dev[0], dev[1], temperature=0.7,
                                      token_mask=dev[2], chunk_tokens=4).cpu()
    assert fp32.dtype == mixed.dtype == torch.float32  # the head is never autocast
    torch.testing.assert_close(fp32[loss_mask], ref[loss_mask], atol=1e-4, rtol=0)
    torch.testing.assert_close(mixed[loss_mask], ref[loss_mask], atol=0.1, rtol=0)
    assert float((mixed - ref)[loss_mask].abs().mean()) < 0.05
