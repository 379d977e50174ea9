"""fit_curve (R0, cutoff, extrapolation, the fit.json record) and the common-A refit."""

import json

import numpy as np
import pytest

from scalerl.fit.curves.compare import Curve, refit_common_a
from scalerl.fit.curves.curve import fit_curve, select_points
from scalerl.fit.curves.sigmoid import FitConfig, FitError, fit_sigmoid, sigmoid

FAST = FitConfig(bootstrap_n=0)


def _curve(a=0.6, b=2.0, c_mid=1000.0, r0=0.2, n=40, c_max=6000.0, noise=0.0, seed=0):
    c = np.linspace(c_max / n, c_max, n)
    y = sigmoid(c, a, b, c_mid, r0) + np.random.default_rng(seed).normal(0, noise, n)
    return c, y


def test_r0_from_compute_zero_point_is_not_fitted():
    c, y = _curve()
    # two base-model evaluations at compute 0 (0.19, 0.21) -> R0 = their mean 0.20
    fit = fit_curve(np.r_[0.0, 0.0, c], np.r_[0.19, 0.21, y], FAST)
    assert fit.selection.r0_source == "compute-0 point"
    assert fit.sigmoid.R0 == pytest.approx(0.20)
    assert fit.sigmoid.n_points == 40 and fit.selection.status[:2] == ("base", "base")
    assert fit.sigmoid.A == pytest.approx(0.6, abs=1e-6)


def test_r0_given_overrides_and_first_point_default():
    c, y = _curve()
    given = fit_curve(np.r_[0.0, c], np.r_[0.5, y], FAST.replace(r0=0.2))
    assert given.selection.r0_source == "given" and given.sigmoid.R0 == 0.2
    assert given.sigmoid.A == pytest.approx(0.6, abs=1e-6)  # the 0.5 at C=0 is ignored
    first = fit_curve(c, y, FAST)
    assert first.selection.r0_source == "first point"
    assert first.sigmoid.R0 == pytest.approx(y[0]) and first.sigmoid.n_points == 40
    assert any("taken from the first point" in w for w in first.warnings)
    # a wrong R0 changes the fit: R0 is a model input, not a nuisance
    wrong = fit_curve(c, y, FAST.replace(r0=0.0))
    assert abs(wrong.sigmoid.A - 0.6) > 1e-4 or abs(wrong.sigmoid.B - 2.0) > 1e-3


def test_cutoff_and_cutoff_fraction():
    c, y = _curve()  # compute 150, 300, ..., 6000
    sel = select_points(c, y, FitConfig(cutoff=1000.0))
    assert sel.cutoff == 1000.0 and sel.used.sum() == int((c >= 1000).sum()) == 34
    sel = select_points(c, y, FitConfig(cutoff=100.0, cutoff_fraction=0.5))
    assert sel.cutoff == 3000.0 and sel.used.sum() == 21
    with pytest.raises(FitError, match="lower --cutoff"):
        select_points(c, y, FitConfig(cutoff=5600.0))
    with pytest.raises(FitError, match="all compute values are 0"):
        select_points(np.zeros(5), np.ones(5), FitConfig())
    with pytest.raises(FitError, match=">= 0"):
        select_points(np.r_[-1.0, c], np.r_[0.2, y], FitConfig())


def test_extrapolation_check_noise_free_and_skipped():
    c, y = _curve()
    fit = fit_curve(c, y, FAST.replace(r0=0.2))
    ex = fit.extrapolation
    assert ex["n_fit"] == 20 and ex["n_heldout"] == 20  # compute <= 3000 of 6000
    assert ex["max_abs_error"] < 1e-6 and ex["mean_abs_error"] < 1e-6
    assert ex["predicted_final"] == pytest.approx(y[-1], abs=1e-6)
    assert ex["observed_final"] == y[-1] and ex["A"] == pytest.approx(0.6, abs=1e-6)
    short = fit_curve(c[:7], y[:7], FAST.replace(r0=0.2))  # 3 points <= half: too few
    assert short.extrapolation["max_abs_error"] is None and "skipped" in short.extrapolation
    assert any("extrapolation check skipped" in w for w in short.warnings)


def test_record_is_json_and_has_the_contract_keys():
    c, y = _curve(noise=0.01)
    record = fit_curve(np.r_[0.0, c], np.r_[0.2, y], FitConfig(bootstrap_n=20)).to_dict(
        compute_col="compute", reward_col="pass_rate", group={"run": "r1"})
    for key in ("A", "B", "C_mid", "R0", "r2", "sse", "n_points", "n_excluded", "cutoff",
                "compute_col", "reward_col", "converged", "warnings", "intervals", "power_law",
                "extrapolation", "group", "meta", "points", "budget"):
        assert key in record, key
    assert set(record["power_law"]) >= {"A", "D", "B", "r2"}
    assert set(record["extrapolation"]) >= {"fraction", "max_abs_error", "mean_abs_error",
                                            "predicted_final", "observed_final"}
    assert len(record["intervals"]["A"]) == 2 and record["n_excluded"] == 1
    assert record["points"]["status"][0] == "base" and len(record["points"]["compute"]) == 41
    assert record["budget"]["C_50"] == pytest.approx(record["C_mid"])
    json.dumps(record, allow_nan=True)  # plain Python types only


def test_common_a_refit_compares_b():
    # Two runs with the same ceiling A = 0.60 but different efficiency (B 2.2 vs 1.6).
    c1, y1 = _curve(a=0.60, b=2.2, c_mid=1000, noise=0.005, seed=1)
    c2, y2 = _curve(a=0.60, b=1.6, c_mid=1500, noise=0.005, seed=2)
    res = refit_common_a([Curve(c1, y1, r0=0.2, name="cispo"), Curve(c2, y2, r0=0.2, name="dapo")],
                         FAST)
    assert res.comparable and res.spread <= 0.02 and res.warnings == ()
    assert res.a == pytest.approx(np.mean(res.a_individual))
    assert all(f.A == res.a for f in res.fixed_fits)  # A really fixed
    rows = {r["name"]: r for r in res.table()}
    assert rows["cispo"]["B"] == pytest.approx(2.2, rel=0.1)
    assert rows["dapo"]["B"] == pytest.approx(1.6, rel=0.1)
    assert rows["cispo"]["B"] > rows["dapo"]["B"]


def test_fixed_a_fit_is_exact_on_clean_data():
    c, y = _curve(a=0.6, b=2.0, c_mid=1000.0)
    fit = fit_sigmoid(c, y, FAST, r0=0.2, fixed_a=0.6)
    assert fit.A == 0.6 and (fit.B, fit.C_mid) == pytest.approx((2.0, 1000.0), rel=1e-6)


def test_common_a_refit_refuses_to_call_different_ceilings_comparable():
    c1, y1 = _curve(a=0.55, b=2.0, c_mid=1000, noise=0.003, seed=3)
    c2, y2 = _curve(a=0.70, b=2.0, c_mid=1000, noise=0.003, seed=4)
    res = refit_common_a([Curve(c1, y1, r0=0.2), Curve(c2, y2, r0=0.2)], FAST)
    assert not res.comparable and res.spread > 0.1
    assert "not meaningful" in res.warnings[0]
    with pytest.raises(ValueError, match="at least 2 curves"):
        refit_common_a([Curve(c1, y1, r0=0.2)], FAST)


def test_constant_curve_gives_strict_json_and_a_flag():
    c = np.arange(1.0, 21.0)
    record = fit_curve(c, np.full(20, 0.3), FAST.replace(r0=0.2)).to_dict()
    text = json.dumps(record, allow_nan=False)  # raises on NaN
    assert json.loads(text)["r2"] is None and record["converged"] is False
    assert any("flat" in w for w in record["warnings"])
