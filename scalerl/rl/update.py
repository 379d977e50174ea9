"""One optimizer step of the policy: trainer log-probabilities, the recipe's loss, AdamW.

`optimizer_step(model, optimizer, scheduler, batch, recipe, ...)`:

1. splits the batch into micro-batches of whole prompts (`train_micro_batch` groups; 0 = all)
   and weights each micro-batch's loss by its share of the aggregation unit (prompts, samples
   or tokens), so Σ w·loss_micro equals the loss of the whole batch and so do the gradients;
2. computes log π_train of every completion token with the FP32 LM-head switch at the
   sampling temperature (`scalerl.models.logprobs.sequence_logprobs`: the same temperature the
   generator used, so ρ = π_train/π_gen compares like with like) and the token entropy;
3. the recipe's loss (`scalerl.rl.losses.compute_loss`), backward, global grad-norm clipping
   (`OptimizerConfig.grad_clip`), AdamW step and the LR schedule step.

`make_optimizer` builds AdamW (recipe betas, eps, weight decay; paper A.3) with a linear warmup
to a constant LR: lr_s = lr · min(1, (s + 1) / warmup_steps) for 0-based step s.

Guards: non-finite trainer log-probabilities, loss or gradient norm raise `NonFiniteError`
naming the step (and the parameters with non-finite gradients) before any weight changes.
A step whose batch is empty (every prompt zero-variance) updates nothing but still advances
the schedule.

Deliberately left out: gradient accumulation across steps, mixed-precision autocast and
KL/entropy regularisers (not part of ScaleRL).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from scalerl.rl.batch import TrainBatch, split_by_groups
from scalerl.rl.losses import LossInputs, compute_loss

__all__ = ["NonFiniteError", "make_optimizer", "optimizer_step"]


class NonFiniteError(RuntimeError):
    """The loss or a gradient became NaN/inf; the message names the step and the tensors."""


def _micro_weight(aggregation: str, mb: TrainBatch, n_groups: int, totals: dict) -> float:
    """Share of a micro-batch in the full-batch loss, so Σ w·loss_mb = loss of the batch."""
    if aggregation == "prompt":
        return n_groups / totals["groups"]
    if aggregation == "sample":
        return int(mb.loss_mask.any(dim=1).sum()) / totals["sequences"]
    return int(mb.loss_mask.sum()) / totals["tokens"]


def optimizer_step(model, optimizer, scheduler, batch: TrainBatch | None, recipe: Any, *,
                   temperature: float, micro_groups: int, step: int) -> dict[str, float]:
    """Forward/backward (by micro-batches of whole groups), clip, AdamW and LR step."""
    from scalerl.models.logprobs import sequence_logprobs

    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.zero_grad(set_to_none=True)
    if batch is None:  # every prompt was zero-variance: nothing to learn from this step
        optimizer.step()  # no parameter has a gradient: AdamW leaves them all untouched
        scheduler.step()
        return {"loss": 0.0, "grad_norm": 0.0, "entropy": float("nan"),
                "is_ratio_mean": float("nan"), "clip_fraction": float("nan"), "lr": lr,
                "trained_tokens": 0}
    model.train()
    device = next(model.parameters()).device
    parts = split_by_groups(batch, micro_groups)
    totals = {"groups": sum(n for _, n in parts),
              "sequences": max(1, int(batch.loss_mask.any(dim=1).sum())),
              "tokens": max(1, int(batch.loss_mask.sum()))}
    loss_total, ent_sum, ratio_sum, clip_sum, n_tok = 0.0, 0.0, 0.0, 0.0, 0
    for mb, n_groups in parts:
        mb = mb.to(device)
        logp, entropy = sequence_logprobs(  # [N, L], [N, L]
            model, mb.input_ids, mb.attention_mask, fp32_lm_head=recipe.fp32_lm_head,
            temperature=temperature, return_entropy=True)
        if not torch.isfinite(logp.detach()[mb.loss_mask]).all():
            raise NonFiniteError(f"step {step}: the trainer's log-probabilities are non-finite "
                                 "(NaN/inf in the model's weights or activations)")
        out = compute_loss(LossInputs(logp, mb.gen_logprobs, mb.advantages, mb.loss_mask,
                                      mb.group_ids), recipe.loss)
        if not torch.isfinite(out.loss):
            raise NonFiniteError(f"step {step}: the loss is {float(out.loss)} (non-finite)")
        weight = _micro_weight(recipe.loss.aggregation, mb, n_groups, totals)
        (out.loss * weight).backward()
        tokens = int(mb.loss_mask.sum())
        loss_total += float(out.loss.detach()) * weight
        ent_sum += float(entropy.detach()[mb.loss_mask].sum())
        ratio_sum += out.metrics["is_ratio_mean"] * tokens
        clip_sum += out.metrics["clip_fraction"] * tokens
        n_tok += tokens
    params = [p for p in model.parameters() if p.grad is not None]
    max_norm = recipe.optimizer.grad_clip or float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    if not np.isfinite(grad_norm):
        bad = [n for n, p in model.named_parameters()
               if p.grad is not None and not torch.isfinite(p.grad).all()]
        raise NonFiniteError(f"step {step}: gradient norm is {grad_norm}; non-finite gradients "
                             f"in {bad[:5]}{' ...' if len(bad) > 5 else ''}")
    optimizer.step()
    scheduler.step()
    model.eval()
    return {"loss": loss_total, "grad_norm": grad_norm, "entropy": ent_sum / max(1, n_tok),
            "is_ratio_mean": ratio_sum / max(1, n_tok),
            "clip_fraction": clip_sum / max(1, n_tok), "lr": lr,
            "trained_tokens": batch.n_tokens}


def make_optimizer(model, recipe: Any) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (recipe betas, eps, weight decay) and linear warmup to a constant LR."""
    opt = recipe.optimizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt.lr, betas=tuple(opt.betas),
                                  eps=opt.eps, weight_decay=opt.weight_decay)
    warmup = opt.warmup_steps
    # LR of optimizer step s (0-based) = lr · min(1, (s + 1) / warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup > 0 else 1.0)
    return optimizer, scheduler
