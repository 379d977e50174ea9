"""Batch assembly: completions → rewards → filters → advantages → each rank's padded tensors.

One optimizer step consumes the completions of B prompts × G samples. `score_batch` decides
everything about the whole batch, once, on the main rank:

1. takes each completion's correctness (verifier output, computed by the caller) and turns it
   into the recipe's reward: `reward_correct` / `reward_incorrect` (paper: ±1, A.3); with
   `length_control = length_penalty` the DAPO overlong penalty (Eq. 9) is added to correct
   traces (`scalerl.rl.length_penalty`);
2. drops zero-variance prompts (all G rewards equal) when the recipe asks for it
   (`scalerl.rl.filters`; ScaleRL's "effective batch", no re-sampling);
3. computes advantages over the kept samples (`scalerl.rl.advantages`, batch/group/none) and
   the loss denominators over them (`scalerl.rl.losses.LossNormalizer`);
4. reports the step statistics (reward mean, pass rate, truncation/interruption rates,
   zero-variance fraction, staleness).

`split_shares(scored, world_size)` then gives each trainer rank whole prompt groups of the kept
samples, balanced by tokens (`assign_groups`), each `RankShare` carrying its completions, their
advantages and the batch-wide normaliser; `RankShare.pad(pad_id)` builds the right-padded
[N, L] tensors of prompt + completion tokens, with the generator's logprobs and the loss mask
placed at the completion positions (position t scores token t given tokens < t, as
`scalerl.models.logprobs` returns them); tokens the engine inserted (interruption text) have
loss mask False. At one rank the single share is the whole batch. Because advantages and
denominators are decided over the whole batch before any split, the sum of the ranks' (and
micro-batches') losses is the one-rank loss, for prompt, sample and token aggregation alike.

Group ids are the `group` numbers the trainer put in each request's tag: unique per issued
prompt instance, so a prompt drawn twice in one batch forms two groups.

Micro-batches (the trainer's forward/backward units):

- `split_by_groups(batch, g)`: whole prompt groups, g at a time (in group order);
- `split_by_tokens(batch, budget)`: sequences sorted by length (longest first, ties in row
  order) and packed greedily while rows × longest <= budget tokens, so a micro-batch holds at
  most `budget` padded (hence real) tokens and sequences of similar length share one, which
  keeps right padding small; a prompt's samples may land in different micro-batches. A
  sequence longer than the budget forms a micro-batch of its own (sequences are never split).

Each micro-batch is trimmed to its own longest sequence; `padding_fraction(parts)` is the
share of forwarded positions that are right padding.

Deliberately left out: the verifier call itself (the trainer scores completions as they arrive
so scoring overlaps generation) and the model forward (the trainer's job).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from scalerl.rl.advantages import compute_advantages
from scalerl.rl.filters import zero_variance_stats
from scalerl.rl.length_penalty import apply_length_penalty
from scalerl.rl.losses import LossNormalizer
from scalerl.rollout.base import Completion

__all__ = ["BatchStats", "RankShare", "ScoredBatch", "TrainBatch", "assign_groups", "padding_fraction", "score_batch", "split_by_groups",
           "split_by_tokens", "split_shares"]


@dataclasses.dataclass
class TrainBatch:
    """Kept samples of one step as padded tensors (row order: kept completions)."""

    input_ids: torch.Tensor  # [N, L] long: prompt + completion, right-padded
    attention_mask: torch.Tensor  # [N, L] long: 1 at real tokens
    loss_mask: torch.Tensor  # [N, L] bool: completion tokens that get loss
    gen_logprobs: torch.Tensor  # [N, L] float32: generator log π_gen at loss positions, else 0
    advantages: torch.Tensor  # [N] float32
    group_ids: torch.Tensor  # [N] long

    @property
    def n_sequences(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def n_tokens(self) -> int:
        """Real (non-pad) tokens: what the trainer forwards and backpropagates (6·N each)."""
        return int(self.attention_mask.sum())

    @property
    def n_positions(self) -> int:
        """Forwarded positions, padding included: N × L."""
        return int(self.input_ids.numel())

    def to(self, device: torch.device | str) -> TrainBatch:
        return TrainBatch(**{f.name: getattr(self, f.name).to(device)
                             for f in dataclasses.fields(self)})


@dataclasses.dataclass(frozen=True)
class BatchStats:
    """Statistics of one step's samples (before filtering unless said otherwise)."""

    n_samples: int
    n_prompts: int
    reward_mean: float
    pass_rate: float
    truncation_rate: float
    interruption_rate: float
    zero_variance_fraction: float  # fraction of prompts dropped by the zero-variance test
    n_kept: int  # samples that enter the loss
    staleness_mean: float
    staleness_max: int
    prompt_tokens: list[int]  # per sample: prompt length (generator prefill)
    completion_tokens: list[int]  # per sample: generated + inserted tokens
    rewards: tuple[float, ...] = ()  # per sample: the recipe's reward (length penalty included)
    kept: tuple[bool, ...] = ()  # per sample: entered the loss (not zero-variance filtered)


@dataclasses.dataclass(frozen=True)
class ScoredBatch:
    """What `score_batch` decided for the whole batch (before any split over ranks)."""

    completions: list[Completion]
    stats: BatchStats
    advantages: torch.Tensor  # [S] float32, 0 for the dropped samples
    kept: list[int]  # indices of the samples that enter the loss
    normalizer: LossNormalizer  # the loss denominators over the kept samples


def score_batch(completions: Sequence[Completion], correct: Sequence[bool], recipe,
                trainer_version: int) -> ScoredBatch:
    """Rewards, zero-variance filter, advantages, loss denominators and statistics of one step.

    `completions[i].request.tag` must be the sample's group number (an int); `correct[i]`
    is the verifier's verdict for completion i; `recipe` a `scalerl.rl.recipe.RecipeConfig`.
    """
    if not completions:
        raise ValueError("score_batch needs at least one completion")
    if len(correct) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(correct)} verdicts")
    group_ids = torch.tensor([int(c.request.tag) for c in completions])  # [S]
    correct_t = torch.tensor([bool(x) for x in correct])  # [S] bool
    lengths = torch.tensor([c.n_tokens for c in completions])  # [S]
    rewards = torch.where(correct_t, recipe.reward_correct, recipe.reward_incorrect)  # [S]
    rewards = rewards.to(torch.float32)
    if recipe.length_control == "length_penalty":
        rewards = apply_length_penalty(rewards, lengths, correct_t, recipe.length_penalty)

    zv = zero_variance_stats(rewards, group_ids)
    keep = zv.keep if recipe.zero_variance_filter else torch.ones_like(zv.keep)  # [S] bool
    advantages = compute_advantages(
        rewards, group_ids, recipe.advantage_normalization, recipe.advantage_eps, keep=keep
    )  # [S]
    lags = [trainer_version - c.min_version for c in completions]
    stats = BatchStats(
        n_samples=len(completions),
        n_prompts=zv.n_groups,
        reward_mean=float(rewards.mean()),
        pass_rate=float(correct_t.float().mean()),
        truncation_rate=sum(c.truncated for c in completions) / len(completions),
        interruption_rate=sum(c.interrupted for c in completions) / len(completions),
        zero_variance_fraction=zv.dropped_group_fraction,
        n_kept=int(keep.sum()),
        staleness_mean=sum(lags) / len(lags),
        staleness_max=max(lags),
        prompt_tokens=[len(c.request.prompt_ids) for c in completions],
        completion_tokens=[c.n_tokens for c in completions],
        rewards=tuple(rewards.tolist()),
        kept=tuple(bool(k) for k in keep.tolist()),
    )
    kept = [i for i in range(len(completions)) if keep[i]]
    loss_tokens = torch.tensor([float(sum(completions[i].loss_mask)) for i in kept])  # [K]
    normalizer = LossNormalizer.from_counts(loss_tokens, group_ids[kept])
    return ScoredBatch(list(completions), stats, advantages, kept, normalizer)


@dataclasses.dataclass
class RankShare:
    """One trainer rank's kept samples of a step, with the batch-wide loss denominators."""

    completions: list[Completion]
    advantages: list[float]
    normalizer: LossNormalizer

    def pad(self, pad_id: int) -> TrainBatch | None:
        """The share as padded tensors; None when the rank trains on nothing this step."""
        if not self.completions:
            return None
        group_ids = torch.tensor([int(c.request.tag) for c in self.completions])  # [N]
        return _pad(self.completions, torch.tensor(self.advantages, dtype=torch.float32),
                    group_ids, pad_id)


def assign_groups(group_ids: Sequence[int], tokens: Sequence[int],
                  world_size: int) -> list[list[int]]:
    """Each rank's indices into `group_ids`: whole prompt groups, balanced by their tokens
    (prompt + completion, what the forward costs). Groups in decreasing token order (ties: the
    smaller group id first), each to the rank with the fewest tokens so far (ties: the lower
    rank): the longest-processing-time rule, deterministic. Each rank's indices keep their
    original order."""
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


def split_shares(scored: ScoredBatch, world_size: int) -> list[RankShare]:
    """The kept samples split over `world_size` ranks by whole prompt groups (`assign_groups`)."""
    kept = [scored.completions[i] for i in scored.kept]
    advantages = [float(scored.advantages[i]) for i in scored.kept]
    tokens = [len(c.request.prompt_ids) + c.n_tokens for c in kept]
    owners = assign_groups([int(c.request.tag) for c in kept], tokens, world_size)
    return [RankShare([kept[i] for i in mine], [advantages[i] for i in mine], scored.normalizer)
            for mine in owners]


def _pad(
    completions: Sequence[Completion], advantages: torch.Tensor, group_ids: torch.Tensor,
    pad_id: int,
) -> TrainBatch:
    n = len(completions)
    width = max(len(c.request.prompt_ids) + c.n_tokens for c in completions)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)  # [N, L]
    attention = torch.zeros((n, width), dtype=torch.long)  # [N, L]
    loss_mask = torch.zeros((n, width), dtype=torch.bool)  # [N, L]
    gen_logprobs = torch.zeros((n, width), dtype=torch.float32)  # [N, L]
    for row, c in enumerate(completions):
        p = len(c.request.prompt_ids)
        end = p + c.n_tokens
        input_ids[row, :p] = torch.tensor(c.request.prompt_ids, dtype=torch.long)
        input_ids[row, p:end] = torch.tensor(c.token_ids, dtype=torch.long)
        attention[row, :end] = 1
        loss_mask[row, p:end] = torch.tensor(c.loss_mask, dtype=torch.bool)
        gen_logprobs[row, p:end] = torch.tensor(c.logprobs, dtype=torch.float32)
    gen_logprobs = torch.where(loss_mask, gen_logprobs, 0.0)  # inserted tokens carry no logprob
    return TrainBatch(input_ids, attention, loss_mask, gen_logprobs,
                      advantages.to(torch.float32), group_ids)


def _take_rows(batch: TrainBatch, rows: torch.Tensor) -> TrainBatch:
    """The given rows (bool mask [N] or indices), trimmed to their longest sequence."""
    sub = TrainBatch(**{f.name: getattr(batch, f.name)[rows] for f in dataclasses.fields(batch)})
    width = int(sub.attention_mask.sum(dim=1).max())
    return dataclasses.replace(
        sub, input_ids=sub.input_ids[:, :width], attention_mask=sub.attention_mask[:, :width],
        loss_mask=sub.loss_mask[:, :width], gen_logprobs=sub.gen_logprobs[:, :width])


def split_by_groups(batch: TrainBatch, groups_per_micro: int) -> list[tuple[TrainBatch, int]]:
    """Micro-batches of whole groups: [(micro_batch, n_groups_in_it)], in group order."""
    unique = torch.unique(batch.group_ids)  # [n_groups], sorted
    if groups_per_micro <= 0 or groups_per_micro >= unique.numel():
        return [(batch, int(unique.numel()))]
    out = []
    for start in range(0, unique.numel(), groups_per_micro):
        chosen = unique[start:start + groups_per_micro]  # [g]
        out.append((_take_rows(batch, torch.isin(batch.group_ids, chosen)), int(chosen.numel())))
    return out


def split_by_tokens(batch: TrainBatch, max_tokens: int) -> list[TrainBatch]:
    """Micro-batches of at most `max_tokens` padded tokens, longest sequences first (see the
    module docstring)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    lengths = batch.attention_mask.sum(dim=1)  # [N]
    order = torch.sort(lengths, descending=True, stable=True).indices.tolist()
    parts, rows, width = [], [], 0
    for row in order:
        if rows and (len(rows) + 1) * width > max_tokens:  # sorted: `width` stays the longest
            parts.append(_take_rows(batch, torch.tensor(rows)))
            rows = []
        if not rows:
            width = int(lengths[row])
        rows.append(row)
    parts.append(_take_rows(batch, torch.tensor(rows)))
    return parts


def padding_fraction(parts: Sequence[TrainBatch]) -> float:
    """Right padding / forwarded positions over the micro-batches (0 = no padding)."""
    positions = sum(p.n_positions for p in parts)
    return 1.0 - sum(p.n_tokens for p in parts) / positions if positions else 0.0
