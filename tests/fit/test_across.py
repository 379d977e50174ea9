"""Forecast across scale (scalerl.fit.forecast.across): the law fit by hand, recovery of known laws,
coverage over seeded synthetic families, refusals and bad input."""

import numpy as np
import pytest
import torch
from scipy.stats import t as student_t

from scalerl.fit import FitConfig, predict_across
from scalerl.fit.curves.sigmoid import sigmoid
from scalerl.fit.curves.synthetic import size_family
from scalerl.fit.forecast.across import fit_law

FAST = FitConfig(bootstrap_n=0)  # the laws' spread alone: equal weights, no per-run bootstrap


def _close(actual, expected, atol):
    torch.testing.assert_close(torch.tensor(float(actual), dtype=torch.float64),
                               torch.tensor(float(expected), dtype=torch.float64),
                               atol=atol, rtol=0.0)


def test_fit_law_exact_line_has_no_scatter():
    # theta = 2 - 0.5 x through three points: the line itself, tau^2 = 0, zero-width prediction
    x = np.array([0.0, 1.0, 2.0])
    law = fit_law(x, 2.0 - 0.5 * x)
    _close(law.coef[0], 2.0, 1e-12)
    _close(law.coef[1], -0.5, 1e-12)
    _close(law.tau2, 0.0, 1e-12)
    centre, scale = law.predict(4.0)
    _close(centre, 0.0, 1e-12)
    _close(scale, 0.0, 1e-6)
    assert (law.dof, law.k, law.sizes) == (1, 3, 3)


def test_fit_law_random_effects_by_hand():
    # constant law, estimates 0 and 2 with variance 1 each: w = 1, mean 1, Q = 2, k - p = 1,
    # tr(P) = 2 - (1 + 1) / 2 = 1, so tau^2 = (2 - 1) / 1 = 1; weights 1 / (1 + 1) = 1/2,
    # var(mean) = 1 / (1/2 + 1/2) = 1; Knapp-Hartung: (1/2 + 1/2) / 1 = 1 (no scaling);
    # prediction variance tau^2 + 1 = 2
    law = fit_law([0.0, 5.0], [0.0, 2.0], [1.0, 1.0], slope=False)
    _close(law.coef[0], 1.0, 1e-12)
    _close(law.tau2, 1.0, 1e-12)
    centre, scale = law.predict(123.0)
    _close(centre, 1.0, 1e-12)
    _close(scale, np.sqrt(2.0), 1e-12)
    assert law.dof == 1


def test_fit_law_unweighted_is_ordinary_least_squares():
    # no sampling variances: OLS, tau^2 = RSS / (k - 2) and the classical prediction variance
    x = np.array([0.0, 1.0, 2.0, 3.0])
    theta = np.array([1.0, 0.0, 0.5, -1.0])
    law = fit_law(x, theta)
    slope, intercept = np.polyfit(x, theta, 1)
    _close(law.coef[1], slope, 1e-12)
    _close(law.coef[0], intercept, 1e-12)
    resid = theta - (intercept + slope * x)
    s2 = resid @ resid / 2
    _close(law.tau2, s2, 1e-12)
    x_star = 5.0
    sxx = ((x - x.mean()) ** 2).sum()
    _, scale = law.predict(x_star)
    _close(scale ** 2, s2 * (1 + 1 / 4 + (x_star - x.mean()) ** 2 / sxx), 1e-12)


def test_fit_law_needs_more_estimates_than_coefficients():
    with pytest.raises(ValueError, match="needs more than 2"):
        fit_law([0.0, 1.0], [0.0, 1.0])


@pytest.mark.parametrize("k, known", [(3, False), (5, True)])
def test_fit_law_prediction_interval_covers_at_nominal_rate(k, known):
    # the size-to-size scatter dominates (the regime of real families): 4000 seeded draws of
    # k sizes on a line plus scatter 0.1 and fit noise 0.02 (its variance given or not), a
    # new size's true value is covered at 95 % (binomial sd of the rate 0.0034). (With three
    # sizes and the fit noise given, the noise floors the variance under t(1): 99.6 %,
    # conservative.)
    rng = np.random.default_rng(k)
    x = np.log([0.5, 1.5, 3.0, 7.0, 14.0][:k])
    x_star = np.log(32.0)
    hits = 0
    for _ in range(4000):
        v = np.full(k, 0.02 ** 2) if known else None
        theta = 1.0 - 0.3 * x + rng.normal(0, 0.1, k) + rng.normal(0, 0.02, k)
        law = fit_law(x, theta, v)
        centre, scale = law.predict(x_star)
        truth = 1.0 - 0.3 * x_star + rng.normal(0, 0.1)
        hits += abs(truth - centre) <= student_t.ppf(0.975, law.dof) * scale
    assert 0.935 <= hits / 4000 <= 0.965


def test_recovers_a_known_law():
    # no size-to-size scatter and 20k samples per eval: the laws come back and so does the
    # target's curve (truth from the generator's formulas at 14B: A = 1 - 0.5 * 14^-0.3)
    fam = size_family(0, scatter=(0.0, 0.0, 0.0), n_eval=20000, points=40)
    p = predict_across(fam.runs(4), fam.sizes[4], fam.compute[-1], target_r0=fam.R0[4],
                       config=FAST)
    assert p.status == "ok" and p.interval_status == "ok"
    laws = p.params["laws"]
    _close(laws["A"]["coef"][1], -0.3, 0.02)  # d log(1 - A) / d log N = -alpha
    _close(laws["C_mid"]["coef"][1], 0.4, 0.03)  # d log C_mid / d log N = beta
    _close(np.exp(laws["B"]["coef"][0]), 1.8, 0.1)
    _close(p.A, 1 - 0.5 * 14 ** -0.3, 0.005)
    _close(p.C_mid, 2000 * 14 ** 0.4, 0.05 * 2000 * 14 ** 0.4)
    truth = sigmoid(fam.compute[-1], fam.A[4], fam.B[4], fam.C_mid[4], fam.R0[4])
    _close(p.predicted_final, truth, 0.005)
    assert p.observed_final_lo <= p.predicted_final_lo <= p.predicted_final \
        <= p.predicted_final_hi <= p.observed_final_hi
    assert p.A_lo <= p.A <= p.A_hi and p.C_mid_lo <= p.C_mid <= p.C_mid_hi


def test_same_law_along_generation_length():
    fam = size_family(1, sizes=(2048, 4096, 8192, 16384), reference=2048,
                      scatter=(0.0, 0.0, 0.0), n_eval=20000)
    p = predict_across(fam.runs(3), fam.sizes[3], fam.compute[-1], target_r0=fam.R0[3],
                       config=FAST, axis="gen_len")
    assert p.status == "ok" and p.params["axis"] == "gen_len"
    _close(p.A, fam.A[3], 0.01)
    far = predict_across(fam.runs(3), 1e6, fam.compute[-1], target_r0=fam.R0[3], config=FAST,
                         axis="gen_len")
    assert any("generation length 1e+06 lies" in w for w in far.warnings)


@pytest.mark.slow  # ~30 s: 80 families of 4 fitted runs each
def test_intervals_cover_the_observed_final_at_nominal_rate():
    # leave-largest-out over 80 seeded families with size-to-size scatter (log sd 0.1 of the
    # gap, 0.15 of C_mid, 0.1 of B): the 95 % interval of the 14B run's observed final eval,
    # and of its A, covers the truth at about the nominal rate (binomial sd of a rate over 80
    # families: 0.024); the forecast beats "same as the largest smaller model"
    hits = hits_a = 0
    err, naive = [], []
    for seed in range(80):
        fam = size_family(seed)
        p = predict_across(fam.runs(4), fam.sizes[4], fam.compute[-1], target_r0=fam.R0[4],
                           config=FAST)
        assert p.status == "ok"
        observed = fam.reward[4, -1]
        hits += p.observed_final_lo <= observed <= p.observed_final_hi
        hits_a += p.A_lo <= fam.A[4] <= p.A_hi
        err.append(abs(p.predicted_final - observed))
        naive.append(abs(fam.reward[3, -1] - observed))
    assert 0.89 <= hits / 80 <= 1.0
    assert 0.89 <= hits_a / 80 <= 1.0
    assert np.mean(err) < 0.75 * np.mean(naive)


def test_two_sizes_are_refused():
    fam = size_family(2)
    runs = fam.runs(2) + [(fam.sizes[1], fam.compute, fam.reward[1])]  # a seed, not a size
    p = predict_across(runs, fam.sizes[4], fam.compute[-1], target_r0=fam.R0[4], config=FAST)
    assert p.status == "few_sizes" and p.interval_status == "few_sizes"
    assert np.isnan([p.predicted_final, p.A, p.observed_final_lo, p.C_mid]).all()
    assert "the A law has 2 distinct model size(s)" in p.warnings[0]


def test_a_collapsed_run_is_left_out_and_can_force_a_refusal():
    fam = size_family(3)
    falls = fam.reward[1].copy()
    falls[20:] = fam.R0[1]  # rose, then fell back to the base score
    runs = [fam.runs()[0], (fam.sizes[1], fam.compute, falls), fam.runs()[2]]
    p = predict_across(runs, fam.sizes[4], fam.compute[-1], target_r0=fam.R0[4], config=FAST)
    assert p.status == "few_sizes"
    assert any(w.startswith("model size 1.5e+09: collapsed") for w in p.warnings)


def test_flat_run_determines_nothing():
    fam = size_family(4)
    flat = np.random.default_rng(4).binomial(1000, 0.3, fam.compute.size) / 1000  # no rise
    runs = fam.runs(4) + [(5e9, fam.compute, flat)]
    p = predict_across(runs, fam.sizes[4], fam.compute[-1], target_r0=fam.R0[4], config=FAST)
    assert p.status == "ok"
    flat_run = [r for r in p.params["runs"] if r["size"] == 5e9][0]
    assert flat_run["uses"] == ["R0"]
    assert any(w.startswith("model size 5e+09: A: the reward does not rise") for w in p.warnings)


def test_without_target_r0_the_law_supplies_it_and_says_so():
    fam = size_family(5, scatter=(0.0, 0.0, 0.0), n_eval=20000)
    p = predict_across(fam.runs(4), fam.sizes[4], fam.compute[-1], config=FAST)
    assert p.params["R0_source"] == "law"
    _close(p.params["R0"], fam.R0[4], 0.01)
    assert any("pass target_r0" in w for w in p.warnings)


@pytest.mark.parametrize("bad, match", [
    (dict(runs=[(-1.0, [0, 1], [0, 1])]), "model size must be positive"),
    (dict(target_size=0.0), "target model size must be positive"),
    (dict(final_compute=float("nan")), "final compute must be positive"),
    (dict(runs=[(1e9, [0, 1])]), "expected \\(size, compute, reward\\)"),
    (dict(axis="depth"), "axis must be one of"),
    (dict(target_r0=float("inf")), "target_r0 must be a finite"),
])
def test_bad_input_names_the_problem(bad, match):
    args = dict(runs=[(1e9, [0, 1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4, 0.5])], target_size=2e9,
                final_compute=10.0, target_r0=None, axis="size")
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        predict_across(args["runs"], args["target_size"], args["final_compute"],
                       args["target_r0"], FAST, axis=args["axis"])
