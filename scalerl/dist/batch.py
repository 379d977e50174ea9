"""Prompt groups split across trainer ranks, and one rank's share of the training batch.

`assign_groups(group_ids, tokens, world_size)`: whole prompt groups to ranks, balanced by
their tokens (prompt + completion, what the forward costs): groups in decreasing token order
(ties: smaller group id first), each to the rank with the fewest tokens so far (ties: the lower
rank) — the longest-processing-time rule, deterministic, so every rank computes the same split
from the same completions. Returns each rank's completion indices in their original order.

`assemble_local_batch(completions, correct, recipe, trainer_version, pad_id)`: the rank's rows
of the global batch `scalerl.rl.batch.assemble_batch` would build, from this rank's
completions only: rewards (+ length penalty) locally, the zero-variance decision and the
advantages from all-reduced statistics (`scalerl.dist.reduce`), the padded tensors of the
kept rows. Returns (local batch or None when this rank keeps nothing, kept samples over all
ranks); its rows equal the matching rows of the single-process batch (padding width aside).

Deliberately left out: the step statistics (`BatchStats`: the trainer computes them once from
all completions) and splitting a group across ranks (the reductions would allow it; whole
groups keep a prompt's samples on one rank).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from scalerl.dist.reduce import (
    all_reduce,
    global_advantages,
    global_group_ids,
    global_zero_variance,
)
from scalerl.rl.batch import TrainBatch, _pad
from scalerl.rl.length_penalty import apply_length_penalty
from scalerl.rollout.base import Completion

__all__ = ["assemble_local_batch", "assign_groups", "completion_tokens", "rank_share"]


def completion_tokens(completions: Sequence[Completion]) -> list[int]:
    """Prompt + completion tokens of each completion."""
    return [len(c.request.prompt_ids) + c.n_tokens for c in completions]


def assign_groups(group_ids: Sequence[int], tokens: Sequence[int],
                  world_size: int) -> list[list[int]]:
    """Each rank's indices into `group_ids` (whole groups, token-balanced; module docstring)."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if len(group_ids) != len(tokens):
        raise ValueError(f"{len(group_ids)} group ids but {len(tokens)} token counts")
    group_tokens: dict[int, int] = {}
    for g, n in zip(group_ids, tokens, strict=True):
        group_tokens[int(g)] = group_tokens.get(int(g), 0) + int(n)
    load = [0] * world_size
    owner: dict[int, int] = {}
    for g in sorted(group_tokens, key=lambda g: (-group_tokens[g], g)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        owner[g] = rank
        load[rank] += group_tokens[g]
    return [[i for i, g in enumerate(group_ids) if owner[int(g)] == r] for r in range(world_size)]


def rank_share(completions: Sequence[Completion], correct: Sequence[bool], rank: int,
               world_size: int) -> tuple[list[Completion], list[bool]]:
    """This rank's completions and verdicts of the global list (`assign_groups`)."""
    groups = [int(c.request.tag) for c in completions]
    mine = assign_groups(groups, completion_tokens(completions), world_size)[rank]
    return [completions[i] for i in mine], [bool(correct[i]) for i in mine]


def assemble_local_batch(completions: Sequence[Completion], correct: Sequence[bool], recipe,
                         trainer_version: int, pad_id: int) -> tuple[TrainBatch | None, int]:
    """This rank's rows of the global batch and the global kept count (module docstring).

    A collective: every rank calls it, also one with no completions."""
    del trainer_version  # staleness enters BatchStats only (computed by the trainer)
    if len(correct) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(correct)} verdicts")
    group_ids = torch.tensor([int(c.request.tag) for c in completions], dtype=torch.long)  # [S]
    correct_t = torch.tensor([bool(x) for x in correct], dtype=torch.bool)  # [S]
    lengths = torch.tensor([c.n_tokens for c in completions], dtype=torch.long)  # [S]
    rewards = torch.where(correct_t, recipe.reward_correct, recipe.reward_incorrect)  # [S]
    rewards = rewards.to(torch.float32)
    if recipe.length_control == "length_penalty" and len(completions):
        rewards = apply_length_penalty(rewards, lengths, correct_t, recipe.length_penalty)
    all_ids = global_group_ids(group_ids)  # [G] every prompt of the step
    if recipe.zero_variance_filter:
        keep = global_zero_variance(rewards, group_ids, all_ids)  # [S] bool
    else:
        keep = torch.ones(len(completions), dtype=torch.bool)
    advantages = global_advantages(rewards, group_ids, all_ids, recipe.advantage_normalization,
                                   recipe.advantage_eps, keep=keep)  # [S]
    n_kept = int(all_reduce(keep.sum().to(torch.float64)).item())
    kept = [i for i in range(len(completions)) if keep[i]]
    if not kept:
        return None, n_kept
    return _pad([completions[i] for i in kept], advantages[kept], group_ids[kept], pad_id), n_kept
