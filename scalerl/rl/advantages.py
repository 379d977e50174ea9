"""Group-relative advantages with batch-, group- or no std normalisation.

Every prompt gets G completions that share one group id. The centred advantage of a
completion is its reward minus the mean reward of its group (GRPO, Shao et al. 2024):

    Â_i = r_i − mean({r_j : j in group(i)})

and `normalization` picks the divisor (ScaleRL paper, §3.2 "advantage normalization"):

- ``"batch"`` (ScaleRL default, Reinforce++ / Magistral): Â_i / (std({Â_k : k in batch}) + eps),
  the std of *all centred advantages* in the batch (paper §4: Â_std is the std of the Â_i),
  not the std of the raw rewards (which is what TRL's ``scale_rewards="batch"`` uses).
- ``"group"`` (GRPO, paper Eq. 5): Â_i / (std({r_j : j in group(i)}) + eps).
- ``"none"`` (Dr. GRPO, Liu et al. 2025): Â_i.

Standard deviations are **population** standard deviations (divide by n, not n − 1). The
paper writes std({r_j}_{j=1..G}): the spread of the given finite set, which is the whole
population being normalised rather than a sample used to estimate something else. It is
also defined for a group of one (sample std would be 0/0 = NaN there) and, for ±1 rewards
with pass rate p, equals the familiar 2·sqrt(p(1 − p)).

With ``eps = 0`` a zero std (all rewards of a group, or of the batch, equal) gives advantage
0 rather than 0/0. Statistics are computed in float64 and returned as float32. Group ids need not be
contiguous or sorted and groups may differ in size. An optional ``keep`` mask restricts every
statistic (group means/stds and the batch std) to the kept samples; dropped samples get
advantage 0. Pass the zero-variance keep mask (`scalerl.rl.filters`) so that the batch std is
taken over the *effective* batch the loss sees (paper §4: the ScaleRL objective is "subject
to 0 < mean({r_j}) < 1" — our reading [I] is that filtered prompts are not part of the batch).

Deliberately left out: reward shaping (see `length_penalty`), running/EMA statistics (the
paper normalises by the current batch) and any KL or entropy term.
"""

from __future__ import annotations

import torch

__all__ = ["NORMALIZATIONS", "compute_advantages", "group_index"]

NORMALIZATIONS = ("batch", "group", "none")


def group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids [B] to dense indices 0..n_groups−1 (in sorted-id order)."""
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must be 1-D [B], got shape {tuple(group_ids.shape)}")
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    unique, inverse = torch.unique(group_ids, return_inverse=True)  # [n_groups], [B]
    return inverse, int(unique.numel())


def _group_sum(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    out = torch.zeros(n_groups, dtype=values.dtype, device=values.device)  # [n_groups]
    return out.index_add_(0, index, values)


def compute_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    normalization: str,
    eps: float = 1e-6,
    *,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantages [B] (float32) from rewards [B] and group ids [B]; see the module docstring.

    `keep` ([B] bool, optional): samples that take part; the others get 0 and do not enter
    any mean or std.
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(
            f"normalization={normalization!r} is not one of {list(NORMALIZATIONS)}"
        )
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    if group_ids.shape != rewards.shape:
        raise ValueError(
            f"group_ids shape {tuple(group_ids.shape)} must match rewards shape "
            f"{tuple(rewards.shape)} (one group id per completion)"
        )
    if eps < 0:
        raise ValueError(f"eps = {eps} must be >= 0")
    r = rewards.detach().to(torch.float64)  # [B]
    if not torch.isfinite(r).all():
        raise ValueError("rewards contain NaN or inf; every completion needs a finite reward")
    if keep is None:
        keep_f = torch.ones_like(r)  # [B]
    else:
        if keep.shape != rewards.shape or keep.dtype != torch.bool:
            raise ValueError(f"keep must be a bool tensor of shape {tuple(rewards.shape)}")
        keep_f = keep.to(r.dtype)  # [B]
    if r.numel() == 0:
        return torch.zeros(0, dtype=torch.float32, device=rewards.device)

    index, n_groups = group_index(group_ids)  # [B]
    count = _group_sum(keep_f, index, n_groups).clamp_min(1.0)  # [n_groups]
    mean = _group_sum(r * keep_f, index, n_groups) / count  # [n_groups]
    centred = (r - mean[index]) * keep_f  # [B]

    if normalization == "none":
        adv = centred
    elif normalization == "group":
        var = _group_sum(centred.square(), index, n_groups) / count  # [n_groups]
        denom = var.sqrt()[index] + eps  # [B]
        adv = torch.where(denom > 0, centred / denom.clamp_min(1e-300), 0.0)  # [B]
    else:  # batch: population std of all (kept) centred advantages
        n_kept = keep_f.sum().clamp_min(1.0)
        batch_mean = centred.sum() / n_kept
        batch_var = (((centred - batch_mean) * keep_f).square().sum()) / n_kept
        denom = batch_var.sqrt() + eps
        adv = centred / denom if denom > 0 else torch.zeros_like(centred)  # [B]
    return (adv * keep_f).to(torch.float32)
