"""Per-token log-probabilities with an optional float32 LM head: the trainer's side of rho.

The model is split into its body (embeddings + blocks + final norm: `model.base_model`) and its
head (`model.get_output_embeddings()`), so the head can run in float32 whatever the body's
dtype or autocast state:

    h      = body(input_ids)                      # [B, T, H], model / autocast dtype
    logits = fp32(h) @ fp32(W).T (+ b)            # [B, T, V], fp32_lm_head, operands float32
           = mm(bf16(h), bf16(W).T, out fp32)     #            fp32_lm_head, operands bfloat16
           = (h @ W.T).float()                    # fp32_lm_head=False (head in compute dtype)
    logp   = log_softmax(logits / temperature)    # always in float32

ScaleRL (Khatri et al. 2025, sec. 3.2, Fig. 5b) computes the head in FP32 on both the
generator and the trainer, because the generator/trainer probability mismatch that distorts
the importance ratio rho = pi_train / pi_gen is largest at the LM head (MiniMax-M1). The same
`lm_head_logits` is used by the HF engine, so both sides round the same way. The FP32 head is
never autocast: `fp32_linear` switches autocast off and multiplies in float32.

The GEMM (`head_gemm(device_type, operands, dtype)` says which one runs): with bf16/fp16
operands it is `torch.mm(a, b, out_dtype=torch.float32)` ("mm_out_dtype": tensor cores on
CUDA, fp32 accumulation and output, no fp32 copy of the [V, H] weight) where the device has
that op, else the same operands upcast with `.float()` ("upcast": an fp32 copy of the weight,
an fp32 x fp32 GEMM); float32 operands multiply as they are ("float32"). Both low-precision
paths give the same math: a product of two bf16 (or fp16) numbers is exact in float32 and the
sum is accumulated in float32. `mm_out_dtype_supported` probes the op once per device type,
forward only: the op has no derivative on any device (torch 2.13, `derivative for aten::mm is
not implemented`), and nothing here needs one: the chunked head's custom backward calls the
op itself, and `fp32_linear` gives it the same backward through `_Bf16OperandMm`. CUDA has it,
the meta device has it (it shares CUDA's op schema, dtype and autograd rules: tests check the
CUDA path there), torch 2.13's CPU does not (NotImplementedError).

Head operands (`operands`, `StepNumerics.lm_head_operands`): with float32 hidden states and
master weights (the trainer) the FP32 head is an fp32 x fp32 GEMM, which CUDA runs on its
CUDA cores (~67 TFLOP/s on an H100 against ~990 for bf16 tensor cores): forward, recomputed
forward and two gradient GEMMs per scored token. `operands="bfloat16"` rounds both operands
(and, in the backward, the logits' gradient) to bfloat16 and accumulates and outputs float32:
`torch.mm(..., out_dtype=torch.float32)` on tensor cores where supported, the same products
upcast elsewhere. That is exactly what vLLM's FP32 head computes on CUDA for a bf16 model
(`torch.mm(hidden_bf16, weight_bf16, out_dtype=float32)`), so trainer and generator also round
the same operands, which is the mismatch the FP32 head is for. The log-softmax stays float32.
`None`/"float32": operands as given (fp32 x fp32 for fp32 inputs: the CPU default).

`sequence_logprobs(...)[b, t] = log p(input_ids[b, t] | input_ids[b, :t])` for t >= 1 and 0 at
t = 0 (no context). Position ids follow the attention mask (left or right padding both work).
Two ways to score the head, by the arguments:

- `token_mask=None, chunk_tokens=0` (the reference): logits of every position at once,
  [B, T, V] float32, kept by autograd for the backward (O(B·T·V) memory);
- `token_mask` and/or `chunk_tokens > 0` (the trainer at real sizes): only the positions in
  `token_mask` (the loss mask; all positions when None) are scored, `chunk_tokens` of them at a
  time by `head_token_logprobs`, a custom autograd Function that keeps only the hidden states
  and one log-normaliser per position and recomputes each chunk's logits in the backward.
  Peak memory of the head is O(chunk_tokens · V) in the forward and in the backward (plus the
  [V, H] float32 weight gradient) instead of O(B · T · V). Unselected positions get 0.

The entropy (`return_entropy=True`, a metric) is computed without a graph in both ways:
gradients flow only through the token log-probabilities.

Deliberately left out: logit soft-capping / logit scaling of some architectures (Gemma2,
Cohere); such models are rejected with a clear error rather than scored wrongly. Fused
(Triton/Liger) cross-entropy kernels: the chunked Function is plain torch.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

__all__ = ["HEAD_GEMMS", "HEAD_OPERANDS", "fp32_linear", "head_gemm", "head_token_logprobs",
           "lm_head_logits", "mm_out_dtype_supported", "model_body", "positions_from_mask",
           "sequence_logprobs"]

_LOW_PRECISION = (torch.bfloat16, torch.float16)
HEAD_OPERANDS = (None, "float32", "bfloat16")
HEAD_GEMMS = ("mm_out_dtype", "upcast", "float32")  # head_gemm's answers (module docstring)


def _check_supported(model) -> None:
    config = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        value = getattr(config, attr, None)
        if value not in (None, 1, 1.0):
            raise NotImplementedError(
                f"{type(model).__name__} uses {attr}={value}; scalerl's split body/head forward "
                "does not apply it. Use a model without logit scaling/soft-capping."
            )


def _no_autocast(device_type: str):
    """Autocast off on `device_type` (a device without autocast, e.g. meta: nothing to do)."""
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def model_body(model):
    """The transformer body (everything before the LM head)."""
    body = getattr(model, "base_model", None)
    if body is None or body is model:
        raise ValueError(f"{type(model).__name__} has no separate body (base_model)")
    return body


@functools.cache
def mm_out_dtype_supported(device_type: str) -> bool:
    """Whether `torch.mm(a, b, out_dtype=torch.float32)` runs for bf16 a, b on this device type:
    probed once, forward only, on 2x2 tensors (module docstring: the op has no derivative, and
    the head never asks it for one). False for a device type this process cannot allocate on."""
    try:
        a = torch.ones(2, 2, dtype=torch.bfloat16, device=device_type)
        out = torch.mm(a, a, out_dtype=torch.float32)
    except (RuntimeError, NotImplementedError, TypeError, AssertionError):  # no such device/op
        return False
    return out.dtype == torch.float32


def _low_precision(x_dtype: torch.dtype, w_dtype: torch.dtype,
                   operands: str | None) -> torch.dtype | None:
    """The dtype both head operands are multiplied in when it is below float32 (bfloat16 for
    bf16 operands; the inputs' own for low-precision inputs of one dtype), else None."""
    if operands == "bfloat16":
        return torch.bfloat16
    if x_dtype == w_dtype and x_dtype in _LOW_PRECISION:
        return x_dtype
    return None


def head_gemm(device_type: str, operands: str | None,
              dtype: torch.dtype | str = torch.float32) -> str:
    """The GEMM the FP32 head runs on `device_type` for `operands` and hidden states and head
    weight in `dtype`: "mm_out_dtype", "upcast" or "float32" (module docstring). The trainer
    and the planner (`scalerl.plan.adapters`) ask the same question."""
    if operands not in HEAD_OPERANDS:
        raise ValueError(f"operands {operands!r}: one of {HEAD_OPERANDS}")
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return _gemm(device_type, dtype, dtype, operands)


def _gemm(device_type: str, x_dtype: torch.dtype, w_dtype: torch.dtype,
          operands: str | None) -> str:
    if _low_precision(x_dtype, w_dtype, operands) is None:
        return "float32"
    return "mm_out_dtype" if mm_out_dtype_supported(device_type) else "upcast"


def _mm_fp32_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [N, K] @ b [K, M] -> [N, M] float32 for low-precision a, b of one dtype: tensor cores
    with fp32 output where supported, else the same products upcast."""
    if mm_out_dtype_supported(a.device.type):
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.mm(a.float(), b.float())


class _Bf16OperandMm(torch.autograd.Function):
    """x [N, H] @ weight [V, H].T -> [N, V] float32 with both operands rounded to bfloat16, and
    the backward the chunked head has with bf16 operands: the logits' gradient rounded to
    bfloat16, each gradient GEMM `_mm_fp32_out` (fp32 accumulation), gradients in the inputs'
    dtypes. Gives the unchunked head a derivative of the out_dtype op, which has none."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return _mm_fp32_out(x.to(torch.bfloat16), weight.to(torch.bfloat16).t())  # [N, V]

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g = grad.to(torch.bfloat16)  # [N, V]
        grad_x = (_mm_fp32_out(g, weight.to(torch.bfloat16)).to(x.dtype)
                  if ctx.needs_input_grad[0] else None)  # [N, H]
        grad_w = (_mm_fp32_out(g.t(), x.to(torch.bfloat16)).to(weight.dtype)
                  if ctx.needs_input_grad[1] else None)  # [V, H]
        return grad_x, grad_w


def fp32_linear(x: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None = None, operands: str | None = None) -> torch.Tensor:
    """x [..., H] @ weight [V, H].T (+ bias) -> [..., V] float32, autocast off (see the module
    docstring for the GEMM and `operands`)."""
    if operands not in HEAD_OPERANDS:
        raise ValueError(f"operands {operands!r}: one of {HEAD_OPERANDS}")
    b32 = bias.float() if bias is not None else None
    low = _low_precision(x.dtype, weight.dtype, operands)
    with _no_autocast(x.device.type):
        if low is None:
            return F.linear(x.float(), weight.float(), b32)  # [..., V] fp32 x fp32
        flat = x.reshape(-1, x.shape[-1])  # [N, H]
        if operands == "bfloat16":
            out = _Bf16OperandMm.apply(flat, weight)  # [N, V]
        elif torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            return F.linear(x.float(), weight.float(), b32)  # exact fp32 gradients
        else:
            out = _mm_fp32_out(flat, weight.t())  # [N, V]
        out = out.reshape(*x.shape[:-1], weight.shape[0])  # [..., V]
        return out + b32 if b32 is not None else out


def lm_head_logits(model, hidden: torch.Tensor, fp32_lm_head: bool,
                   operands: str | None = None) -> torch.Tensor:
    """Logits (float32) from hidden states [..., H] -> [..., V]."""
    head = model.get_output_embeddings()
    if fp32_lm_head:
        return fp32_linear(hidden, head.weight, getattr(head, "bias", None),
                           operands)  # [..., V]
    return head(hidden).float()  # [..., V] head in the model / autocast dtype, then upcast


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids [B, T]: 0 at each row's first real token (left padding gets 0s)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _chunk_logits(hidden, weight, bias, temperature: float, fp32: bool,
                  operands: str | None = None) -> torch.Tensor:
    """Logits [c, V] float32 / temperature of hidden [c, H] (no autocast)."""
    if fp32:
        logits = fp32_linear(hidden, weight, bias, operands)  # [c, V]
    else:
        with _no_autocast(hidden.device.type):
            logits = F.linear(hidden, weight, bias).float()  # [c, V] in the inputs' dtype
    return logits.div_(temperature)


def _upcast_once(hidden, weight, fp32: bool, operands: str | None = None) -> bool:
    """Whether the FP32 head would upcast a low-precision weight in every chunk (operands as
    given, and no out_dtype mm for them): then each pass casts it to float32 once instead."""
    return (fp32 and operands != "bfloat16" and weight.dtype != torch.float32
            and _gemm(weight.device.type, hidden.dtype, weight.dtype, operands) != "mm_out_dtype")


def _head_operand(weight, fp32: bool, operands: str | None):
    """The weight as every chunk's GEMM takes it: cast to bfloat16 once for bf16 operands."""
    if fp32 and operands == "bfloat16":
        return weight.to(torch.bfloat16)  # [V, H]
    return weight


class _HeadTokenLogprobs(torch.autograd.Function):
    """log softmax((h W^T + b) / T) at the targets, chunk by chunk; the backward recomputes each
    chunk's logits instead of keeping them. Entropy is an output without gradient."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk, fp32, want_entropy,
                operands=None):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)  # [N]
        lse = torch.empty_like(logp)  # [N] log Σ exp(logits) per position
        entropy = torch.zeros(n if want_entropy else 0, dtype=torch.float32,
                              device=hidden.device)  # [N] or [0]
        w_logits = (weight.float() if _upcast_once(hidden, weight, fp32, operands)
                    else _head_operand(weight, fp32, operands))  # [V, H]
        for start in range(0, n, chunk):
            end = min(n, start + chunk)
            logits = _chunk_logits(hidden[start:end], w_logits, bias, temperature, fp32,
                                   operands)  # [c, V]
            lse_c = torch.logsumexp(logits, dim=-1)  # [c]
            lse[start:end] = lse_c
            logp_all = logits.sub_(lse_c[:, None])  # [c, V] log-softmax, in place
            logp[start:end] = logp_all.gather(-1, targets[start:end, None]).squeeze(-1)
            if want_entropy:
                entropy[start:end] = -(logp_all.exp().mul_(logp_all)).sum(-1)  # [c]
            del logits, logp_all
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.temperature, ctx.chunk, ctx.fp32, ctx.operands = temperature, chunk, fp32, operands
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        bf16 = ctx.fp32 and ctx.operands == "bfloat16"  # bf16 operands, fp32 accumulation
        w32 = weight.float()  # [V, H]: the parameter itself when it is float32
        if bf16:
            w_logits = w_grad = _head_operand(weight, True, "bfloat16")  # [V, H] bf16
        else:
            w_logits = w32 if _upcast_once(hidden, weight, ctx.fp32) else weight  # [V, H]
            w_grad = w32
        grad_h = (torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
                  if need_h else None)  # [N, H]
        grad_w = torch.zeros_like(w32) if need_w else None  # [V, H]
        grad_b = torch.zeros_like(bias, dtype=torch.float32) if need_b else None  # [V]
        for start in range(0, hidden.shape[0], ctx.chunk):
            end = min(hidden.shape[0], start + ctx.chunk)
            h_c, g_out = hidden[start:end], grad_logp[start:end, None]  # [c, H], [c, 1]
            logits = _chunk_logits(h_c, w_logits, bias, ctx.temperature, ctx.fp32,
                                   ctx.operands)  # [c, V]
            # d log p_y / d logits = (onehot(y) - softmax) / T, times the incoming gradient
            grad_logits = logits.sub_(lse[start:end, None]).exp_().mul_(-g_out)  # [c, V]
            grad_logits.scatter_add_(1, targets[start:end, None], g_out)
            grad_logits.div_(ctx.temperature)
            g_op = grad_logits.to(torch.bfloat16) if bf16 else grad_logits  # [c, V]
            if need_h:
                grad_h[start:end] = (_mm_fp32_out(g_op, w_grad) if bf16
                                     else grad_logits @ w_grad)  # [c, H]
            if need_w:
                if bf16:
                    grad_w += _mm_fp32_out(g_op.t(), h_c.to(torch.bfloat16))  # [V, H]
                else:
                    grad_w.addmm_(grad_logits.t(), h_c.float())  # [V, H]
            if need_b:
                grad_b += grad_logits.sum(0)  # [V]
            del logits, grad_logits, g_op
        return (grad_h.to(hidden.dtype) if need_h else None,
                grad_w.to(weight.dtype) if need_w else None,
                grad_b.to(bias.dtype) if need_b else None, None, None, None, None, None, None)


def head_token_logprobs(
    model, hidden: torch.Tensor, targets: torch.Tensor, *, fp32_lm_head: bool = True,
    temperature: float = 1.0, chunk_tokens: int = 0, return_entropy: bool = False,
    head_operands: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(targets[n] | hidden[n]) [N] float32 (and the entropy [N], no graph) for hidden
    states [N, H], `chunk_tokens` positions at a time (0 = all at once), memory-bounded in the
    backward too (see the module docstring; `head_operands` as `fp32_linear`'s operands)."""
    if head_operands not in HEAD_OPERANDS:
        raise ValueError(f"head_operands {head_operands!r}: one of {HEAD_OPERANDS}")
    if chunk_tokens < 0:
        raise ValueError(f"chunk_tokens must be >= 0 (0 = one chunk), got {chunk_tokens}")
    head = model.get_output_embeddings()
    weight, bias = head.weight, getattr(head, "bias", None)
    if not fp32_lm_head:  # the head in the compute dtype: cast once, autograd maps grads back
        dtype = (torch.get_autocast_dtype(hidden.device.type)
                 if torch.is_autocast_enabled(hidden.device.type) else weight.dtype)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    chunk = chunk_tokens or max(1, hidden.shape[0])
    logp, entropy = _HeadTokenLogprobs.apply(hidden, weight, bias, targets, temperature, chunk,
                                             fp32_lm_head, return_entropy,
                                             head_operands)  # [N], [N] or [0]
    return logp, (entropy if return_entropy else None)


def sequence_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    fp32_lm_head: bool = True,
    temperature: float = 1.0,
    return_entropy: bool = False,
    token_mask: torch.Tensor | None = None,
    chunk_tokens: int = 0,
    head_operands: str | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities [B, T] float32 of the given tokens (and the entropy [B, T] if asked).

    out[:, t] scores input_ids[:, t] from logits at t-1; out[:, 0] = 0. Entries at padded
    positions are meaningless: mask them with the loss mask. Differentiable (no no_grad here);
    the entropy carries no graph. `token_mask` ([B, T] bool, False at t = 0) / `chunk_tokens`
    select the memory-bounded head (module docstring); positions outside `token_mask` get 0.
    `head_operands`: the FP32 head's GEMM operands (module docstring; None: as given).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    _check_supported(model)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if token_mask is not None:
        if token_mask.shape != input_ids.shape or token_mask.dtype != torch.bool:
            raise ValueError(f"token_mask must be a bool tensor of shape {tuple(input_ids.shape)}"
                             f", got {token_mask.dtype} {tuple(token_mask.shape)}")
        if token_mask[:, 0].any():
            raise ValueError("token_mask is True at position 0, which has no context to score "
                             "it from; mask the first token out")
    out = model_body(model)(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions_from_mask(attention_mask),
        use_cache=False,
    )
    hidden = out.last_hidden_state[:, :-1]  # [B, T-1, H] predicts tokens 1..T-1
    zeros = torch.zeros(input_ids.shape[0], 1, device=input_ids.device)  # [B, 1]
    if token_mask is None and chunk_tokens == 0:
        logits = lm_head_logits(model, hidden, fp32_lm_head,
                                head_operands) / temperature  # [B, T-1, V]
        logp_all = torch.log_softmax(logits, dim=-1)  # [B, T-1, V] float32
        targets = input_ids[:, 1:].unsqueeze(-1)  # [B, T-1, 1]
        token_logp = logp_all.gather(-1, targets).squeeze(-1)  # [B, T-1]
        logp = torch.cat([zeros, token_logp], dim=1)  # [B, T]
        if not return_entropy:
            return logp
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # [B, T-1]
        return logp, torch.cat([zeros, entropy], dim=1)  # [B, T], [B, T]
    selected = (token_mask[:, 1:] if token_mask is not None
                else torch.ones_like(input_ids[:, 1:], dtype=torch.bool))  # [B, T-1]
    token_logp, entropy = head_token_logprobs(
        model, hidden[selected], input_ids[:, 1:][selected], fp32_lm_head=fp32_lm_head,
        temperature=temperature, chunk_tokens=chunk_tokens, return_entropy=return_entropy,
        head_operands=head_operands,
    )  # [N], [N]
    placed = torch.zeros(selected.shape, device=input_ids.device)  # [B, T-1]
    logp = torch.cat([zeros, placed.masked_scatter(selected, token_logp)], dim=1)  # [B, T]
    if not return_entropy:
        return logp
    return logp, torch.cat([zeros, placed.masked_scatter(selected, entropy)], dim=1)
