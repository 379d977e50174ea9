"""One data-parallel optimizer step: each rank its share of the batch, one global update.

`distributed_optimizer_step(policy, optimizer, scheduler, batch, n_kept, recipe, ...)` is
`scalerl.rl.update.optimizer_step` for a `ScoringPolicy` sharded by `scalerl.dist.shard`:

1. the loss normaliser of the *global* batch (`scalerl.dist.reduce.global_normalizer`): each
   rank's micro-batch losses are its shares of the global batch loss, so their sum over ranks
   and micro-batches is the single-process loss, and FSDP's reduce-scatter (a SUM, the divide
   factor is 1) gives every rank its shard of the single-process gradient;
2. micro-batches as in `optimizer_step` (whole groups or a token budget). FSDP runs collectives
   in every forward and backward, so every rank runs the same number of them: a rank with
   fewer micro-batches (or no rows) forwards a two-token dummy whose loss is 0 · Σ logp
   (zero gradients, same collectives);
3. the global grad norm from the local gradient shards (all-reduce of Σ g²), clipping as
   `torch.nn.utils.clip_grad_norm_` does (coefficient max_norm / (norm + 1e-6), at most 1),
   AdamW on the sharded fp32 parameters and the LR-schedule step.

Guards decided together: a non-finite log-probability or loss on any rank raises
`NonFiniteError` on every rank (an all-reduced flag), before any weight changes. A step with no
kept sample anywhere (`n_kept == 0`) only advances the schedule, on every rank.

Metrics are global: loss, entropy, IS-ratio mean and clip fraction are token-weighted sums
over all ranks; `micro_batches` is the per-rank count (the maximum over ranks).

Deliberately left out: autocast (`StepNumerics.compute_dtype`: the FSDP mixed-precision policy
sets the compute dtype), gradient checkpointing under FSDP, and skipping the reduce-scatter of
all but the last micro-batch (`set_requires_gradient_sync`), a later speed-up.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from scalerl.dist.reduce import all_reduce, global_group_ids, global_normalizer
from scalerl.rl.batch import TrainBatch, split_by_groups, split_by_tokens
from scalerl.rl.losses import LossInputs, compute_loss
from scalerl.rl.update import NonFiniteError, StepNumerics

__all__ = ["distributed_optimizer_step", "full_gradients", "local_tensor"]


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank's local shard of a DTensor, or `t` itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def full_gradients(policy) -> dict[str, torch.Tensor]:
    """Every parameter's full (gathered) gradient by name: a collective, for tests/debugging."""
    out = {}
    for name, p in policy.named_parameters():
        g = p.grad
        out[name] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    return out


def _dummy(device: torch.device) -> TrainBatch:
    """Two pad tokens, no loss position: same collectives as a real micro-batch."""
    ids = torch.zeros((1, 2), dtype=torch.long, device=device)  # [1, 2]
    return TrainBatch(ids, torch.ones_like(ids), torch.zeros_like(ids, dtype=torch.bool),
                      torch.zeros((1, 2), device=device), torch.zeros(1, device=device),
                      torch.zeros(1, dtype=torch.long, device=device))


def _parts(batch: TrainBatch | None, micro_groups: int, numerics: StepNumerics
           ) -> list[TrainBatch]:
    if batch is None:
        return []
    if numerics.micro_batch_tokens:
        return split_by_tokens(batch, numerics.micro_batch_tokens)
    return [mb for mb, _ in split_by_groups(batch, micro_groups)]


def _raise_together(bad: bool, message: str) -> None:
    """Raise NonFiniteError on every rank when any rank saw `bad`."""
    if float(all_reduce(torch.tensor([float(bad)]), "max")) > 0:
        raise NonFiniteError(message)


def _clip(params: list[torch.Tensor], max_norm: float | None, step: int) -> float:
    """Global grad norm over the local shards; scales the gradients in place when clipping."""
    sq = torch.zeros((), dtype=torch.float64)
    for p in params:
        sq += local_tensor(p.grad).detach().double().square().sum().cpu()
    norm = math.sqrt(float(all_reduce(sq)))
    if not math.isfinite(norm):
        raise NonFiniteError(f"step {step}: gradient norm is {norm} (non-finite gradients)")
    if max_norm is not None:
        coef = min(1.0, max_norm / (norm + 1e-6))
        if coef < 1.0:
            for p in params:
                local_tensor(p.grad).mul_(coef)
    return norm


def distributed_optimizer_step(policy, optimizer, scheduler, batch: TrainBatch | None,
                               n_kept: int, recipe: Any, *, temperature: float,
                               micro_groups: int, step: int,
                               numerics: StepNumerics | None = None) -> dict[str, float]:
    """Forward/backward of this rank's share, global clip, AdamW, LR step (module docstring).

    `batch`: this rank's rows (None when it keeps none); `n_kept`: kept samples over all ranks
    (`scalerl.dist.batch.assemble_local_batch`). A collective: every rank calls it."""
    numerics = numerics or StepNumerics(compute_dtype="float32")
    if numerics.gradient_checkpointing:
        raise ValueError("gradient_checkpointing is not supported under FSDP yet: set "
                         "numerics.gradient_checkpointing false with trainer_ranks > 1")
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.zero_grad(set_to_none=True)
    if n_kept == 0:  # every prompt was zero-variance on every rank
        optimizer.step()
        scheduler.step()
        return {"loss": 0.0, "grad_norm": 0.0, "entropy": float("nan"),
                "is_ratio_mean": float("nan"), "clip_fraction": float("nan"), "lr": lr,
                "trained_tokens": 0, "micro_batches": 0, "padding_fraction": 0.0}
    device = next(policy.parameters()).device
    empty = torch.zeros((0, 1), dtype=torch.bool)
    rows_mask = batch.loss_mask.cpu() if batch is not None else empty  # [B, T]
    rows_ids = batch.group_ids.cpu() if batch is not None else torch.zeros(0, dtype=torch.long)
    normalizer = global_normalizer(rows_mask, rows_ids, global_group_ids(rows_ids))
    parts = _parts(batch, micro_groups, numerics)
    n_micro = int(all_reduce(torch.tensor([float(len(parts))]), "max"))
    chunk = numerics.logprob_chunk_tokens
    # [loss, entropy sum, ratio·tokens, clip·tokens, loss tokens, real tokens, positions]
    sums = torch.zeros(7, dtype=torch.float64)
    policy.train()
    for i in range(n_micro):
        real = i < len(parts)
        mb = (parts[i] if real else _dummy(device)).to(device)
        logp, entropy = policy(mb.input_ids, mb.attention_mask, fp32_lm_head=recipe.fp32_lm_head,
                               temperature=temperature,
                               token_mask=mb.loss_mask if chunk and real else None,
                               chunk_tokens=chunk)  # [N, L], [N, L]
        if not real:
            _raise_together(False, "")  # the flag reduction every rank runs per micro-batch
            (0.0 * logp.sum()).backward()  # zero gradients through every parameter
            continue
        out = None
        if bool(torch.isfinite(logp.detach()[mb.loss_mask]).all()):
            out = compute_loss(LossInputs(logp, mb.gen_logprobs, mb.advantages, mb.loss_mask,
                                          mb.group_ids), recipe.loss, normalizer=normalizer)
        _raise_together(out is None or not bool(torch.isfinite(out.loss)),
                        f"step {step}: the trainer's log-probabilities or the loss are "
                        "non-finite on a rank (NaN/inf in the model's weights or activations)")
        out.loss.backward()
        tokens = int(mb.loss_mask.sum())
        sums += torch.tensor([float(out.loss.detach()), float(entropy[mb.loss_mask].sum()),
                              out.metrics["is_ratio_mean"] * tokens,
                              out.metrics["clip_fraction"] * tokens, tokens, mb.n_tokens,
                              mb.n_positions], dtype=torch.float64)
    params = [p for p in policy.parameters() if p.grad is not None]
    grad_norm = _clip(params, recipe.optimizer.grad_clip, step)
    optimizer.step()
    scheduler.step()
    policy.eval()
    loss, ent, ratio, clip, n_tok, real_tok, positions = all_reduce(sums).tolist()
    return {"loss": loss, "grad_norm": grad_norm, "entropy": ent / max(1.0, n_tok),
            "is_ratio_mean": ratio / max(1.0, n_tok), "clip_fraction": clip / max(1.0, n_tok),
            "lr": lr, "trained_tokens": int(all_reduce(torch.tensor([float(
                batch.n_tokens if batch is not None else 0)])).item()),
            "micro_batches": n_micro,
            "padding_fraction": 1.0 - real_tok / positions if positions else 0.0}
