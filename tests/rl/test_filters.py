"""Zero-variance filter and the overlong length penalty: hand-derived values and errors."""

from __future__ import annotations

import pytest
import torch

from scalerl.config import ConfigError
from scalerl.rl.advantages import compute_advantages
from scalerl.rl.filters import zero_variance_mask, zero_variance_stats
from scalerl.rl.length_penalty import (
    LengthPenaltyConfig,
    apply_length_penalty,
    overlong_penalty,
)

# groups: 5 -> all +1 (drop), 2 -> {+1, -1} (keep), 9 -> all -1 (drop), 4 -> single (drop)
REWARDS = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, 0.5])
GROUPS = torch.tensor([5, 5, 5, 2, 2, 9, 9, 4])


def test_zero_variance_mask_and_counts():
    keep = zero_variance_mask(REWARDS, GROUPS)
    assert keep.dtype == torch.bool
    assert keep.tolist() == [False, False, False, True, True, False, False, False]
    stats = zero_variance_stats(REWARDS, GROUPS)
    assert torch.equal(stats.keep, keep)
    assert (stats.n_samples, stats.n_kept, stats.n_groups, stats.n_groups_dropped) == (8, 2, 4, 3)
    assert stats.kept_fraction == pytest.approx(2 / 8)
    assert stats.dropped_group_fraction == pytest.approx(3 / 4)
    # Usable for indexing and as the keep= of compute_advantages.
    assert REWARDS[keep].tolist() == [1.0, -1.0]
    adv = compute_advantages(REWARDS, GROUPS, "batch", keep=keep)
    torch.testing.assert_close(adv, torch.tensor([0, 0, 0, 1.0, -1.0, 0, 0, 0]), atol=1e-5,
                               rtol=0)


def test_all_kept_none_kept_empty_and_atol():
    assert zero_variance_mask(torch.tensor([1.0, -1.0]), torch.tensor([0, 0])).all()
    stats = zero_variance_stats(torch.tensor([1.0, 1.0]), torch.tensor([3, 3]))
    assert stats.n_kept == 0 and stats.kept_fraction == 0.0 and stats.dropped_group_fraction == 1
    empty = zero_variance_stats(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert empty.keep.shape == (0,) and empty.kept_fraction == 1.0
    noisy = torch.tensor([1.0, 1.0 + 1e-9], dtype=torch.float64)
    assert zero_variance_mask(noisy, torch.tensor([0, 0])).all()
    assert not zero_variance_mask(noisy, torch.tensor([0, 0]), atol=1e-6).any()


def test_zero_variance_errors():
    with pytest.raises(ValueError, match="same length"):
        zero_variance_mask(REWARDS, GROUPS[:2])
    with pytest.raises(ValueError, match="NaN"):
        zero_variance_mask(torch.tensor([float("nan")]), torch.tensor([0]))


def test_overlong_penalty_piecewise_values():
    # L_max = 14, L_cache = 4: zero up to 10 tokens, linear (10 - |y|)/4 on (10, 14], -1 after.
    #   11 -> (14-11)/4 - 1 = -0.25 ; 12 -> -0.5 ; 13 -> -0.75 ; 14 -> -1
    lengths = torch.tensor([0, 10, 11, 12, 13, 14, 15, 100])
    expected = torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0])
    torch.testing.assert_close(overlong_penalty(lengths, 14, 4), expected)


def test_penalty_only_on_correct_traces():
    cfg = LengthPenaltyConfig(max_len=14, cache_len=4)
    rewards = torch.tensor([1.0, 1.0, -1.0, 1.0])
    lengths = torch.tensor([12, 3, 15, 15])
    correct = torch.tensor([True, True, False, True])
    # 1 - 0.5 ; 1 - 0 ; incorrect stays -1 ; 1 - 1
    out = apply_length_penalty(rewards, lengths, correct, cfg)
    torch.testing.assert_close(out, torch.tensor([0.5, 1.0, -1.0, 0.0]))


def test_length_penalty_config_and_errors():
    cfg = LengthPenaltyConfig()
    assert (cfg.max_len, cfg.cache_len) == (14336, 2048)
    with pytest.raises(ConfigError, match="cache_len = 20 must be <= max_len = 10"):
        LengthPenaltyConfig(max_len=10, cache_len=20)
    with pytest.raises(ValueError, match="0 < cache_len <= max_len"):
        overlong_penalty(torch.tensor([1]), 4, 0)
    with pytest.raises(ValueError, match="bool"):
        apply_length_penalty(torch.ones(2), torch.ones(2), torch.ones(2), cfg)
    with pytest.raises(ValueError, match=">= 0"):
        overlong_penalty(torch.tensor([-1]), 4, 2)
