"""The curve prior in the commands: `scalerl predict` uses the shipped prior by default and says
so, `--prior none|PATH`, `--joint` fits a sweep's runs together (`predict_sweep`,
`backtest_sweep`), and `scalerl prior` rebuilds a prior from a corpus folder."""

import json

import numpy as np
import pandas as pd
import pytest

from scalerl.cli import main
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.forecast.backtest import backtest_curve, backtest_sweep
from scalerl.fit.forecast.joint import forecast_sweep
from scalerl.fit.forecast.predict import predict_final, predict_sweep, smoothed_level
from scalerl.fit.forecast.prior import CurvePrior, shipped_prior

STEPS = np.arange(0, 401, 20)
PRIOR = CurvePrior(mean=(0.3, -1.2, 0.3), between_sd=(0.3, 0.5, 0.4),
                   within_sd=(0.05, 0.1, 0.1), noise_sd=0.01, noise_dof=5.0, kappa=0.03,
                   calibrated_at=0.95, provenance={"sources": {"a": 1, "b": 1}, "built": "x"},
                   kappa_gain=0.2)


def accuracy(a, c_mid, seed, steps=STEPS):
    y = sigmoid(np.maximum(steps, 1), a, 2.0, c_mid, 0.2) \
        + np.random.default_rng(seed).normal(0, 0.006, steps.size)
    y[steps == 0] = 0.2
    return np.clip(y, 0, 1)


def test_smoothed_level_is_the_mean_of_the_last_three():
    assert smoothed_level([0.1, 0.2, 0.3, 0.7]) == pytest.approx(0.4)
    assert smoothed_level([0.5, 0.7]) == pytest.approx(0.6)
    assert np.isnan(smoothed_level([]))


def test_predict_final_uses_the_shipped_prior_by_default():
    y = accuracy(0.6, 120.0, 0)
    k = STEPS <= 160
    (p,) = predict_final(STEPS[k], y[k], 400.0, FitConfig(bootstrap_n=10), forms=("sigmoid",))
    assert p.prior == shipped_prior().summary() and "public sources" in p.prior
    assert p.interval_status == "ok" and p.backtest_n == 0  # the prior's intervals
    (plain,) = predict_final(STEPS[k], y[k], 400.0, FitConfig(bootstrap_n=10),
                             forms=("sigmoid",), prior=None)
    assert plain.prior == "none" and plain.predicted_final != p.predicted_final
    # rewards outside [0, 1]: the plain fit even with the prior on
    (big,) = predict_final(STEPS[k], 5 * y[k], 400.0, FitConfig(bootstrap_n=0),
                           forms=("sigmoid",))
    assert big.prior == "none"


def test_predict_says_which_prior_and_none_and_a_file(tmp_path, capsys):
    path = tmp_path / "acc.csv"
    pd.DataFrame({"step": STEPS[:9], "acc": accuracy(0.6, 120.0, 0)[:9]}).to_csv(path,
                                                                             index=False)
    out = tmp_path / "p.parquet"
    assert main(["predict", str(path), "--final-step", "400", "--bootstrap", "0",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"curve prior shipped with scalerl (curve_prior.json): {shipped_prior().summary()}" \
        in err and "(--prior none: the plain fit)" in err
    rows = pd.read_parquet(out)
    sig = rows[rows["form"] == "sigmoid"].iloc[0]
    assert sig["prior"] == shipped_prior().summary()
    assert rows[rows["form"] == "power_law"]["prior"].tolist() == ["none"]
    assert sig["smoothed_reward"] == pytest.approx(smoothed_level(accuracy(0.6, 120.0, 0)[:9]))
    assert main(["predict", str(path), "--final-step", "400", "--bootstrap", "0",
                 "--out", str(out), "--prior", "none"]) == 0
    assert "no curve prior (--prior none)" in capsys.readouterr().err
    assert pd.read_parquet(out)["prior"].tolist() == ["none", "none"]
    mine = tmp_path / "mine.json"
    PRIOR.save(mine)
    assert main(["predict", str(path), "--final-step", "400", "--bootstrap", "0",
                 "--out", str(out), "--prior", str(mine)]) == 0
    assert f"curve prior {mine}: 2 public sources, built x" in capsys.readouterr().err
    assert pd.read_parquet(out).set_index("form").loc["sigmoid", "prior"] == PRIOR.summary()
    assert main(["predict", str(path), "--final-step", "400", "--prior",
                 str(tmp_path / "nope.json")]) == 2
    assert "--prior" in (e := capsys.readouterr().err) and "scalerl prior --out PATH" in e


def sweep_table(tmp_path, upto=(400, 400, 400, 100)):
    """One recipe, four runs along an axis (same shape, different ceilings), the last one
    started late."""
    frames = [pd.DataFrame({"step": STEPS[STEPS <= u], "acc": accuracy(a, 120.0, i)[STEPS <= u],
                            "run": f"r{i}", "recipe": "cispo"})
              for i, (a, u) in enumerate(zip((0.55, 0.6, 0.65, 0.7), upto))]
    path = tmp_path / "sweep.csv"
    pd.concat(frames).to_csv(path, index=False)
    return path


def test_predict_sweep_is_the_joint_fit_of_its_runs():
    ys = [accuracy(a, 120.0, i) for i, a in enumerate((0.55, 0.6, 0.7))]
    cut = [STEPS <= 400, STEPS <= 400, STEPS <= 100]
    curves = [(STEPS[k], y[k]) for y, k in zip(ys, cut)]
    preds = predict_sweep(curves, [400.0] * 3, FitConfig(bootstrap_n=10), prior=PRIOR)
    fcs = forecast_sweep(dict(enumerate(curves)), dict.fromkeys(range(3), 400.0), PRIOR)
    for i, (sig, pl) in enumerate(preds):
        assert sig.form == "sigmoid" and pl.form == "power_law"
        assert sig.predicted_final == pytest.approx(fcs[i].predicted, rel=1e-12)
    alone = predict_final(*curves[2], 400.0, FitConfig(bootstrap_n=10), prior=PRIOR)[0]
    assert alone.predicted_final != preds[2][0].predicted_final
    # no prior: each run alone, as predict_final
    plain = predict_sweep(curves, [400.0] * 3, FitConfig(bootstrap_n=0), prior=None)
    assert plain[2][0].predicted_final == pytest.approx(
        predict_final(*curves[2], 400.0, FitConfig(bootstrap_n=0), prior=None)[0]
        .predicted_final)


def test_predict_joint_over_a_sweep(tmp_path, capsys):
    path = sweep_table(tmp_path)
    out = tmp_path / "p.parquet"
    mine = tmp_path / "mine.json"
    PRIOR.save(mine)
    assert main(["predict", str(path), "--group-by", "run,recipe", "--final-step", "400",
                 "--bootstrap", "0", "--prior", str(mine), "--joint", "--joint-by", "recipe",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "fitted jointly (one sweep, task acc, recipe cispo): " in err
    rows = pd.read_parquet(out)
    sig = rows[rows["form"] == "sigmoid"].sort_values("run")
    assert len(sig) == 4 and sig["compute_fraction"].tolist() == [1.0, 1.0, 1.0, 0.25]
    data = pd.read_csv(path)
    curves = [(g["step"].to_numpy(float), g["acc"].to_numpy(float))
              for _, g in data.groupby("run", sort=True)]
    expected = predict_sweep(curves, [400.0] * 4, FitConfig(bootstrap_n=0), prior=PRIOR)
    np.testing.assert_allclose(sig["predicted_final"], [p[0].predicted_final for p in expected],
                               rtol=1e-9)
    # what --joint cannot do, and a column the inputs lack
    assert main(["predict", str(path), "--group-by", "run,recipe", "--final-step", "400",
                 "--joint", "--all-chunks"]) == 2
    assert "--backtest --joint" in capsys.readouterr().err
    assert main(["predict", str(path), "--group-by", "run", "--final-step", "400", "--joint",
                 "--joint-by", "lr"]) == 2
    assert "no column lr to tell its sweep" in capsys.readouterr().err
    assert main(["predict", str(path), "--final-step", "400", "--joint", "--prior",
                 "none", "--bootstrap", "0"]) == 0
    assert "--joint without a curve prior (--prior none): each run alone" in \
        capsys.readouterr().err


def test_backtest_sweep_cuts_every_run_at_the_same_fraction(tmp_path, capsys):
    ys = [accuracy(a, 120.0, i) for i, a in enumerate((0.55, 0.6, 0.7))]
    curves = [(STEPS, y, f"r{i}", "acc") for i, y in enumerate(ys)]
    rows, finals = backtest_sweep(curves, config=FitConfig(bootstrap_n=0), prior=PRIOR)
    df = pd.DataFrame(rows)
    sig = df[df["form"] == "sigmoid"]
    # 25 / 50 / 75 % of 400: points to 100, 200, 300 -> chunks 5, 10, 15 for every run
    assert sorted(set(sig["chunk"])) == [5, 10, 15] and len(sig) == 9
    assert [f["observed_final"] for f in finals] == [float(y[-1]) for y in ys]
    single, _ = backtest_curve(STEPS, ys[0], run="r0", task="acc",
                               config=FitConfig(bootstrap_n=0), prior=PRIOR)
    pl = df[(df["form"] == "power_law") & (df["run"] == "r0")]
    # the power law never pools: the same as backtesting the run alone
    np.testing.assert_allclose(pl["predicted_final"],
                               [r["predicted_final"] for r in single if r["form"] == "power_law"])
    path = sweep_table(tmp_path, upto=(400, 400, 400, 400))
    assert main(["predict", str(path), "--group-by", "run", "--backtest", "--joint",
                 "--bootstrap", "0"]) == 0
    out = capsys.readouterr()
    assert "fitted jointly (one sweep, task acc): " in out.err
    assert "| sigmoid | (0.25, 0.5] | 4 |" in out.out


def test_scalerl_prior_rebuilds_from_a_corpus_folder(tmp_path, capsys):
    """Three sources of two runs each (sigmoids about one shape): the command writes a prior
    whose provenance names them, and predict takes it."""
    rng = np.random.default_rng(0)
    rows, steps = [], np.arange(0, 161, 10.0)
    for s in range(3):
        for r in range(2):
            a, c_mid = 0.5 + 0.05 * s + 0.02 * r, 40.0 + 10 * s
            y = sigmoid(np.maximum(steps, 1), a, 1.5, c_mid, 0.2) + rng.normal(0, 0.01,
                                                                                steps.size)
            y[0] = 0.2
            name = f"s{s}r{r}.csv"
            pd.DataFrame({"step": steps, "value": np.clip(y, 0, 1)}).to_csv(tmp_path / name,
                                                                             index=False)
            rows.append({"file": name, "kind": "eval", "model": "m", "source": f"src{s}",
                         "params": "1e9", "task": "math"})
    pd.DataFrame(rows).to_csv(tmp_path / "sources.csv", index=False)
    out = tmp_path / "prior.json"
    assert main(["prior", "--curves", str(tmp_path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "prior: 6 eval curves from 3 sources" in err and f"prior: wrote {out}" in err
    prior = CurvePrior.load(out)
    assert prior.provenance["sources"] == {"src0": 2, "src1": 2, "src2": 2}
    assert prior.provenance["estimate"]["n_curves"] == 6
    cal = prior.provenance["estimate"]["calibration"]
    assert cal["weighted_coverage"] >= 0.95 and cal["kappa"] == prior.kappa
    assert cal["kappa_gain"] == prior.kappa_gain
    assert main(["prior", "--curves", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "no sources.csv" in capsys.readouterr().err
    assert json.loads(out.read_text())["version"] == 1  # the failed call kept the file


def test_predict_eval_with_sweep_mates_fits_them_jointly(write_eval, tmp_path, capsys):
    """A run evaluated to chunk 5 beside two sweep-mates evaluated to chunk 8 (different
    ceilings, one shape): at each chunk k the run is fitted jointly with the mates' evals up to
    k (`predict_sweep`), and only its own rows are written."""
    own = write_eval("r1", chunks=6, a=0.5, hours_per_chunk=0.5)
    mates = write_eval("r2", chunks=9, a=0.45, hours_per_chunk=0.5) \
        + write_eval("r3", chunks=9, a=0.55, hours_per_chunk=0.5)
    out = tmp_path / "p.parquet"
    mine = tmp_path / "mine.json"
    PRIOR.save(mine)
    assert main(["predict", "--eval", *map(str, own), "--sweep-eval", *map(str, mates),
                 "--final-step", "80", "--compute-col", "compute_device_hours",
                 "--all-chunks", "--bootstrap", "0", "--prior", str(mine), "--out",
                 str(out)]) == 0
    assert "fitted jointly with its sweep-mates (--sweep-eval): r2, r3" in \
        capsys.readouterr().err
    rows = pd.read_parquet(out)
    assert set(rows["run"]) == {"r1"} and sorted(set(rows["chunk"])) == list(range(6))
    sig = rows[(rows["form"] == "sigmoid") & (rows["chunk"] == 5)].iloc[0]
    hours = np.arange(6) * 0.5  # chunk k: 0.5 k hours at step 10 k; final step 80: 4 hours
    y = []  # the fixture's pass rates: round(p x 200) / 200 of 50 prompts x 4 samples
    for a in (0.5, 0.45, 0.55):
        p = sigmoid(np.maximum(hours, 1e-9), a, 1.8, 3.0, 0.1)
        p[0] = 0.1
        y.append(np.round(p * 200) / 200)
    n = [np.full(6, 200.0)] * 3
    expected = predict_sweep([(hours, arr) for arr in y], [4.0] * 3, FitConfig(bootstrap_n=0),
                             n_samples=n, prior=PRIOR)[0][0]
    assert sig["predicted_final"] == pytest.approx(expected.predicted_final, rel=1e-9)
    alone = predict_final(hours, y[0], 4.0, FitConfig(bootstrap_n=0), n_samples=n[0],
                          forms=("sigmoid",), prior=PRIOR)[0]
    assert alone.predicted_final != pytest.approx(expected.predicted_final, rel=1e-6)
