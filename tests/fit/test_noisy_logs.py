"""Noise-aware reading of noisy logs: noise estimate, smoothing window, peak, collapse, weights.

The noisy curves are per-step GRPO training rewards as other trainers log them: one prompt x
8 rollouts per step, so every value is a multiple of 1/8 (Binomial(8, p) / 8, sd ~0.16).
"""

import numpy as np
import pytest
import torch

from scalerl.cli import main
from scalerl.fit.curves.collapse import detect_collapse
from scalerl.fit.curves.curve import fit_curve
from scalerl.fit.curves.noise import local_noise_weights, noise_sd, running_mean, smoothing_window
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid, smoothed_peak


def close(actual, expected, **kw):
    torch.testing.assert_close(torch.as_tensor(np.asarray(actual, float)),
                               torch.as_tensor(np.asarray(expected, float)), **kw)


def grpo_rewards(seed, collapse=True, steps=300):
    """Per-step reward of 8 rollouts: rises to 0.7 (C_mid 40 steps), and with `collapse`
    falls linearly from step 200 to 0.1 at step 300."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, steps + 1, dtype=float)
    p = sigmoid(s, 0.7, 2.0, 40.0, 0.35)
    if collapse:
        p = np.where(s > 200, p - (s - 200) / 100 * 0.6, p)
    return s, rng.binomial(8, np.clip(p, 0, 1)) / 8


def test_noise_sd_window_and_running_mean_hand_derived():
    # d2 of 0,1,0,1,0 = 2,-2,2: sd = 1.4826 * 2 / sqrt(6) = 1.21054
    close(noise_sd([0, 1, 0, 1, 0]), 1.4826 * 2 / np.sqrt(6))
    # quantised: one step of 0.625 among 0.5s; d2 = 0,0,0,0.125,-0.25,0.125,0,0 has median 0,
    # so the plain sd: sqrt((2 * 0.125^2 + 0.25^2) / 8) / sqrt(6) = 0.044194
    y = np.full(10, 0.5)
    y[5] = 0.625
    close(noise_sd(y), np.sqrt((2 * 0.125 ** 2 + 0.25 ** 2) / 8) / np.sqrt(6))
    assert noise_sd([0.3, 0.4]) == 0.0
    # sd 1.21054 and a target of 0.5: ceil((1.21054 / 0.5)^2) = 6 points, made odd -> 5 when
    # 40 points allow 8; 20 points allow 4 -> 3 (the minimum)
    zigzag = np.tile([0.0, 1.0], 20)
    assert smoothing_window(zigzag, target_sd=0.5) == 5
    assert smoothing_window(zigzag[:20], target_sd=0.5) == 3
    close(running_mean([1, 2, 3, 4], 2), [1.5, 2.5, 3.5])
    # a clean eval curve (se ~0.005) keeps the 3-point window of before
    clean = sigmoid(np.arange(1, 31) * 100.0, 0.6, 2.0, 1000.0, 0.3) \
        + np.random.default_rng(0).normal(0, 0.005, 30)
    assert smoothing_window(clean) == 3


@pytest.mark.parametrize("seed", range(4))
def test_noisy_collapsing_log_peak_is_the_plateau_not_a_lucky_step(seed):
    s, y = grpo_rewards(seed)
    assert y.max() == 1.0  # lucky steps exist: all 8 rollouts right
    old_peak = np.convolve(y, np.ones(3) / 3, mode="valid").max()  # the former 3-point rule
    assert old_peak > 0.8  # overshoots the plateau (0.7) by the noise
    got = detect_collapse(s, y, r0=0.35, drop_fraction=0.25)
    assert got is not None and got["window"] > 30  # sd ~0.16 -> a wide window
    assert abs(got["peak_reward"] - 0.7) < 0.05  # the plateau's level
    assert 80 <= got["peak_compute"] <= 200  # inside the plateau, not at a lucky early step
    assert got["final_reward"] < 0.45
    fit = fit_curve(s, y, FitConfig(bootstrap_n=0, r0=0.35, extrapolate_fraction=None))
    assert fit.status == "collapsed" and fit.sigmoid.n_points == got["peak_index"] + 1 >= 80
    # the A grid starts below the smoothed plateau, not at a noise spike
    assert fit.sigmoid.a_range[0] <= 0.7 and smoothed_peak(y[:150]) < 0.75


@pytest.mark.parametrize("seed", range(4))
def test_noisy_log_without_collapse_is_not_flagged(seed):
    s, y = grpo_rewards(seed, collapse=False)
    assert detect_collapse(s, y, r0=0.35, drop_fraction=0.25) is None
    fit = fit_curve(s, y, FitConfig(bootstrap_n=0, r0=0.35, extrapolate_fraction=None))
    assert fit.status == "ok" and fit.sigmoid.n_points == 300
    assert abs(fit.sigmoid.A - 0.7) < 0.05


def test_fit_cli_reports_the_noisy_collapse_at_the_plateau(tmp_path):
    import json

    import pandas as pd

    s, y = grpo_rewards(0)
    path = tmp_path / "trainer_state.csv"
    pd.DataFrame({"step": s, "reward": y}).to_csv(path, index=False)
    assert main(["fit", str(path), "--r0", "0.35", "--out", str(tmp_path / "fit"),
                 "--bootstrap", "0"]) == 0
    record = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert record["status"] == "collapsed" and record["collapse"]["peak_compute"] >= 80
    assert record["n_points"] >= 80 and "peaked at 0.6" in record["warnings"][0]


def test_noise_weights_follow_the_local_noise_and_help_the_fit():
    c = np.arange(1, 121, dtype=float) * 10  # evals on 100 prompts early, 10000 later
    sd = np.where(c <= 600, 0.06, 0.006)
    errors = {"none": [], "noise": []}
    for seed in range(6):
        y = sigmoid(c, 0.65, 1.5, 500.0, 0.3) + np.random.default_rng(seed).normal(0, sd)
        w = local_noise_weights(y)
        assert w.mean() == pytest.approx(1.0)
        assert np.median(w[60:]) > 10 * np.median(w[:60])  # variance ratio 100, floored
        for weighting in errors:
            fit = fit_curve(np.r_[0.0, c], np.r_[0.3, y],
                            FitConfig(bootstrap_n=0, weighting=weighting, power_law=False,
                                      extrapolate_fraction=None))
            errors[weighting].append([abs(fit.sigmoid.A - 0.65), abs(fit.sigmoid.C_mid - 500)])
    none, noise = np.mean(errors["none"], axis=0), np.mean(errors["noise"], axis=0)
    assert noise[0] < 0.75 * none[0] and noise[1] < 0.75 * none[1], (none, noise)
    # equal noise everywhere: weights within a factor ~2 of each other (10 % - 90 %)
    for seed in range(3):
        flat = sigmoid(c, 0.65, 1.5, 500.0, 0.3) \
            + np.random.default_rng(seed).normal(0, 0.02, c.size)
        lo, hi = np.quantile(local_noise_weights(flat), [0.1, 0.9])
        assert 0.4 < lo <= 1.0 <= hi < 1.7, (lo, hi)


def test_a_reward_on_a_wide_scale_gets_a_capped_a_grid():
    from scalerl.fit.curves.sigmoid import MAX_A_VALUES, a_grid_for

    # a TRL reward summed over reward functions: -5 .. 9; A spans [peak - 0.05, 2 peak - R0]
    y = np.linspace(-5.0, 9.0, 50)
    grid = a_grid_for(y, -5.0, FitConfig())
    assert len(grid) <= MAX_A_VALUES + 1 and grid[0] < 9.0 < grid[-1]
    # pass rates keep the paper's step: smoothed peak 0.2 (mean of the last 3 of 0.1..0.2
    # by 20 steps: 0.19474), A from 0.14474 by 0.005 (172 values) and the end 1.0
    small = a_grid_for(np.linspace(0.1, 0.2, 20), 0.1, FitConfig())
    assert len(small) == 173 and small[1] - small[0] == pytest.approx(0.005)
    assert small[0] == pytest.approx(0.2 - 0.1 / 19 - 0.05)
