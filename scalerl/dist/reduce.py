"""Batch-wide quantities computed exactly from each rank's share of the batch.

The single-process trainer takes three things over the whole batch (`scalerl.rl.batch`):
the zero-variance decision of each prompt, the advantage statistics (batch-level std of the
centred advantages) and the loss denominators (`scalerl.rl.losses.LossNormalizer`). With the
batch split across ranks, each is rebuilt from per-prompt or per-batch *sums* that an
all-reduce combines, indexed by the global sorted prompt ids (`global_group_ids`: an
all-gather of every rank's ids), so a prompt's samples may even sit on different ranks:

- `global_zero_variance`: per-prompt max and −min of the rewards (all-reduce MAX); a prompt is
  dropped when max − min <= atol, the test of `scalerl.rl.filters`, decided identically on
  every rank from the same reduced numbers;
- `global_advantages`: per-prompt kept count and reward sum (SUM) → group means; batch mean of
  the centred advantages (SUM of sum and count), then their population variance (SUM of
  squared deviations) — the two passes of `scalerl.rl.advantages.compute_advantages`
  ("batch"); "group" reduces per-prompt squared deviations; float64 throughout;
- `global_normalizer`: per-prompt loss-token totals and the number of completions with loss
  tokens (SUM) → the `LossNormalizer` of the whole batch.

Every function is a collective: all ranks call it, in the same order. Without a process group
they reduce nothing and equal the single-process functions.

Deliberately left out: the No-Positive-Resampling history (`scalerl.rl.prompts`): the trainer
updates it on every rank from the same gathered verdicts, so it needs no reduction here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from scalerl.rl.advantages import NORMALIZATIONS
from scalerl.rl.losses import LossNormalizer

__all__ = ["all_reduce", "global_advantages", "global_group_ids", "global_normalizer",
           "global_zero_variance"]


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce(t: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """A reduced copy of `t` over all ranks (sum or max); `t` itself without a process group."""
    if not _active():
        return t
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return out


def global_group_ids(group_ids: torch.Tensor) -> torch.Tensor:
    """Sorted unique prompt ids [G] of the whole batch, from each rank's ids [B_local]."""
    local = torch.unique(group_ids).tolist()
    if not _active():
        return torch.tensor(local, dtype=torch.long)
    gathered: list[list[int] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    return torch.tensor(sorted({i for ids in gathered for i in ids or []}), dtype=torch.long)


def _position(all_ids: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Index [B] of each local id in the global sorted ids [G]."""
    pos = torch.searchsorted(all_ids, group_ids)  # [B]
    if group_ids.numel() and not torch.equal(all_ids[pos.clamp(max=len(all_ids) - 1)], group_ids):
        raise ValueError("local group ids are missing from the global ids: pass "
                         "global_group_ids(...) of the same batch")
    return pos


def global_zero_variance(rewards: torch.Tensor, group_ids: torch.Tensor,
                         all_ids: torch.Tensor, *, atol: float = 0.0) -> torch.Tensor:
    """Keep-mask [B_local] bool: the sample's prompt has max − min reward > atol over ALL
    ranks' samples of that prompt."""
    pos = _position(all_ids, group_ids)  # [B]
    r = rewards.detach().to(torch.float64)  # [B]
    neg_inf = torch.full((len(all_ids),), float("-inf"), dtype=torch.float64)  # [G]
    g_max = all_reduce(neg_inf.scatter_reduce(0, pos, r, reduce="amax"), "max")  # [G]
    g_neg_min = all_reduce(neg_inf.scatter_reduce(0, pos, -r, reduce="amax"), "max")  # [G]
    varied = (g_max + g_neg_min) > atol  # [G]: max − min > atol
    return varied[pos]


def _group_sum(values: torch.Tensor, pos: torch.Tensor, n: int) -> torch.Tensor:
    return all_reduce(torch.zeros(n, dtype=values.dtype).index_add_(0, pos, values))  # [G]


def global_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, all_ids: torch.Tensor,
                      normalization: str, eps: float = 1e-6, *,
                      keep: torch.Tensor | None = None) -> torch.Tensor:
    """Advantages [B_local] float32 equal to `compute_advantages` over the whole batch."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization={normalization!r} is not one of {list(NORMALIZATIONS)}")
    r = rewards.detach().to(torch.float64)  # [B]
    keep_f = torch.ones_like(r) if keep is None else keep.to(torch.float64)  # [B]
    pos, n = _position(all_ids, group_ids), len(all_ids)
    count = _group_sum(keep_f, pos, n).clamp_min(1.0)  # [G]
    mean = _group_sum(r * keep_f, pos, n) / count  # [G]
    centred = (r - mean[pos]) * keep_f  # [B]
    if normalization == "none":
        adv = centred
    elif normalization == "group":
        var = _group_sum(centred.square(), pos, n) / count  # [G]
        denom = var.sqrt()[pos] + eps  # [B]
        adv = torch.where(denom > 0, centred / denom.clamp_min(1e-300), 0.0)  # [B]
    else:  # batch: population std of all kept centred advantages, two passes
        totals = all_reduce(torch.stack([centred.sum(), keep_f.sum()]))  # [2]
        n_kept = totals[1].clamp_min(1.0)
        batch_mean = totals[0] / n_kept
        sq = all_reduce(((centred - batch_mean) * keep_f).square().sum())
        denom = (sq / n_kept).sqrt() + eps
        adv = centred / denom if denom > 0 else torch.zeros_like(centred)  # [B]
    return (adv * keep_f).to(torch.float32)


def global_normalizer(loss_mask: torch.Tensor, group_ids: torch.Tensor,
                      all_ids: torch.Tensor) -> LossNormalizer:
    """The `LossNormalizer` of the whole batch from this rank's loss mask [B, T] and ids [B];
    `all_ids`: `global_group_ids` of the rows the ranks train on (kept rows only)."""
    seq_count = loss_mask.sum(dim=1).to(torch.float64).cpu()  # [B]
    pos = _position(all_ids, group_ids.cpu())
    tokens = _group_sum(seq_count, pos, len(all_ids))  # [G]
    n_seq = all_reduce(torch.tensor([float((seq_count > 0).sum())], dtype=torch.float64))
    return LossNormalizer(all_ids, tokens.to(torch.float32), int(n_seq.item()))
