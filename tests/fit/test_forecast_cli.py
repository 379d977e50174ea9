"""`scalerl predict` / `race` over any run's logs, several runs per call; skill against the
persistence (last-value) forecast in backtests, checked against hand-derived values."""

import json

import numpy as np
import pandas as pd
import pytest

from scalerl.cli import main
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.forecast.backtest import backtest_curve, backtest_summary, backtest_table

STEPS = np.arange(0, 401, 20)


def accuracy(a, seed, steps=STEPS):
    y = sigmoid(np.maximum(steps, 1), a, 2.0, 120.0, 0.2) \
        + np.random.default_rng(seed).normal(0, 0.008, steps.size)
    y[steps == 0] = 0.2
    return y


def write_tb(root, runs, upto):
    from torch.utils.tensorboard import SummaryWriter

    for i, (run, a) in enumerate(runs.items()):
        with SummaryWriter(str(root / run)) as w:
            for step, v in zip(STEPS, accuracy(a, i)):
                if step <= upto:
                    w.add_scalar("val/acc", v, int(step))


def test_predict_final_step_on_another_compute_axis_and_group_by(tmp_path, capsys):
    path = tmp_path / "history.csv"  # a W&B history: _step, _runtime (2 s per step), metric
    pd.DataFrame({"_step": STEPS, "_runtime": STEPS * 2.0, "eval/acc": accuracy(0.6, 0)}
                 ).to_csv(path, index=False)
    out = tmp_path / "p.parquet"
    assert main(["predict", str(path), "--compute-col", "_runtime", "--final-step", "800",
                 "--bootstrap", "0", "--out", str(out)]) == 0
    df = pd.read_parquet(out)
    # latest: step 400 at 800 s -> final 800 s x 800 / 400 = 1600 s, half of it done
    assert df["compute_fraction"].tolist() == [0.5, 0.5] and df["run"].iloc[0] == "history"
    assert df["task"].iloc[0] == "eval/acc" and df["chunk"].iloc[0] == STEPS.size - 1
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:4] == ["run", "progress", "latest", "predicted"]
    assert "history  50%" in table
    # several runs in one table: --group-by; --all-chunks predicts at every point
    seeds = tmp_path / "seeds.csv"
    pd.concat([pd.DataFrame({"step": STEPS, "acc": accuracy(0.6, s), "seed": s})
               for s in range(2)]).to_csv(seeds, index=False)
    assert main(["predict", str(seeds), "--group-by", "seed", "--final-step", "400",
                 "--bootstrap", "0", "--out", str(out), "--all-chunks"]) == 0
    df = pd.read_parquet(out)
    runs = sorted(set(df["run"]) - {"history"})
    assert runs == ["seeds/seed=0", "seeds/seed=1"]
    one = df[(df["run"] == "seeds/seed=0") & (df["form"] == "sigmoid")]
    assert one["chunk"].tolist() == list(range(STEPS.size))
    np.testing.assert_allclose(one["latest_reward"], accuracy(0.6, 0))
    assert (one["status"].iloc[:4] == "few_points").all()


def test_predict_errors(tmp_path, capsys):
    path = tmp_path / "c.csv"
    pd.DataFrame({"step": STEPS, "acc": accuracy(0.6, 0)}).to_csv(path, index=False)
    assert main(["predict", str(path)]) == 2
    assert "--final-step N, --final-compute X" in capsys.readouterr().err
    assert main(["predict", "--final-step", "9"]) == 2
    assert "one of the two" in capsys.readouterr().err
    hours = tmp_path / "hours.csv"  # a compute axis but no step column
    pd.DataFrame({"compute": STEPS / 10, "acc": accuracy(0.6, 0)}).to_csv(hours, index=False)
    assert main(["predict", str(hours), "--final-step", "800"]) == 2
    assert "--final-step needs a step column (step, _step, global_step" in \
        capsys.readouterr().err
    assert main(["predict", str(hours), "--final-compute", "80", "--bootstrap", "0"]) == 0


def test_race_over_logs_stops_the_clearly_worse_run(tmp_path, capsys):
    # 70 % of the steps: the calibrated A intervals (scalerl.fit.forecast.intervals) need earlier
    # prefixes that reach the horizon; at 60 % of this 20-eval run some runs have none yet
    write_tb(tmp_path / "tb", {"good": 0.70, "bad": 0.50, "close": 0.69}, upto=280)
    out = tmp_path / "decisions.json"
    assert main(["race", str(tmp_path / "tb"), "--metric", "val/acc", "--final-step", "400",
                 "--bootstrap", "40", "--out", str(out)]) == 0
    decisions = {d["run"]: d["decision"] for d in json.loads(out.read_text())["decisions"]}
    assert decisions == {"good": "keep", "close": "keep", "bad": "stop"}
    printed = capsys.readouterr().out
    assert any(line.startswith("bad") and " stop " in line for line in printed.splitlines())
    # predictions files still work; both at once is an error
    assert main(["race", str(tmp_path / "tb"), "--predictions", str(out), "--task", "x"]) == 2
    assert "one of the two" in capsys.readouterr().err


def test_backtest_persistence_hand_derived(tmp_path, capsys):
    c = np.arange(9) * 100.0
    y = np.array([0.3, 0.4, 0.5, 0.55, 0.58, 0.6, 0.61, 0.62, 0.63])
    rows, final = backtest_curve(c, y, run="r", task="acc", config=FitConfig(bootstrap_n=0))
    assert final == {"run": "r", "task": "acc", "observed_final": 0.63}
    table = backtest_table(pd.DataFrame(rows), pd.DataFrame([final]))
    # 25 %: points to compute 200 (2 fitted: few_points, no forecast); 50 %: to 400, latest
    # 0.58 -> persistence error 0.05; 75 %: to 600, latest 0.61 -> 0.02
    sig = table[table["form"] == "sigmoid"]
    assert sig["chunk"].tolist() == [4, 6]
    np.testing.assert_allclose(sig["persistence_error"], [-0.05, -0.02], atol=1e-12)
    # smoothed persistence: the mean of the last 3 evals seen, (0.5 + 0.55 + 0.58) / 3 and
    # (0.58 + 0.6 + 0.61) / 3, against 0.63
    np.testing.assert_allclose(sig["smoothed_error"], [1.63 / 3 - 0.63, 1.79 / 3 - 0.63],
                               atol=1e-12)
    # the default forecast is the curve prior's, and the rows say so
    assert sig["prior"].str.contains("public sources").all()
    summary = backtest_summary(table, bins=(0, 0.25, 0.5, 0.75, 1.0))
    half = summary[(summary["form"] == "sigmoid") & (summary["fraction_bin"] == "(0.25, 0.5]")]
    err = float(sig["abs_error"].iloc[0])
    assert half["persistence_median_abs_error"].iloc[0] == pytest.approx(0.05)
    assert half["error_ratio"].iloc[0] == pytest.approx(err / 0.05)
    assert half["smoothed_median_abs_error"].iloc[0] == pytest.approx(0.63 - 1.63 / 3)
    assert half["smoothed_ratio"].iloc[0] == pytest.approx(err / (0.63 - 1.63 / 3))
    # the same through `scalerl predict --backtest` on the log of a finished run
    path = tmp_path / "finished.csv"
    pd.DataFrame({"step": c, "acc": y}).to_csv(path, index=False)
    assert main(["predict", str(path), "--backtest", "--bootstrap", "0"]) == 0
    out = capsys.readouterr()
    text = out.out
    assert "| persistence median | persistence p90 | ratio | smoothed median | smoothed p90 " \
        "| ratio to smoothed |" in text
    line = next(x for x in text.splitlines() if x.startswith("| sigmoid | (0.25, 0.5]"))
    assert "| 0.050 | 0.050 |" in line and f"{err:.3f}" in line and "| 0.087 | 0.087 |" in line
    assert "Sigmoid forecasts fitted with the curve prior (" in text
    assert "fitted with the curve prior shipped with scalerl" in out.err


def test_backtest_without_latest_reward_has_no_skill_columns():
    preds = pd.DataFrame([{"run": "r", "task": "t", "chunk": 1, "compute": 5.0,
                           "compute_fraction": 0.5, "form": "sigmoid", "predicted_final": 0.6,
                           "predicted_final_lo": 0.5, "predicted_final_hi": 0.7, "A": 0.7,
                           "A_lo": 0.6, "A_hi": 0.8, "reached_c_mid": True, "n_points": 5,
                           "status": "ok"}])
    table = backtest_table(preds, pd.DataFrame({"run": ["r"], "task": ["t"],
                                                "observed_final": [0.62]}))
    assert np.isnan(table["persistence_abs_error"]).all()
    assert np.isnan(table["smoothed_abs_error"]).all()
    summary = backtest_summary(table)
    assert np.isnan(summary["error_ratio"]).all() and summary["median_abs_error"].iloc[0] \
        == pytest.approx(0.02)
    assert np.isnan(summary["smoothed_ratio"]).all()
