"""Advantages: hand-derived values for batch / group / none normalisation, keep-mask, errors."""

from __future__ import annotations

import math

import pytest
import torch

from scalerl.rl.advantages import compute_advantages

# Worked example: three groups with non-contiguous ids, sizes 4, 3 and 1.
#   group 7: r = [1, -1, -1, -1]  mean = -0.5   centred = [1.5, -0.5, -0.5, -0.5]
#            population var = (2.25 + 3 * 0.25) / 4 = 0.75  ->  std = sqrt(0.75)
#            (= 2 * sqrt(p (1 - p)) for ±1 rewards with p = 1/4)
#   group 3: r = [1, 1, -1]       mean = 1/3    centred = [2/3, 2/3, -4/3]
#            population var = (4/9 + 4/9 + 16/9) / 3 = 8/9  ->  std = 2 sqrt(2) / 3
#   group 10: r = [2]             mean = 2      centred = [0], std = 0
# Batch: the centred advantages have mean 0 and sum of squares 3 + 24/9 = 17/3 over 8 samples,
#   so the population std is sqrt(17/24).
REWARDS = torch.tensor([1.0, -1.0, -1.0, -1.0, 1.0, 1.0, -1.0, 2.0])
GROUPS = torch.tensor([7, 7, 7, 7, 3, 3, 3, 10])
CENTRED = [1.5, -0.5, -0.5, -0.5, 2 / 3, 2 / 3, -4 / 3, 0.0]
S7, S3, SB = math.sqrt(0.75), 2 * math.sqrt(2) / 3, math.sqrt(17 / 24)

EXPECTED = {
    "none": CENTRED,
    # group 7: 1.5/sqrt(.75) = sqrt(3), -0.5/sqrt(.75) = -1/sqrt(3); group 3: ±1/sqrt(2), -sqrt(2)
    "group": [math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3),
              1 / math.sqrt(2), 1 / math.sqrt(2), -math.sqrt(2), 0.0],
    "batch": [c / SB for c in CENTRED],
}


@pytest.mark.parametrize("normalization", ["none", "group", "batch"])
def test_hand_derived_values(normalization):
    adv = compute_advantages(REWARDS, GROUPS, normalization)
    assert adv.dtype == torch.float32 and adv.shape == (8,)
    torch.testing.assert_close(adv, torch.tensor(EXPECTED[normalization]), rtol=1e-5, atol=1e-6)


def test_group_values_match_the_closed_forms():
    adv = compute_advantages(REWARDS, GROUPS, "group", eps=0.0)
    assert adv[0].item() == pytest.approx(1.5 / S7, rel=1e-6)
    assert adv[6].item() == pytest.approx(-(4 / 3) / S3, rel=1e-6)
    assert adv[7].item() == 0.0  # 0 / (0 + 0) is defined as 0


def test_batch_std_is_over_centred_advantages_not_raw_rewards():
    # Raw rewards [1, 1, -1, -1] in two groups of 2 with means 1 and -1: centred all 0 — the
    # raw-reward std would be 1, the centred std is 0, so advantages are exactly 0.
    adv = compute_advantages(torch.tensor([1.0, 1.0, -1.0, -1.0]), torch.tensor([0, 0, 1, 1]),
                             "batch")
    assert torch.equal(adv, torch.zeros(4))


def test_order_and_id_values_do_not_matter():
    perm = torch.tensor([5, 2, 7, 0, 3, 6, 1, 4])
    relabel = {7: 100, 3: -5, 10: 42}
    ids = torch.tensor([relabel[int(g)] for g in GROUPS[perm]])
    for norm in ("none", "group", "batch"):
        base = compute_advantages(REWARDS, GROUPS, norm)
        torch.testing.assert_close(compute_advantages(REWARDS[perm], ids, norm), base[perm])


def test_keep_restricts_statistics_and_zeros_dropped():
    # Keep only group 7: batch std = population std of [1.5, -.5, -.5, -.5] = sqrt(.75).
    keep = GROUPS == 7
    adv = compute_advantages(REWARDS, GROUPS, "batch", keep=keep)
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0]) / S7
    torch.testing.assert_close(adv, expected, rtol=1e-5, atol=1e-6)
    # A partially kept group: group 3 keeping [1, -1] -> mean 0, centred [1, -1], std 1.
    keep = torch.tensor([False, False, False, False, True, False, True, False])
    adv = compute_advantages(REWARDS, GROUPS, "group", eps=0.0, keep=keep)
    torch.testing.assert_close(adv, torch.tensor([0, 0, 0, 0, 1.0, 0, -1.0, 0]))


def test_integer_rewards_empty_batch_and_eps():
    adv = compute_advantages(torch.tensor([1, 0]), torch.tensor([0, 0]), "group", eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0]))  # centred ±0.5, std 0.5
    # eps enters the divisor: 0.5 / (0.5 + 0.5) = 0.5
    adv = compute_advantages(torch.tensor([1, 0]), torch.tensor([0, 0]), "group", eps=0.5)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5]))
    empty = compute_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long), "batch")
    assert empty.shape == (0,)


def test_errors():
    with pytest.raises(ValueError, match="normalization='std' is not one of"):
        compute_advantages(REWARDS, GROUPS, "std")
    with pytest.raises(ValueError, match="must match rewards shape"):
        compute_advantages(REWARDS, GROUPS[:3], "batch")
    with pytest.raises(ValueError, match="integer tensor"):
        compute_advantages(REWARDS, GROUPS.float(), "batch")
    with pytest.raises(ValueError, match="NaN or inf"):
        compute_advantages(torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]), "none")
    with pytest.raises(ValueError, match="1-D"):
        compute_advantages(REWARDS[None], GROUPS[None], "none")
