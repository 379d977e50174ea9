"""Racing decisions and the backtest table on hand-set predictions."""

import json

import numpy as np
import pandas as pd
import pytest

from scalerl.cli import main
from scalerl.fit.curves.curve import fit_curve
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.forecast.backtest import backtest_summary, backtest_table
from scalerl.fit.forecast.predict import predict_final, prediction_rows, write_predictions
from scalerl.fit.forecast.racing import race, seed_groups
from scalerl.fit.report.backtest import plot_backtest
from scalerl.fit.report.scaling import write_report


def row(run, a, lo, hi, fraction=0.5, compute=5.0, chunk=3, status="ok", form="sigmoid",
        task="math", pred=None):
    pred = a - 0.02 if pred is None else pred
    return {"run": run, "task": task, "chunk": chunk, "compute": compute,
            "compute_fraction": fraction, "form": form, "predicted_final": pred,
            "predicted_final_lo": pred - 0.01, "predicted_final_hi": pred + 0.01, "A": a,
            "A_lo": lo, "A_hi": hi, "reached_c_mid": True, "n_points": 8, "status": status}


def decisions(result):
    return {d["run"]: d["decision"] for d in result["decisions"]}


def test_stop_keep_and_compute_saved():
    df = pd.DataFrame([row("best", 0.60, 0.58, 0.62),
                       row("low", 0.50, 0.48, 0.53),  # 0.53 < 0.58 - 0.02: stop
                       row("close", 0.55, 0.52, 0.57),  # 0.57 >= 0.56: keep
                       row("best", 0.55, 0.40, 0.70, chunk=1, fraction=0.1)])  # older chunk
    result = race(df, task="math", margin=0.02, min_fraction=0.3)
    assert decisions(result) == {"best": "keep", "low": "stop", "close": "keep"}
    assert result["best"]["group"] == "best" and result["best"]["A_lo"] == 0.58
    low = next(d for d in result["decisions"] if d["run"] == "low")
    assert "0.530 < best (best) lower bound 0.580" in low["reason"]
    # compute 5 at fraction 0.5: planned 10, saved 5 of the 30 planned by the three runs
    assert low["compute_saved"] == 5.0 and result["compute_saved"] == 5.0
    assert result["compute_planned"] == 30.0 and result["fraction_saved"] == pytest.approx(1 / 6)


def test_min_fraction_protects_early_runs_and_collapse_stops():
    df = pd.DataFrame([row("best", 0.60, 0.58, 0.62), row("low", 0.50, 0.48, 0.53,
                                                            fraction=0.2),
                       row("gone", np.nan, np.nan, np.nan, status="collapsed"),
                       row("new", np.nan, np.nan, np.nan, status="few_points")])
    result = race(df, task="math", margin=0.02, min_fraction=0.3)
    assert decisions(result) == {"best": "keep", "low": "keep", "gone": "stop", "new": "keep"}
    reasons = {d["run"]: d["reason"] for d in result["decisions"]}
    assert "min_fraction" in reasons["low"] and "too few points" in reasons["new"]
    assert decisions(race(df, task="math", min_fraction=0.1))["low"] == "stop"


def test_seed_groups_tie_within_the_seed_spread():
    rows = [row("x_s0", 0.62, 0.61, 0.63), row("x_s1", 0.54, 0.53, 0.55),  # mean 0.58,
            row("y_s0", 0.535, 0.53, 0.54), row("y_s1", 0.535, 0.53, 0.54)]  # spread 0.08
    df = pd.DataFrame(rows)
    groups = seed_groups(df["run"], r"_s[0-9]+$")
    assert groups == {"x_s0": "x", "x_s1": "x", "y_s0": "y", "y_s1": "y"}
    result = race(df, task="math", groups=groups)
    # y: A_hi 0.54 < x's A_lo 0.57 - 0.02, but the gap 0.045 <= x's seed spread 0.08: a tie
    assert decisions(result) == dict.fromkeys(groups, "keep")
    assert result["groups"]["x"]["spread"] == pytest.approx(0.08)
    assert "tie with the best" in result["decisions"][2]["reason"]
    # judged run by run, the same numbers stop x_s1 and both y seeds
    alone = decisions(race(df, task="math"))
    assert alone == {"x_s0": "keep", "x_s1": "stop", "y_s0": "stop", "y_s1": "stop"}
    # seeds that agree (spread 0): the gap 0.065 is not a tie -> both y seeds stop
    agree = pd.DataFrame([row("x_s0", 0.60, 0.59, 0.61), row("x_s1", 0.60, 0.59, 0.61),
                          *rows[2:]])
    result = race(agree, task="math", groups=groups)
    assert decisions(result) == {"x_s0": "keep", "x_s1": "keep", "y_s0": "stop", "y_s1": "stop"}
    assert result["compute_saved"] == 10.0


def test_race_cli_writes_decisions(tmp_path):
    paths = []
    for name, a in (("a", 0.6), ("b", 0.5)):
        paths.append(tmp_path / f"{name}.parquet")
        write_predictions(paths[-1], [row(name, a, a - 0.01, a + 0.01),
                                      row(name, a, a - 0.01, a + 0.01, form="power_law")])
    out = tmp_path / "decisions.json"
    assert main(["race", "--predictions", *map(str, paths), "--task", "math", "--margin",
                 "0.02", "--min-fraction", "0.3", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert decisions(result) == {"a": "keep", "b": "stop"}
    assert main(["race", "--predictions", *map(str, paths), "--task", "code",
                 "--out", str(out)]) == 2  # no code predictions: a clear error


def test_backtest_table_and_summary_hand_set(tmp_path):
    preds = pd.DataFrame([
        row("r", 0.7, 0.6, 0.8, fraction=0.25, pred=0.50),  # interval 0.49-0.51
        row("r", 0.7, 0.6, 0.8, fraction=0.5, pred=0.595),  # 0.585-0.605 covers 0.6
        row("r", 1.0, 0.8, 1.0, fraction=0.25, pred=0.70, form="power_law"),
        row("r", 1.0, 0.8, 1.0, fraction=0.5, pred=0.64, form="power_law"),
        row("unfinished", 0.7, 0.6, 0.8, fraction=0.5),
        row("r", np.nan, np.nan, np.nan, fraction=0.1, pred=np.nan, status="few_points"),
    ])
    finals = pd.DataFrame({"run": ["r"], "task": ["math"], "observed_final": [0.6]})
    table = backtest_table(preds, finals)
    assert len(table) == 4 and set(table["run"]) == {"r"}
    sig = table[table["form"] == "sigmoid"]
    np.testing.assert_allclose(sig["error"], [-0.10, -0.005], atol=1e-12)
    assert sig["covered"].tolist() == [False, True]
    summary = backtest_summary(table, bins=(0, 0.25, 0.5, 1.0))
    got = {(r.form, r.fraction_bin): (r.n, r.median_abs_error, r.coverage)
           for r in summary.itertuples()}
    assert got[("sigmoid", "(-0.001, 0.25]")] == pytest.approx((1, 0.10, 0.0))
    assert got[("power_law", "(0.25, 0.5]")] == pytest.approx((1, 0.04, 0.0))
    plot_backtest(table, tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_report_adds_the_backtest_section_when_predictions_exist(tmp_path):
    c = np.r_[0.0, np.linspace(100, 6000, 24)]
    y = np.r_[0.3, sigmoid(c[1:], 0.6, 2.0, 2000.0, 0.3)]
    y[1:] += np.random.default_rng(0).normal(0, 0.005, 24)
    record = fit_curve(c, y, FitConfig(bootstrap_n=0)).to_dict(
        group={}, meta={"run": "r", "task": "math"})
    rows = []
    for k in (8, 12, 18):
        preds = predict_final(c[:k + 1], y[:k + 1], c[-1], FitConfig(bootstrap_n=10), prior=None)
        rows += prediction_rows("r", "math", k, c[k], c[-1], preds)
    paths = write_report([record], tmp_path / "rep", by=("run",),
                         predictions=pd.DataFrame(rows))
    text = paths["markdown"].read_text()
    # chunks 8, 12, 18 sit at compute fractions 0.32, 0.49, 0.74 (c_k = 100 + (k-1) 5900/23)
    assert "## Prediction backtest" in text and "| sigmoid | (0.25, 0.5] | 2 |" in text
    assert "| ratio | smoothed median | smoothed p90 | ratio to smoothed |" in text
    assert "Sigmoid forecasts: the plain least-squares fit (no curve prior)." in text
    assert "| power_law | (0.5, 0.75] | 1 |" in text
    assert paths["backtest"].read_bytes()[:4] == b"\x89PNG"
    assert "backtest" not in write_report([record], tmp_path / "rep2", by=("run",))


def test_observed_fallback_without_an_interval_of_a():
    """No run has an interval of A (sparse evals): a run past min_fraction is stopped only when
    its pass rate fell clearly below its start. z = 1.645 (one-sided, confidence 0.95).
    broken: gain -0.080 + 1.645 x 0.020 = -0.0471 < -0.02: stop; dipped: -0.030 + 1.645 x
    0.015 = -0.0053 >= -0.02: keep; flat (gain 0) and behind (below learn, above its start):
    keep, whatever the others do (the present does not bound A); early: under min_fraction."""
    def sparse(run, a, status, gain, se, fraction=0.5):
        return {**row(run, a, np.nan, np.nan, fraction=fraction, status="not_converged"),
                "interval_status": status, "confidence": 0.95, "recent_reward": 0.125 + gain,
                "recent_gain": gain, "recent_gain_se": se}

    df = pd.DataFrame([sparse("learn", 0.30, "no_backtest", 0.150, 0.020),
                       sparse("behind", 0.18, "no_backtest", 0.020, 0.020),
                       sparse("flat", 0.13, "before_c_mid", 0.0, 0.015),
                       sparse("dipped", 0.12, "before_c_mid", -0.030, 0.015),
                       sparse("broken", 0.05, "no_backtest", -0.080, 0.020),
                       sparse("early", 0.05, "no_backtest", -0.080, 0.020, fraction=0.2)])
    result = race(df, task="math", margin=0.02, min_fraction=0.3)
    assert decisions(result) == {"learn": "keep", "behind": "keep", "flat": "keep",
                                 "dipped": "keep", "broken": "stop", "early": "keep"}
    reasons = {d["run"]: d["reason"] for d in result["decisions"]}
    assert "upper bound -0.047 (+ 1.64 x se 0.020) < -0.02" in reasons["broken"]
    assert "no_backtest" in reasons["broken"] and "not below its start" in reasons["dipped"]
    assert "min_fraction" in reasons["early"]
    # the same data without the fallback: no interval, no decision
    assert set(decisions(race(df, task="math", observed=False)).values()) == {"keep"}


def test_observed_rule_stops_a_falling_run_whose_interval_of_a_is_wide():
    """With the curve prior a few falling points still get a sigmoid and a wide interval of A
    (the racing workflow test's broken run: A 0.41 [0.04, 0.78] against the learning run's
    0.43 [0.05, 0.80]). The A rule cannot separate them; the observed rule stops the run that
    fell below its start: -0.084 + 1.645 x 0.016 = -0.0577 < -0.02. The best, rising, stays;
    a run whose A rule already stops it keeps the A reason."""
    def wide(run, a, lo, hi, gain, se):
        return {**row(run, a, lo, hi), "interval_status": "ok", "confidence": 0.95,
                "recent_reward": 0.3 + gain, "recent_gain": gain, "recent_gain_se": se}

    df = pd.DataFrame([wide("learn", 0.43, 0.05, 0.80, 0.010, 0.016),
                       wide("broken", 0.42, 0.04, 0.78, -0.084, 0.016),
                       wide("low", 0.10, 0.05, 0.12, -0.084, 0.016)])  # 0.12 >= 0.05 - 0.02
    result = race(df, task="math", margin=0.02, min_fraction=0.3)
    assert decisions(result) == {"learn": "keep", "broken": "stop", "low": "stop"}
    reasons = {d["run"]: d["reason"] for d in result["decisions"]}
    assert reasons["broken"].startswith("observed: recent pass rate - R0 = -0.084, upper bound "
                                        "-0.058 (+ 1.64 x se 0.016) < -0.02")
    assert "(by A alone: tie with the best" in reasons["broken"]
    assert decisions(race(df, task="math", observed=False)) == {
        "learn": "keep", "broken": "keep", "low": "keep"}


def test_recent_level_hand_set():
    """Latest half of compute 60: the evals at 30..60, mean (0.20 + 0.22 + 0.24 + 0.25) / 4 =
    0.2275; binomial se with 192 samples each: sqrt(4 x 0.2275 x 0.7725 / 192) / 4 = 0.01513;
    without n: the points' noise sd / sqrt(4)."""
    from scalerl.fit.curves.noise import noise_sd
    from scalerl.fit.forecast.predict import recent_level

    c, y = np.arange(1, 7) * 10.0, np.array([0.15, 0.17, 0.20, 0.22, 0.24, 0.25])
    mean, se = recent_level(c, y, np.full(6, 192))
    assert mean == pytest.approx(0.2275) and se == pytest.approx(0.015127, abs=1e-6)
    assert recent_level(c, y)[1] == pytest.approx(noise_sd(y) / 2)
    assert np.isnan(recent_level(c[:2], y[:2])[1])
    # gain over R0 = 0.125 (192 samples: se sqrt(0.125 x 0.875 / 192) = 0.023867)
    p = predict_final(np.r_[0.0, c], np.r_[0.125, y], 120.0, n_samples=np.full(7, 192),
                      prior=None)[0]
    assert p.recent_reward == pytest.approx(mean)
    assert p.recent_gain == pytest.approx(0.1025)
    assert p.recent_gain_se == pytest.approx(np.hypot(0.015127, 0.023867), abs=1e-6)
