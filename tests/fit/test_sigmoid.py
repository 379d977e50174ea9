"""The sigmoid model, the grid + polish fit, FitConfig, ranges and degenerate input."""

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from scalerl.config import ConfigError
from scalerl.fit.curves.optimize import grid_search
from scalerl.fit.curves.sigmoid import (
    FitConfig,
    FitError,
    a_grid_for,
    cmid_grid_for,
    compute_for_fraction,
    fit_sigmoid,
    sigmoid,
)


def test_sigmoid_hand_values():
    # A=0.6, R0=0.2, B=2, C_mid=100:
    #   C=200: (100/200)^2 = 0.25 -> 1/1.25 = 0.8 -> 0.2 + 0.4*0.8 = 0.52
    #   C=50:  (100/50)^2 = 4 -> 1/5 = 0.2 -> 0.2 + 0.4*0.2 = 0.28
    #   C=C_mid: half the gain -> 0.4;  C=0: R0;  C -> inf: A
    got = sigmoid([200.0, 50.0, 100.0, 0.0, 1e30], 0.6, 2.0, 100.0, 0.2)
    assert got == pytest.approx([0.52, 0.28, 0.4, 0.2, 0.6], abs=1e-12)


def test_budget_planner_closed_form():
    # C = C_mid * (f / (1 - f))^(1/B): f=0.9, B=2 -> 100*sqrt(9) = 300; f=0.2 -> 100*0.5 = 50
    assert compute_for_fraction([0.9, 0.5, 0.2], 2.0, 100.0) == pytest.approx([300, 100, 50])
    # round trip: the curve at that compute has gained exactly the fraction
    c = compute_for_fraction(np.array([0.1, 0.75, 0.99]), 1.7, 2542.0)
    assert sigmoid(c, 0.61, 1.7, 2542.0, 0.3) == pytest.approx(0.3 + np.array([0.1, 0.75, 0.99])
                                                               * 0.31)
    for bad in (0.0, 1.0, 1.2, -0.1, np.nan):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            compute_for_fraction(bad, 2.0, 100.0)


def test_fit_budget_methods():
    c = np.linspace(100, 8000, 60)
    fit = fit_sigmoid(c, sigmoid(c, 0.6, 2.0, 1000.0, 0.2), r0=0.2)
    assert fit.compute_for_fraction(0.9) == pytest.approx(3000.0, rel=1e-5)
    # reward 0.52 = R0 + 0.8 (A - R0) -> f = 0.8 -> C = 1000 * 4^(1/2) = 2000
    assert fit.compute_for_reward(0.52) == pytest.approx(2000.0, rel=1e-5)


@pytest.mark.parametrize("config", [FitConfig.paper(cutoff=0.0), FitConfig()], ids=["paper", "auto"])
def test_noise_free_recovery_beyond_grid_step(config):
    # A = 0.6123 lies between the 0.005 grid values: the polish must find it exactly.
    c = np.linspace(100, 8000, 75)
    fit = fit_sigmoid(c, sigmoid(c, 0.6123, 1.7, 2000.0, 0.3), config, r0=0.3)
    assert (fit.A, fit.B, fit.C_mid) == pytest.approx((0.6123, 1.7, 2000.0), rel=1e-6)
    assert fit.converged and fit.warnings == ()
    assert fit.sse < 1e-20 and fit.r2 == pytest.approx(1.0)
    assert abs(fit.grid_best["A"] - 0.6123) <= 0.0101  # a neighbouring grid value


def test_grid_b_is_least_squares_at_each_grid_point():
    # One grid point (A=0.62, C_mid=2300, both off the truth): the vectorised scan + Gauss-
    # Newton B must equal a bounded scalar minimisation of the SSE over B.
    rng = np.random.default_rng(3)
    c = np.linspace(200, 9000, 80)
    y = sigmoid(c, 0.6, 1.8, 2500.0, 0.3) + rng.normal(0, 0.01, c.size)
    cfg = FitConfig()
    a, b, cm, sse = grid_search(np.log(c), y, 0.3, np.array([0.62]), np.array([2300.0]), cfg)

    def sse_of(bb):
        return float(np.sum((sigmoid(c, 0.62, bb, 2300.0, 0.3) - y) ** 2))

    ref = minimize_scalar(sse_of, bounds=(cfg.b_min, cfg.b_max), method="bounded",
                          options={"xatol": 1e-10})
    assert b == pytest.approx(ref.x, rel=1e-5)
    assert sse == pytest.approx(ref.fun, rel=1e-9)


def test_config_bounds_and_paper_preset():
    paper = FitConfig.paper()
    assert (paper.a_min, paper.a_max, paper.a_step) == (0.45, 0.8, 0.005)
    assert (paper.cmid_min, paper.cmid_max, paper.cmid_points) == (100.0, 40000.0, 100)
    assert paper.cmid_spacing == "linear" and paper.cutoff == 1500.0
    assert a_grid_for(np.array([0.5]), 0.3, paper).size == 71  # 0.450, 0.455, ..., 0.800
    with pytest.raises(ConfigError, match="a_min"):
        FitConfig(a_min=0.7, a_max=0.6)
    with pytest.raises(ConfigError, match="b_min"):
        FitConfig(b_min=3.0, b_max=2.0)
    with pytest.raises(ConfigError, match="cmid_spacing"):
        FitConfig(cmid_spacing="cubic")
    with pytest.raises(ConfigError, match="valid keys"):
        FitConfig.from_dict({"cutof": 1.0})
    with pytest.raises(ConfigError, match="extrapolate_fraction"):
        FitConfig(extrapolate_fraction=1.5)


def test_automatic_ranges_for_tiny_runs_and_flops():
    # Tiny-model run: pass rate 0.10 -> 0.36, compute in FLOPs up to 1e15. The paper's A range
    # [0.45, 0.80] cannot hold A = 0.36; the automatic range must, and C_mid (3e14 FLOPs)
    # must be found on a log grid.
    c = np.linspace(1e15 / 75, 1e15, 75)
    rng = np.random.default_rng(0)
    y = sigmoid(c, 0.36, 1.5, 3e14, 0.10) + rng.normal(0, 0.005, c.size)
    cfg = FitConfig()
    grid = a_grid_for(y, 0.10, cfg)
    assert grid[0] < 0.36 < grid[-1] and grid[-1] == pytest.approx(1.0)
    cm = cmid_grid_for(c, cfg)
    assert cm[0] == pytest.approx(c.min()) and cm[-1] == pytest.approx(4e15)
    assert np.allclose(np.diff(np.log(cm)), np.log(cm[1] / cm[0]))  # log-spaced (300x range)
    fit = fit_sigmoid(c, y, cfg, r0=0.10)
    assert fit.A == pytest.approx(0.36, abs=0.01) and fit.converged
    assert fit.C_mid == pytest.approx(3e14, rel=0.1)
    # Forcing the paper's grid on the same data pins A to 0.45 and says so.
    forced = fit_sigmoid(c, y, FitConfig.paper(cutoff=0.0, cmid_min=1e12, cmid_max=4e15), r0=0.1)
    assert not forced.converged and any("A = 0.45" in w and "lower end" in w
                                        for w in forced.warnings)


def test_paper_range_chosen_for_paper_like_data():
    y = np.array([0.35, 0.45, 0.52, 0.56, 0.58, 0.59])
    assert a_grid_for(y, 0.3, FitConfig())[[0, -1]] == pytest.approx([0.45, 0.80])
    # linear C_mid spacing when the range spans less than two decades
    cm = cmid_grid_for(np.array([1000.0, 2000.0, 8000.0]), FitConfig())
    assert np.allclose(np.diff(cm), cm[1] - cm[0])


def test_degenerate_inputs_raise_clear_errors():
    c = np.array([100.0, 200.0, 300.0, 400.0, 500.0])
    y = np.array([0.3, 0.4, 0.45, 0.48, 0.5])
    with pytest.raises(FitError, match="at least 4"):
        fit_sigmoid(c[:3], y[:3], r0=0.2)
    with pytest.raises(FitError, match="non-finite"):
        fit_sigmoid(c, np.where(c == 300, np.nan, y), r0=0.2)
    with pytest.raises(FitError, match="non-finite"):
        fit_sigmoid(np.where(c == 300, np.nan, c), y, r0=0.2)
    with pytest.raises(FitError, match=">= 0"):
        fit_sigmoid(c - 250, y, r0=0.2)
    with pytest.raises(FitError, match="positive compute"):
        fit_sigmoid(c - 100, y, r0=0.2)
    with pytest.raises(FitError, match="R0 is needed"):
        fit_sigmoid(c, y)
    with pytest.raises(FitError, match="compute has 5 values but reward has 4"):
        fit_sigmoid(c, y[:4], r0=0.2)


@pytest.mark.parametrize("kind", ["flat", "decreasing"])
def test_flat_or_decreasing_curve_is_flagged(kind):
    rng = np.random.default_rng(1)
    c = np.linspace(100, 5000, 40)
    if kind == "flat":
        y = 0.40 + rng.normal(0, 0.01, c.size)
    else:
        y = 0.60 - 0.2 * c / c.max() + rng.normal(0, 0.005, c.size)
    fit = fit_sigmoid(c, y, r0=0.40 if kind == "flat" else 0.6)
    assert not fit.converged
    assert any(kind in w for w in fit.warnings), fit.warnings


def test_b_a_hair_inside_its_bound_still_counts_as_on_it():
    # default sweep 2026-12-04, tiny-s L80 math: the polish left B = 19.999876 with b_max 20,
    # a step the points do not resolve; it must not be reported as converged
    from scalerl.fit.curves.sigmoid import _diagnose

    c = np.geomspace(1e10, 1e12, 6)
    y = np.array([0.42, 0.42, 0.48, 0.484, 0.484, 0.484])
    bounds = ((0.42, 1.0), (0.1, 20.0), (1e9, 1e14))
    warnings = list(_diagnose(c, y, 0.42, 0.484, 19.999876, 2e11, bounds, None))
    assert any(w.startswith("B = 20 sits on the upper end") for w in warnings), warnings
    assert not list(_diagnose(c, y, 0.42, 0.484, 19.9, 2e11, bounds, None))
