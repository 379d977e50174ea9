"""Predictions of the final pass rate and A from part of a run; predictions.parquet; the CLI."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from scalerl.cli import main
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.curves.synthetic import TABLE1, TABLE1_R0
from scalerl.fit.forecast.predict import (
    PREDICTIONS_SCHEMA,
    merge_predictions,
    predict_final,
    prediction_rows,
    write_predictions,
)

N_SAMPLES = 800  # 200 prompts x 4 samples, the default eval


def binomial_curve(row=0, seed=0, n=N_SAMPLES, n_points=30, budget_mult=6.0):
    """Table 1 run `row`: compute 0 (base) + n_points evals up to budget_mult x C_mid,
    pass rates drawn Binomial(n, p) / n."""
    _, c_mid, b, a = TABLE1[row]
    c = np.r_[0.0, np.arange(1, n_points + 1) / n_points * budget_mult * c_mid]
    truth = sigmoid(c, a, b, c_mid, TABLE1_R0)
    truth[0] = TABLE1_R0
    y = np.random.default_rng([seed, row]).binomial(n, truth) / n
    return c, y, truth, a


def test_nearly_noise_free_curve_recovers_the_parameters_within_the_interval():
    c, y, truth, a = binomial_curve(n=10_000_000)
    k = c <= 0.75 * c[-1] + 1e-9
    preds = predict_final(c[k], y[k], c[-1], FitConfig(bootstrap_n=40), forms=("sigmoid",),
                          prior=None)
    (p,) = preds
    assert p.form == "sigmoid" and p.status == "ok" and p.reached_c_mid
    assert p.n_points == int(k.sum()) - 1  # the compute-0 point is R0, not fitted
    torch.testing.assert_close(torch.tensor([p.A, p.predicted_final]),
                               torch.tensor([a, truth[-1]], dtype=torch.float32),
                               rtol=0, atol=2e-3)
    assert p.A_lo <= a <= p.A_hi and p.predicted_final_lo <= truth[-1] <= p.predicted_final_hi
    assert p.A_hi - p.A_lo < 0.01  # noise-free: a tight interval


def test_intervals_cover_the_truth_on_noisy_binomial_curves():
    """The block-bootstrap curve interval alone (no calibration: at half of a 30-eval run the
    backtest has too few prefixes, tests/fit/test_intervals.py covers that path)."""
    hits_a = hits_final = 0
    errors = []
    cfg = FitConfig(bootstrap_n=40, calibrate_intervals=False)
    for seed in range(16):
        c, y, truth, a = binomial_curve(seed=seed)
        k = c <= 0.5 * c[-1] + 1e-9
        (p,) = predict_final(c[k], y[k], c[-1], cfg, forms=("sigmoid",), prior=None)
        hits_a += p.A_lo <= a <= p.A_hi
        hits_final += p.predicted_final_lo <= truth[-1] <= p.predicted_final_hi
        errors.append(p.predicted_final - truth[-1])
        assert p.predicted_final_lo < p.predicted_final_hi and p.A_lo < p.A_hi
    # nominal 95 %; with 40 replicates and half the run, >= 11 of 16 (69 %)
    assert hits_a >= 11 and hits_final >= 11, (hits_a, hits_final)
    assert np.median(np.abs(errors)) < 0.02


def test_before_c_mid_the_flag_is_false_and_few_points_give_nan():
    c, y, truth, a = binomial_curve(row=1, n=100_000)  # C_mid = 11272, budget 6 x C_mid
    k = c <= 0.15 * c[-1] + 1e-9  # base + 4 points, up to 0.8 C_mid
    preds = predict_final(c[k], y[k], c[-1], FitConfig(bootstrap_n=20), prior=None)
    assert [p.form for p in preds] == ["sigmoid", "power_law"]
    assert not any(p.reached_c_mid for p in preds)
    assert any("not reached C_mid" in w for w in preds[0].warnings)
    few = predict_final(c[:3], y[:3], c[-1], FitConfig(bootstrap_n=20), prior=None)
    assert all(p.status == "few_points" and np.isnan(p.A) for p in few)
    with pytest.raises(ValueError, match="below the largest evaluated compute"):
        predict_final(c, y, c[5], FitConfig(bootstrap_n=0), prior=None)


def test_collapsed_run_is_flagged():
    c = np.r_[0.0, np.arange(1, 21) * 100.0]
    y = np.r_[0.3, sigmoid(c[1:13], 0.6, 2.0, 500.0, 0.3), np.linspace(0.55, 0.35, 8)]
    preds = predict_final(c, y, 3000.0, FitConfig(bootstrap_n=0), prior=None)
    assert all(p.status == "collapsed" and np.isnan(p.A) for p in preds)
    assert "peak" in preds[0].warnings[0]


def test_merge_replaces_the_chunk_and_keeps_the_rest(tmp_path):
    c, y, _, _ = binomial_curve()
    p1 = predict_final(c[:10], y[:10], c[-1], FitConfig(bootstrap_n=10), prior=None)
    rows = prediction_rows("r", "math", 9, c[9], c[-1], p1)
    assert rows[0]["compute_fraction"] == pytest.approx(9 / 30)
    merged = merge_predictions(None, rows)
    again = merge_predictions(merged, rows)  # idempotent
    pd.testing.assert_frame_equal(merged, again)
    p2 = predict_final(c[:12], y[:12], c[-1], FitConfig(bootstrap_n=10), prior=None)
    more = merge_predictions(again, prediction_rows("r", "math", 11, c[11], c[-1], p2))
    assert more["chunk"].tolist() == [9, 9, 11, 11]
    write_predictions(tmp_path / "p.parquet", more)
    assert pq.read_schema(tmp_path / "p.parquet").equals(PREDICTIONS_SCHEMA,
                                                         check_metadata=False)


def test_predict_cli_latest_chunk_idempotent_and_all_chunks(write_eval, tmp_path):
    paths = write_eval("r1", chunks=8)  # chunk k: k device-hours, step 10 k
    out = tmp_path / "pred.parquet"
    args = ["predict", "--eval", *map(str, paths[:7]), "--final-compute", "11", "--out",
            str(out), "--bootstrap", "10"]
    assert main(args) == 0
    first = pd.read_parquet(out)
    assert first["chunk"].tolist() == [6, 6] and set(first["form"]) == {"sigmoid", "power_law"}
    assert first["compute_fraction"].iloc[0] == pytest.approx(6 / 11)
    assert main(args) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), first)  # re-run: same rows
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text("run: r1\nchunk_steps: [10, 10, 10, 10, 10, 10, 10, 10, 10, 10]\n")
    assert main(["predict", "--eval", *map(str, paths), "--run-config", str(run_yaml),
                 "--out", str(out), "--bootstrap", "10", "--weighting", "binomial"]) == 0
    df = pd.read_parquet(out)
    assert df["chunk"].tolist() == [6, 6, 7, 7]
    # latest chunk 7: 7 h at step 70 of 100 -> final 10 h, fraction 0.7
    assert df["compute_fraction"].iloc[-1] == pytest.approx(0.7)
    assert main(["predict", "--eval", *map(str, paths), "--final-compute", "11", "--out",
                 str(out), "--bootstrap", "0", "--all-chunks"]) == 0
    df = pd.read_parquet(out)
    assert sorted(set(df["chunk"])) == list(range(8))  # chunks 6 and 7 kept from before
    assert df.loc[df["chunk"] == 7, "compute_fraction"].iloc[0] == pytest.approx(0.7)
    assert (df.loc[df["chunk"] <= 3, "status"] == "few_points").all()


def test_predict_cli_errors(write_eval, tmp_path, capsys):
    paths = write_eval("r1", chunks=5) + write_eval("r2", chunks=5)
    assert main(["predict", "--eval", *map(str, paths), "--final-compute", "9",
                 "--out", str(tmp_path / "p.parquet")]) == 2
    assert "takes the evals of one run" in capsys.readouterr().err
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text("run: r1\nsteps_per_chunk: 10\n")
    assert main(["predict", "--eval", *map(str, paths[:5]), "--run-config", str(run_yaml),
                 "--out", str(tmp_path / "p.parquet")]) == 2
    assert "pass --chunks N" in capsys.readouterr().err
