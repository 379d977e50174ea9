"""Foreign logs: a W&B history with _step / _runtime / _timestamp, a run that collapses."""

import json

import numpy as np
import pandas as pd
import pytest

from scalerl.cli import main
from scalerl.fit.curves.collapse import detect_collapse
from scalerl.fit.curves.curve import CollapseError, fit_curve
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.readers.inputs import load_groups
from scalerl.fit.report.scaling import collect_records, write_report


def test_detect_collapse_hand_set():
    c = np.arange(1.0, 10.0)
    y = np.array([0.3, 0.4, 0.5, 0.55, 0.6, 0.6, 0.5, 0.4, 0.35])
    got = detect_collapse(c, y, r0=0.2, drop_fraction=0.25)
    # 3-point means: peak (0.55 + 0.6 + 0.6) / 3 = 0.5833 at points 3..5, the raw peak is
    # point 4 (0.6, compute 5); final (0.5 + 0.4 + 0.35) / 3 = 0.4167; drop 0.1667 = 43 % of
    # the gain 0.3833; noise sd 1.4826 * 0.05 / sqrt(6) = 0.0303, 3 sd sqrt(2/3) = 0.074
    assert got["peak_index"] == 4 and got["peak_compute"] == 5.0
    assert got["peak_smoothed"] == pytest.approx(0.58333, abs=1e-5)
    assert got["final_reward"] == pytest.approx(0.41667, abs=1e-5)
    assert got["drop_fraction"] == pytest.approx(0.16667 / 0.38333, abs=1e-4)
    assert got["noise_sd"] == pytest.approx(1.4826 * 0.05 / np.sqrt(6), rel=1e-6)
    assert detect_collapse(c, y, r0=0.2, drop_fraction=0.5) is None  # 43 % < 50 %
    rising = sigmoid(c * 100, 0.6, 2.0, 300.0, 0.2) + np.random.default_rng(0).normal(0, 0.01, 9)
    assert detect_collapse(c, rising, r0=0.2, drop_fraction=0.25) is None


def _wandb_csv(path, collapse: bool):
    steps = np.arange(0, 2000)
    rng = np.random.default_rng(3)
    curve = sigmoid(np.maximum(steps, 1), 0.6, 2.0, 400.0, 0.25)
    if collapse:  # rises to ~0.58 by step 1000, then falls to ~0.3
        curve = np.where(steps > 1000, curve - (steps - 1000) / 1000 * 0.3, curve)
    logged = steps % 50 == 0
    metric = np.where(logged, curve + rng.normal(0, 0.005, steps.size), np.nan)
    metric[0] = 0.25
    pd.DataFrame({"_step": steps, "_runtime": steps * 3.0 + 1.0,
                  "_timestamp": 1.7e9 + steps * 3.0, "train/loss": rng.normal(size=steps.size),
                  "eval/accuracy": metric}).to_csv(path, index=False)


def test_wandb_wall_time_columns(tmp_path):
    path = tmp_path / "history.csv"
    _wandb_csv(path, collapse=False)
    groups, info = load_groups([path], compute_col="_timestamp")
    assert groups[0].compute[:3].tolist() == [0.0, 150.0, 300.0]  # seconds since the start
    assert np.isnan(groups[0].stderr).all()  # a point log does not say how it was measured
    groups, info = load_groups([path], compute_col="_runtime")
    assert groups[0].compute[:2].tolist() == [1.0, 151.0]
    assert load_groups([path])[1]["compute_col"] == "_step"


def test_fit_reports_a_collapsed_wandb_run(tmp_path, capsys):
    path = tmp_path / "history.csv"
    _wandb_csv(path, collapse=True)
    out = tmp_path / "fit"
    assert main(["fit", str(path), "--out", str(out), "--bootstrap", "10",
                 "--meta", "run=w1"]) == 0
    record = json.loads((out / "fit.json").read_text())
    assert record["status"] == "collapsed" and record["compute_col"] == "_step"
    assert record["collapse"]["peak_compute"] == pytest.approx(1000, abs=100)
    assert record["collapse"]["final_reward"] < 0.35
    # fitted on the rising part only: A near the true 0.6, not pulled to the fall
    assert record["A"] == pytest.approx(0.6, abs=0.03)
    assert record["points"]["status"].count("after_peak") >= 15
    assert "collapsed" in record["warnings"][0] and "COLLAPSED" in capsys.readouterr().err
    whole = fit_curve(record["points"]["compute"], record["points"]["reward"],
                      FitConfig(bootstrap_n=0, collapse_drop=None))
    assert whole.status == "ok" and whole.sigmoid.A < 0.5  # the wrong ceiling it avoids
    rows = collect_records([out])
    paths = write_report(rows, tmp_path / "rep", by=("run",))
    assert pd.read_parquet(paths["parquet"])["status"].tolist() == ["collapsed"]


def test_collapse_with_too_few_points_before_the_peak():
    c = np.arange(0.0, 12.0) * 100
    y = np.r_[0.2, 0.5, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.28, 0.27, 0.26, 0.25]
    with pytest.raises(CollapseError, match="too few to fit") as err:
        fit_curve(c, y, FitConfig(bootstrap_n=0))
    assert err.value.collapse["peak_compute"] == 200.0


def test_binomial_weighting_through_fit_cli(write_eval, tmp_path):
    paths = write_eval("r1")
    out = tmp_path / "fit"
    assert main(["fit", *map(str, paths), "--out", str(out), "--bootstrap", "10",
                 "--weighting", "binomial"]) == 0
    record = json.loads((out / "fit.json").read_text())
    assert record["weighting"] == "binomial" and record["A"] == pytest.approx(0.45, abs=0.02)
    groups, _ = load_groups(paths)
    p, n = groups[0].reward, groups[0].n_rows
    np.testing.assert_allclose(groups[0].stderr, np.sqrt(p * (1 - p) / n))
    csv = tmp_path / "points.csv"
    pd.DataFrame({"compute": np.arange(10.0), "pass_rate": np.linspace(0.1, 0.5, 10)}) \
        .to_csv(csv, index=False)
    assert main(["fit", str(csv), "--out", str(tmp_path / "f2"), "--weighting",
                 "binomial"]) == 2  # a point CSV has no sample counts: a clear error
