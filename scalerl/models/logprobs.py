"""Per-token log-probabilities with an optional float32 LM head: the trainer's side of rho.

The model is split into its body (embeddings + blocks + final norm: `model.base_model`) and its
head (`model.get_output_embeddings()`), so the head can run in float32 whatever the body's
dtype:

    h      = body(input_ids)                      # [B, T, H], model dtype
    logits = h.float() @ W.float().T (+ b)        # [B, T, V], fp32_lm_head=True
           = (h @ W.T).float()                    # fp32_lm_head=False (head in model dtype)
    logp   = log_softmax(logits / temperature)    # always in float32

ScaleRL (Khatri et al. 2025, sec. 3.2, Fig. 5b) computes the head in FP32 on both the
generator and the trainer, because the generator/trainer probability mismatch that distorts
the importance ratio rho = pi_train / pi_gen is largest at the LM head (MiniMax-M1). The same
`lm_head_logits` is used by the HF engine, so both sides round the same way.

`sequence_logprobs(...)[b, t] = log p(input_ids[b, t] | input_ids[b, :t])` for t >= 1 and 0 at
t = 0 (no context). Position ids follow the attention mask (left or right padding both work).

Deliberately left out: logit soft-capping / logit scaling of some architectures (Gemma2,
Cohere); such models are rejected with a clear error rather than scored wrongly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check_supported(model) -> None:
    config = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        value = getattr(config, attr, None)
        if value not in (None, 1, 1.0):
            raise NotImplementedError(
                f"{type(model).__name__} uses {attr}={value}; scalerl's split body/head forward "
                "does not apply it. Use a model without logit scaling/soft-capping."
            )


def model_body(model):
    """The transformer body (everything before the LM head)."""
    body = getattr(model, "base_model", None)
    if body is None or body is model:
        raise ValueError(f"{type(model).__name__} has no separate body (base_model)")
    return body


def lm_head_logits(model, hidden: torch.Tensor, fp32_lm_head: bool) -> torch.Tensor:
    """Logits (float32) from hidden states [..., H] -> [..., V]."""
    head = model.get_output_embeddings()
    if fp32_lm_head:
        bias = head.bias.float() if getattr(head, "bias", None) is not None else None
        return F.linear(hidden.float(), head.weight.float(), bias)  # [..., V] float32
    return head(hidden).float()  # [..., V] head in model dtype, then upcast


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids [B, T]: 0 at each row's first real token (left padding gets 0s)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def sequence_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    fp32_lm_head: bool = True,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities [B, T] of the given tokens (and the entropy [B, T] if asked).

    out[:, t] scores input_ids[:, t] from logits at t-1; out[:, 0] = 0. Entries at padded
    positions are meaningless: mask them with the loss mask. Differentiable (no no_grad here).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    _check_supported(model)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    out = model_body(model)(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions_from_mask(attention_mask),
        use_cache=False,
    )
    hidden = out.last_hidden_state[:, :-1]  # [B, T-1, H] predicts tokens 1..T-1
    logits = lm_head_logits(model, hidden, fp32_lm_head) / temperature  # [B, T-1, V]
    logp_all = torch.log_softmax(logits, dim=-1)  # [B, T-1, V]
    targets = input_ids[:, 1:].unsqueeze(-1)  # [B, T-1, 1]
    token_logp = logp_all.gather(-1, targets).squeeze(-1)  # [B, T-1]
    zeros = token_logp.new_zeros(token_logp.shape[0], 1)  # [B, 1]
    logp = torch.cat([zeros, token_logp], dim=1)  # [B, T]
    if not return_entropy:
        return logp
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # [B, T-1]
    return logp, torch.cat([zeros, entropy], dim=1)  # [B, T], [B, T]
