"""Zero-variance filtering: prompts whose G completions all got the same reward leave the loss.

Such a group has every centred advantage equal to 0, so it contributes no policy gradient
but still dilutes a prompt- or sample-averaged loss. ScaleRL drops these prompts from the
batch and trains on the "effective batch" without re-sampling replacements (paper §3.2,
following Seed1.5-Thinking; DAPO's dynamic sampling instead re-samples, which the paper
likens to a larger batch). The ScaleRL objective (§4) states it as 0 < mean({r_j}) < 1.

API (two functions, one computation):

- `zero_variance_mask(rewards, group_ids) -> Tensor[B] bool`: the keep-mask itself, usable
  directly for indexing (`rewards[keep]`) or as `keep=` in `compute_advantages`.
- `zero_variance_stats(rewards, group_ids) -> ZeroVarianceResult`: the same mask plus the
  counts the trainer logs (kept fraction of samples, groups dropped, dropped-group fraction).

A group of a single completion has zero variance by definition and is dropped. Rewards are
compared exactly (`atol=0`); pass `atol` for rewards that carry float noise.

Deliberately left out: re-sampling replacement prompts (not part of ScaleRL) and the
historical pass-rate filter (that is No-Positive-Resampling, `scalerl.rl.curriculum`).
"""

from __future__ import annotations

import dataclasses

import torch

from scalerl.rl.advantages import group_index

__all__ = ["ZeroVarianceResult", "zero_variance_mask", "zero_variance_stats"]


@dataclasses.dataclass(frozen=True)
class ZeroVarianceResult:
    """Keep-mask and counts of one zero-variance filtering pass."""

    keep: torch.Tensor  # [B] bool: completion belongs to a group with reward variance > 0
    n_samples: int
    n_kept: int
    n_groups: int
    n_groups_dropped: int

    @property
    def kept_fraction(self) -> float:
        """Fraction of completions kept (1.0 for an empty batch)."""
        return self.n_kept / self.n_samples if self.n_samples else 1.0

    @property
    def dropped_group_fraction(self) -> float:
        """Fraction of prompts (groups) dropped: the "zero-variance fraction" that is logged."""
        return self.n_groups_dropped / self.n_groups if self.n_groups else 0.0


def zero_variance_stats(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, atol: float = 0.0
) -> ZeroVarianceResult:
    """Keep-mask [B] and counts; a group is dropped when max(r) − min(r) <= atol."""
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be 1-D of the same length, got "
            f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    if atol < 0:
        raise ValueError(f"atol = {atol} must be >= 0")
    n = rewards.numel()
    if n == 0:
        empty = torch.zeros(0, dtype=torch.bool, device=rewards.device)
        return ZeroVarianceResult(empty, 0, 0, 0, 0)
    r = rewards.detach().to(torch.float64)  # [B]
    if torch.isnan(r).any():
        raise ValueError("rewards contain NaN; every completion needs a reward")
    index, n_groups = group_index(group_ids)  # [B]
    inf = torch.full((n_groups,), float("inf"), dtype=r.dtype, device=r.device)
    g_max = (-inf).scatter_reduce(0, index, r, reduce="amax")  # [n_groups]
    g_min = inf.scatter_reduce(0, index, r, reduce="amin")  # [n_groups]
    varied = (g_max - g_min) > atol  # [n_groups]
    keep = varied[index]  # [B]
    return ZeroVarianceResult(
        keep=keep,
        n_samples=n,
        n_kept=int(keep.sum()),
        n_groups=n_groups,
        n_groups_dropped=int((~varied).sum()),
    )


def zero_variance_mask(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, atol: float = 0.0
) -> torch.Tensor:
    """Keep-mask [B] bool: False for completions of groups whose rewards are all identical."""
    return zero_variance_stats(rewards, group_ids, atol=atol).keep
