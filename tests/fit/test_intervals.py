"""Calibrated forecast intervals: block bootstrap, eval noise, the horizon backtest, the
widening (hand-derived), the flags, and what predictions, racing and the backtest do with them."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from scipy.stats import norm
from scipy.stats import t as student_t

from scalerl.fit.curves.bootstrap import block_length, bootstrap_intervals, resample_indices
from scalerl.fit.curves.noise import noise_sd
from scalerl.fit.curves.sigmoid import FitConfig, fit_sigmoid, sigmoid
from scalerl.fit.curves.synthetic import TABLE1, TABLE1_R0
from scalerl.fit.forecast.backtest import backtest_summary, backtest_table
from scalerl.fit.forecast.intervals import (
    calibrate,
    effective_n,
    eval_noise_se,
    horizon_backtest,
    spread_sd,
)
from scalerl.fit.forecast.predict import (
    INTERVAL_COLUMNS,
    PREDICTIONS_SCHEMA,
    predict_final,
    prediction_rows,
    read_predictions,
)
from scalerl.fit.forecast.racing import race

Z95 = float(norm.ppf(0.975))


def ar1(n, rho, sd, rng):
    """An AR(1) series [n] with lag-1 correlation rho and marginal sd."""
    out = np.empty(n)
    out[0] = rng.normal(0, sd)
    for i in range(1, n):
        out[i] = rho * out[i - 1] + rng.normal(0, sd * np.sqrt(1 - rho * rho))
    return out


def test_block_length_follows_the_lag1_autocorrelation():
    rng = np.random.default_rng(0)
    assert block_length(rng.normal(size=200)) <= 2  # independent residuals: (near) 1
    assert block_length(np.array([1.0, -1.0] * 50)) == 1  # negative correlation: 1
    series = ar1(200, 0.8, 1.0, rng)
    x = series - series.mean()
    rho = float(x[1:] @ x[:-1] / (x @ x))
    expected = round((2 * rho / (1 - rho * rho)) ** (2 / 3) * 200 ** (1 / 3))
    assert block_length(series) == expected and expected >= 5
    assert block_length(np.ones(3)) == 1


def test_resample_indices_lays_blocks_end_to_end():
    rng = np.random.default_rng(1)
    idx = resample_indices(20, 11, "blocks", 4, rng)
    assert idx.shape == (11,) and idx.min() >= 0 and idx.max() < 20
    for start in (0, 4, 8):  # each block is consecutive
        block = idx[start:start + 4]
        np.testing.assert_array_equal(np.diff(block), np.ones(block.size - 1))
    single = resample_indices(20, 11, "residuals", 4, np.random.default_rng(1))
    np.testing.assert_array_equal(single, np.random.default_rng(1).integers(0, 20, size=11))


def test_block_bootstrap_is_wider_than_independent_draws_on_correlated_residuals():
    rng = np.random.default_rng(3)
    c = np.linspace(200, 12_000, 60)
    y = sigmoid(c, 0.62, 1.8, 3000.0, 0.3) + ar1(60, 0.9, 0.01, rng)
    widths = {}
    for method in ("blocks", "residuals"):
        cfg = FitConfig(bootstrap_n=200, bootstrap_method=method)
        fit = fit_sigmoid(c, y, cfg, r0=0.3)
        out = bootstrap_intervals(c, y, fit, cfg)
        widths[method] = out["A"][1] - out["A"][0]
        assert out["method"] == method
    assert out["block_length"] == 1  # the residual scheme draws one at a time
    assert widths["blocks"] > 1.5 * widths["residuals"], widths


def test_eval_noise_binomial_when_n_is_known_else_from_the_points():
    y = np.array([0.30, 0.35, 0.33, 0.40, 0.38, 0.45])
    se, source = eval_noise_se(y, 0.6, np.full(6, 800))
    assert source == "binomial" and se == pytest.approx(np.sqrt(0.6 * 0.4 / 800))
    se, source = eval_noise_se(y, 0.6, None)
    d2 = np.abs(np.diff(y, 2))  # 0.07, 0.09, 0.09, 0.09
    assert source == "points" and se == pytest.approx(1.4826 * np.median(d2) / np.sqrt(6))
    assert noise_sd(y) == se and np.isnan(eval_noise_se(y[:2], 0.6, None)[0])


def test_horizon_backtest_scores_each_prefix_at_the_same_ratio():
    c = np.arange(1.0, 21.0)  # 1..20
    y = 0.01 * c
    calls = []

    def last_value(m, target):  # forecast: the prefix's last value, sd 0.001
        calls.append((m, target))
        return float(y[m - 1]), 0.001

    bt = horizon_backtest(c, y, 2.0, last_value, min_points=6)
    # prefixes m = 6..10 end at 6..10, targets 12..20 inside the data
    assert [m for m, _ in calls] == [6, 7, 8, 9, 10]
    np.testing.assert_allclose(bt["target_compute"], [12, 14, 16, 18, 20])
    np.testing.assert_allclose(bt["error"], 0.01 * np.array([6, 7, 8, 9, 10]), atol=1e-12)
    np.testing.assert_allclose(bt["sd"], 0.001)
    thinned = horizon_backtest(c, y, 2.0, last_value, min_points=6, max_prefixes=3)
    np.testing.assert_allclose(thinned["prefix_compute"], [6, 8, 10])
    assert horizon_backtest(c, y, 5.0, last_value, min_points=6)["error"].size == 0


def test_calibrate_matches_the_hand_derived_interval():
    # bootstrap values symmetric about the forecast 0.60: percentile interval 0.60 +- 0.01
    draws = 0.60 + 0.01 * norm.ppf(np.linspace(0.0005, 0.9995, 2001)) / Z95
    var_fit = spread_sd(draws, 0.95) ** 2
    errors = np.array([0.03, -0.02, 0.04, -0.01, 0.03, -0.03])
    sds = np.full(6, 0.005)
    se = 0.01
    iv = calibrate(0.60, draws, errors, sds, se, "points", 0.95, A=0.62,
                   a_draws=0.62 + (draws - 0.60), c_mid=1000.0,
                   c_mid_draws=1000.0 * np.exp(draws - 0.60), n_points=23)
    var_disc = np.mean(errors ** 2 - sds ** 2 - se ** 2)  # backtest beats residual_ms = 0
    e = errors - errors.mean()
    rho = max(0.0, (e[1:] @ e[:-1]) / (e @ e))
    n_eff = max(1.0, 6 * (1 - rho) / (1 + rho))
    assert effective_n(errors) == pytest.approx(n_eff)
    v_obs = var_fit + se ** 2 + var_disc
    dof = v_obs ** 2 / (var_disc ** 2 / n_eff + (var_fit + se ** 2) ** 2 / 20)
    half = student_t.ppf(0.975, dof) * np.sqrt(v_obs)
    f64 = dict(dtype=torch.float64)
    half_mean = student_t.ppf(0.975, dof) * np.sqrt(var_fit + var_disc)
    torch.testing.assert_close(torch.tensor(iv.observed, **f64),
                               torch.tensor((0.60 - half, 0.60 + half), **f64), rtol=0, atol=1e-9)
    torch.testing.assert_close(torch.tensor(iv.mean, **f64),
                               torch.tensor((0.60 - half_mean, 0.60 + half_mean), **f64),
                               rtol=0, atol=1e-9)
    lo, hi = np.quantile(draws, [0.025, 0.975])  # the bootstrap interval: 0.60 -+ ~0.01
    widening = half_mean / ((hi - lo) / 2)
    assert iv.widening == pytest.approx(widening)
    a_expected = (0.62 - widening * (0.60 - lo), 0.62 + widening * (hi - 0.60))
    torch.testing.assert_close(torch.tensor(iv.A, **f64), torch.tensor(a_expected, **f64),
                               rtol=0, atol=1e-9)
    assert iv.C_mid[0] == pytest.approx(1000 * np.exp(-widening * (0.60 - lo)), rel=1e-9)
    assert iv.status == "ok" and iv.backtest_n == 6
    assert iv.backtest_rmse == pytest.approx(np.sqrt(np.mean(errors ** 2)))
    # calibration off: the bootstrap percentiles, widened only by the noise for one eval
    raw = calibrate(0.60, draws, None, None, se, "points", 0.95, A=0.62, a_draws=draws)
    assert raw.status == "uncalibrated" and raw.mean == pytest.approx((lo, hi), abs=1e-12)
    assert raw.observed[1] - 0.60 == pytest.approx(np.hypot(hi - 0.60, Z95 * se), abs=1e-12)
    # one backtest error cannot scale an interval
    flagged = calibrate(0.60, draws, errors[:1], sds[:1], se, "points", 0.95, A=0.62,
                        a_draws=draws)
    assert flagged.status == "no_backtest" and np.isnan(flagged.observed).all()


def test_calibrate_uses_the_residuals_when_the_backtest_sees_no_discrepancy():
    draws = 0.60 + 0.01 * norm.ppf(np.linspace(0.0005, 0.9995, 2001)) / Z95
    errors, sds = np.array([0.001, -0.001, 0.0005]), np.full(3, 0.01)
    iv = calibrate(0.60, draws, errors, sds, 0.01, "points", 0.95, A=0.62, a_draws=draws,
                   n_points=43, residual_ms=0.02 ** 2)
    var_fit = spread_sd(draws, 0.95) ** 2
    v_obs = var_fit + 0.02 ** 2  # se^2 + (residual_ms - se^2)
    dof = v_obs ** 2 / ((0.02 ** 2 - 0.01 ** 2) ** 2 / 40 + (var_fit + 0.01 ** 2) ** 2 / 40)
    half = student_t.ppf(0.975, dof) * np.sqrt(v_obs)
    assert iv.observed[1] - 0.60 == pytest.approx(half, abs=1e-9)


def binomial_curve(row=0, seed=0, n=800, n_points=30, drift=0.0):
    """Table 1 run `row`: base + n_points evals to 6 x C_mid, Binomial(n) noise, plus an
    AR(1) discrepancy of sd `drift` (correlation 0.9 between evals)."""
    _, c_mid, b, a = TABLE1[row]
    c = np.r_[0.0, np.arange(1, n_points + 1) / n_points * 6.0 * c_mid]
    rng = np.random.default_rng([seed, row, 29])
    truth = sigmoid(c, a, b, c_mid, TABLE1_R0)
    truth[0] = TABLE1_R0
    mean = np.clip(truth + np.r_[0.0, ar1(n_points, 0.9, drift, rng)] if drift else truth,
                   0, 1)
    return c, rng.binomial(n, mean) / n, truth


def test_prediction_intervals_flags_and_fields():
    c, y, _ = binomial_curve(seed=1)
    cfg = FitConfig(bootstrap_n=60)
    n = np.full(c.size, 800)
    k = c <= 0.75 * c[-1] + 1e-9
    sig, pl = predict_final(c[k], y[k], c[-1], cfg, n_samples=n[k], prior=None)
    for p in (sig, pl):
        assert p.interval_status == "ok" and p.backtest_n >= 2 and p.confidence == 0.95
        assert p.observed_final_lo < p.predicted_final_lo < p.predicted_final
        assert p.predicted_final < p.predicted_final_hi < p.observed_final_hi
        assert p.A_lo < p.A <= p.A_hi and p.interval_widening >= 1.0  # power law: A <= 1
        assert p.eval_se == pytest.approx(np.sqrt(p.predicted_final * (1 - p.predicted_final)
                                                  / 800))
    assert sig.C_mid_lo < sig.C_mid < sig.C_mid_hi and np.isnan(pl.C_mid_lo)
    # 25 % of a 30-eval run: no earlier prefix reaches a 4x horizon -> no interval
    early = c <= 0.25 * c[-1] + 1e-9
    (p,) = predict_final(c[early], y[early], c[-1], cfg, forms=("sigmoid",), prior=None)
    assert p.interval_status in ("no_backtest", "before_c_mid")
    assert np.isnan([p.observed_final_lo, p.predicted_final_lo, p.A_lo, p.C_mid_lo]).all()
    assert np.isfinite(p.predicted_final)  # the point forecast is still given
    # before C_mid: flagged, whatever the backtest
    c1, y1, _ = binomial_curve(row=1, n=100_000)
    before = c1 <= 0.15 * c1[-1] + 1e-9
    (p,) = predict_final(c1[before], y1[before], c1[-1], cfg, forms=("sigmoid",), prior=None)
    assert not p.reached_c_mid and p.interval_status == "before_c_mid"
    # bootstrap_n = 0: no intervals asked for
    (p,) = predict_final(c[k], y[k], c[-1], FitConfig(bootstrap_n=0), forms=("sigmoid",),
                         prior=None)
    assert p.interval_status == "off" and np.isnan(p.A_lo)


def test_uncalibrated_residual_bootstrap_reproduces_the_curve_interval_of_before():
    c, y, _ = binomial_curve(seed=2)
    k = c <= 0.5 * c[-1] + 1e-9
    cfg = FitConfig(bootstrap_n=40, bootstrap_method="residuals", calibrate_intervals=False)
    (p,) = predict_final(c[k], y[k], c[-1], cfg, forms=("sigmoid",), prior=None)
    fit = fit_sigmoid(c[k][1:], y[k][1:], cfg, r0=y[0])
    draws = bootstrap_intervals(c[k][1:], y[k][1:], fit, cfg, keep_draws=True)["draws"]
    finals = sigmoid(c[-1], draws[:, 0], draws[:, 1], draws[:, 2], y[0])
    np.testing.assert_allclose([p.predicted_final_lo, p.predicted_final_hi],
                               np.quantile(finals, [0.025, 0.975]), rtol=0, atol=1e-12)
    assert p.interval_status == "uncalibrated" and p.backtest_n == 0


@pytest.mark.slow
def test_calibrated_intervals_cover_drifting_curves_that_the_old_ones_miss():
    """Curves whose residuals are correlated (AR(1) discrepancy of sd 0.015 on top of the
    binomial noise): the old curve interval covers the final eval rarely, the observed
    interval close to its nominal 95 %."""
    old_hits = new_hits = given = 0
    for seed in range(12):
        c, y, _ = binomial_curve(row=seed % len(TABLE1), seed=seed, drift=0.015)
        k = c <= 0.75 * c[-1] + 1e-9
        (old,) = predict_final(c[k], y[k], c[-1], FitConfig(
            bootstrap_n=60, bootstrap_method="residuals", calibrate_intervals=False),
            forms=("sigmoid",), prior=None)
        (new,) = predict_final(c[k], y[k], c[-1], FitConfig(bootstrap_n=60),
                               forms=("sigmoid",), prior=None)
        old_hits += old.predicted_final_lo <= y[-1] <= old.predicted_final_hi
        if new.interval_status == "ok":
            given += 1
            new_hits += new.observed_final_lo <= y[-1] <= new.observed_final_hi
    assert given >= 10
    assert new_hits >= 0.75 * given and new_hits >= old_hits + 4, (old_hits, new_hits, given)


def test_old_predictions_files_read_with_empty_interval_columns(tmp_path):
    c, y, _ = binomial_curve()
    rows = prediction_rows("r", "math", 20, c[20], c[-1],
                           predict_final(c[:21], y[:21], c[-1], FitConfig(bootstrap_n=10),
                                         prior=None))
    assert set(INTERVAL_COLUMNS) <= set(rows[0]) and set(rows[0]) == set(
        PREDICTIONS_SCHEMA.names)
    old_names = [n for n in PREDICTIONS_SCHEMA.names if n not in INTERVAL_COLUMNS]
    old = pd.DataFrame(rows)[old_names]
    pq.write_table(pa.Table.from_pandas(old, preserve_index=False), tmp_path / "old.parquet")
    back = read_predictions(tmp_path / "old.parquet")
    assert list(back.columns) == PREDICTIONS_SCHEMA.names
    assert back["observed_final_lo"].isna().all() and back["interval_status"].isna().all()
    pq.write_table(pa.Table.from_pandas(old.drop(columns=["A_lo"]), preserve_index=False),
                   tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="missing column"):
        read_predictions(tmp_path / "bad.parquet")


def pred_row(run, a, lo, hi, status="ok", pred=0.55, obs=(0.50, 0.60), fraction=0.5):
    return {"run": run, "task": "math", "chunk": 3, "compute": 5.0, "compute_fraction": fraction,
            "form": "sigmoid", "predicted_final": pred, "predicted_final_lo": pred - 0.01,
            "predicted_final_hi": pred + 0.01, "A": a, "A_lo": lo, "A_hi": hi,
            "reached_c_mid": status != "before_c_mid", "n_points": 8, "status": "ok",
            "observed_final_lo": obs[0], "observed_final_hi": obs[1], "C_mid": 2.0,
            "C_mid_lo": 1.5, "C_mid_hi": 2.5, "interval_status": status, "confidence": 0.95,
            "eval_se": 0.01, "interval_widening": 2.0, "backtest_n": 4, "backtest_rmse": 0.02}


def test_race_keeps_runs_without_an_interval_and_never_uses_them_as_reference():
    nan = float("nan")
    df = pd.DataFrame([pred_row("high_no_interval", 0.80, nan, nan, status="no_backtest"),
                       pred_row("best", 0.60, 0.58, 0.62),
                       pred_row("low", 0.50, 0.48, 0.53),
                       pred_row("early", 0.45, nan, nan, status="before_c_mid")])
    result = race(df, task="math", margin=0.02, min_fraction=0.3)
    got = {d["run"]: d["decision"] for d in result["decisions"]}
    assert got == {"high_no_interval": "keep", "best": "keep", "low": "stop", "early": "keep"}
    assert result["best"]["group"] == "best"
    reasons = {d["run"]: d["reason"] for d in result["decisions"]}
    assert "no interval of A yet (no_backtest)" in reasons["high_no_interval"]
    assert "before_c_mid" in reasons["early"]


def test_backtest_scores_the_observed_interval_with_coverage_and_width():
    nan = float("nan")
    preds = pd.DataFrame([
        pred_row("r", 0.6, 0.5, 0.7, obs=(0.55, 0.65), fraction=0.5),  # covers 0.6
        pred_row("r", 0.6, 0.5, 0.7, obs=(0.61, 0.63), fraction=0.5),  # misses
        pred_row("r", 0.6, nan, nan, status="no_backtest", obs=(nan, nan), fraction=0.25),
    ])
    table = backtest_table(preds, pd.DataFrame({"run": ["r"], "task": ["math"],
                                                "observed_final": [0.6]}))
    by_width = table.sort_values("interval_width")
    np.testing.assert_allclose(by_width["interval_width"], [0.02, 0.10, nan], equal_nan=True)
    np.testing.assert_allclose(by_width["covered"], [0.0, 1.0, nan], equal_nan=True)
    summary = backtest_summary(table, bins=(0, 0.25, 0.5)).set_index("fraction_bin")
    half = summary.loc["(0.25, 0.5]"]
    assert half["with_interval"] == 1.0 and half["coverage"] == 0.5
    assert half["median_width"] == pytest.approx(0.06) and half["confidence"] == 0.95
    quarter = summary.loc["(-0.001, 0.25]"]
    assert quarter["with_interval"] == 0.0 and np.isnan(quarter["coverage"])
