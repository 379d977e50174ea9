"""Power law (paper A.4) and bootstrap intervals."""

import numpy as np
import pytest

from scalerl.fit.curves.bootstrap import bootstrap_intervals
from scalerl.fit.curves.powerlaw import fit_power_law, power_law
from scalerl.fit.curves.sigmoid import FitConfig, fit_sigmoid, sigmoid


def test_power_law_hand_value():
    # A=0.7, D=5, B=0.5, C=100: 0.7 - 5 / 10 = 0.2
    assert power_law([100.0], 0.7, 5.0, 0.5) == pytest.approx([0.2])


@pytest.mark.parametrize("scale", [1.0, 1e12], ids=["gpu-hours", "flops"])
def test_power_law_recovers_a_true_power_law(scale):
    c = np.geomspace(10, 1e4, 60) * scale
    d = 5.0 * scale ** 0.5  # same curve in other compute units: D scales by unit^B
    y = power_law(c, 0.7, d, 0.5)
    fit = fit_power_law(c, y)
    assert (fit.A, fit.B) == pytest.approx((0.7, 0.5), rel=1e-6)
    assert fit.D == pytest.approx(d, rel=1e-5)
    assert fit.r2 == pytest.approx(1.0) and fit.converged and fit.warnings == ()


def test_power_law_with_noise():
    rng = np.random.default_rng(0)
    c = np.linspace(100, 20_000, 80)
    y = power_law(c, 0.65, 3.0, 0.4) + rng.normal(0, 0.005, c.size)
    fit = fit_power_law(c, y)
    assert fit.A == pytest.approx(0.65, abs=0.03) and fit.B == pytest.approx(0.4, rel=0.25)


def test_power_law_matches_the_sigmoid_tail():
    # Paper A.4: for C >> C_mid, sigmoid ~ A - D / C^B with D = (A - R0) C_mid^B.
    a, b, c_mid, r0 = 0.61, 1.92, 2542.0, 0.3
    c = np.geomspace(50, 500, 40) * c_mid
    fit = fit_power_law(c, sigmoid(c, a, b, c_mid, r0))
    assert fit.A == pytest.approx(a, abs=1e-4) and fit.B == pytest.approx(b, rel=0.02)
    assert fit.D == pytest.approx((a - r0) * c_mid ** b, rel=0.1)


def test_power_law_overshoots_before_saturation_and_says_so():
    # Fitted on the whole sigmoid (paper: A = 1.0 vs 0.645) the power law hits its bound.
    c = np.linspace(300, 8000, 75)
    fit = fit_power_law(c, sigmoid(c, 0.61, 1.92, 2542.0, 0.3))
    assert fit.A == pytest.approx(1.0) and any("upper bound" in w for w in fit.warnings)


def test_power_law_decreasing_is_a_flagged_constant():
    c = np.linspace(100, 1000, 20)
    fit = fit_power_law(c, 0.5 - 1e-4 * c)
    assert fit.D == 0.0 and not fit.converged and fit.warnings


def _clean_curve(noise=0.004, seed=0):
    rng = np.random.default_rng(seed)
    c = np.linspace(150, 12_000, 75)
    y = sigmoid(c, 0.62, 1.8, 3000.0, 0.3) + rng.normal(0, noise, c.size)
    return c, y


@pytest.mark.parametrize("method", ["residuals", "points"])
def test_bootstrap_intervals_contain_the_truth(method):
    c, y = _clean_curve()
    cfg = FitConfig(bootstrap_n=200, bootstrap_method=method, bootstrap_seed=0)
    fit = fit_sigmoid(c, y, cfg, r0=0.3)
    out = bootstrap_intervals(c, y, fit, cfg)
    assert out["n_ok"] >= 190 and out["warnings"] == []
    for name, truth in (("A", 0.62), ("B", 1.8), ("C_mid", 3000.0)):
        lo, hi = out[name]
        assert lo <= truth <= hi, (name, lo, hi)
        assert lo <= getattr(fit, name) <= hi
    assert out["A"][1] - out["A"][0] < 0.02  # a clean curve gives a tight interval


def test_bootstrap_is_seeded_and_scales_with_noise():
    c, y = _clean_curve()
    cfg = FitConfig(bootstrap_n=60, bootstrap_seed=7)
    fit = fit_sigmoid(c, y, cfg, r0=0.3)
    first = bootstrap_intervals(c, y, fit, cfg)
    assert bootstrap_intervals(c, y, fit, cfg)["A"] == first["A"]
    assert bootstrap_intervals(c, y, fit, cfg.replace(bootstrap_seed=8))["A"] != first["A"]
    c2, y2 = _clean_curve(noise=0.02)
    fit2 = fit_sigmoid(c2, y2, cfg, r0=0.3)
    wide = bootstrap_intervals(c2, y2, fit2, cfg)
    assert wide["A"][1] - wide["A"][0] > 2 * (first["A"][1] - first["A"][0])
    with pytest.raises(ValueError, match="bootstrap_n"):
        bootstrap_intervals(c, y, fit, cfg.replace(bootstrap_n=0))
