"""The logs other trainers write: TensorBoard event files, MLflow stores, W&B chart exports.

Each is written with its own library (torch's SummaryWriter, the MLflow client) and read back
through the input layer; the curves, fits and predictions must equal the CSV path's for the
same points (values stored as float32 by TensorBoard are written to the CSV as float32 too).
"""

import sys

import numpy as np
import pandas as pd
import pytest

from scalerl.cli import main
from scalerl.fit.curves.sigmoid import sigmoid
from scalerl.fit.readers.inputs import Inputs, load_groups
from scalerl.fit.readers.logs import TensorBoardLog
from scalerl.fit.readers.tables import InputError

STEPS = np.arange(0, 401, 20)  # [21] an eval every 20 steps
RUNS = {"lr_1e-6": 0.70, "lr_3e-6": 0.55}  # run -> A


def curve(a, seed):
    """Accuracy at STEPS: a sigmoid in steps (C_mid 120) with seeded noise, float32 values."""
    rng = np.random.default_rng(seed)
    y = sigmoid(np.maximum(STEPS, 1), a, 2.0, 120.0, 0.2) + rng.normal(0, 0.01, STEPS.size)
    y[0] = 0.2
    return y.astype(np.float32).astype(float)


def write_tensorboard(root, steps=STEPS, runs=RUNS):
    from torch.utils.tensorboard import SummaryWriter

    for i, (run, a) in enumerate(runs.items()):
        with SummaryWriter(str(root / run)) as w:
            for step, value in zip(steps, curve(a, i)[:len(steps)]):
                w.add_scalar("val-core/gsm8k/acc", value, int(step))
                w.add_scalar("train/loss", 1.0 / (1 + step), int(step))


def write_csvs(root):
    paths = []
    for i, (run, a) in enumerate(RUNS.items()):
        path = root / f"{run}.csv"
        pd.DataFrame({"step": STEPS, "val-core/gsm8k/acc": curve(a, i)}).to_csv(path,
                                                                                  index=False)
        paths.append(str(path))
    return paths


def same_groups(a, b):
    assert [g.key for g in a] == [g.key for g in b]
    for ga, gb in zip(a, b):
        np.testing.assert_array_equal(ga.compute, gb.compute)
        np.testing.assert_array_equal(ga.reward, gb.reward)
        np.testing.assert_array_equal(ga.step, gb.step)


def test_tensorboard_dir_reads_like_the_csv_and_predicts_the_same(tmp_path, capsys):
    write_tensorboard(tmp_path / "tb")
    tb, info = load_groups([tmp_path / "tb"], reward_col="val-core/gsm8k/acc")
    assert info["compute_col"] == "step" and info["group_by"] == ["run"]
    assert [g.key for g in tb] == [{"run": "lr_1e-6"}, {"run": "lr_3e-6"}]
    csv, _ = load_groups(write_csvs(tmp_path), reward_col="val-core/gsm8k/acc")
    same_groups(tb, csv)  # each CSV is one run, named after its file
    outs = []
    for name, inputs in (("tb", [str(tmp_path / "tb")]), ("csv", write_csvs(tmp_path))):
        out = tmp_path / f"{name}.parquet"
        assert main(["predict", *inputs, "--metric", "val-core/gsm8k/acc", "--final-step",
                     "800", "--bootstrap", "20", "--out", str(out)]) == 0
        outs.append(pd.read_parquet(out))
        printed = capsys.readouterr().out
        assert "lr_1e-6" in printed and "lr_3e-6" in printed
    pd.testing.assert_frame_equal(outs[0], outs[1])
    row = outs[0][(outs[0]["run"] == "lr_1e-6") & (outs[0]["form"] == "sigmoid")].iloc[0]
    assert row["task"] == "val-core/gsm8k/acc" and row["chunk"] == STEPS.size - 1
    assert row["compute_fraction"] == pytest.approx(0.5)
    assert row["latest_reward"] == pytest.approx(curve(0.70, 0)[-1])
    truth = sigmoid(800.0, 0.70, 2.0, 120.0, 0.2)
    assert abs(row["predicted_final"] - truth) < 0.03 and row["status"] == "ok"
    # the fit reads the event files too
    assert main(["fit", str(tmp_path / "tb"), "--metric", "val-core/gsm8k/acc", "--out",
                 str(tmp_path / "fit"), "--bootstrap", "0"]) == 0
    assert (tmp_path / "fit" / "run=lr_1e-6" / "fit.json").exists()


def test_tensorboard_incremental_reads_and_wall_time(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    log = TensorBoardLog(tmp_path / "run")
    w = SummaryWriter(str(tmp_path / "run"))
    for step in (0, 10, 20):
        w.add_scalar("eval/acc", step / 100, step)
    w.flush()
    first = log.read(["eval/acc"])
    assert first["step"].tolist() == [0, 10, 20] and (first["run"] == "run").all()
    assert first["wall_time"].iloc[0] == 0.0 and (first["wall_time"].diff().dropna() >= 0).all()
    groups, info = load_groups([tmp_path / "run"], compute_col="wall_time", reward_col="eval/acc")
    assert info["compute_col"] == "wall_time" and groups[0].compute[0] == 0.0
    assert groups[0].step.tolist() == [0, 10, 20]  # steps kept beside the wall time
    np.testing.assert_array_equal(groups[0].compute, first["wall_time"])
    for step in (30, 20):  # a new step, and step 20 written again (a resumed run): last wins
        w.add_scalar("eval/acc", 0.5 if step == 20 else step / 100, step)
    w.close()
    again = log.read(["eval/acc"])
    assert again["step"].tolist() == [0, 10, 20, 30]
    assert again["eval/acc"].tolist() == pytest.approx([0.0, 0.1, 0.5, 0.3])
    with pytest.raises(InputError, match=r"'nope' not found; available columns: .*eval/acc"):
        load_groups([tmp_path / "run"], reward_col="nope")


def write_mlflow(path):
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    grpo = client.create_experiment("grpo")
    other = client.create_experiment("other")
    ids = {}
    for i, (run, a) in enumerate(RUNS.items()):
        ids[run] = client.create_run(grpo, run_name=run).info.run_id
        values = curve(a, i)
        client.log_batch(ids[run], metrics=[
            Metric("val-core/gsm8k/acc", float(v), 1000 * int(s), int(s))
            for s, v in zip(STEPS, values)] + [
            Metric("compute_device_hours", float(s) / 100, 1000 * int(s), int(s))
            for s in STEPS])
    client.create_run(other, run_name="elsewhere")
    return ids


def test_mlflow_store_reads_like_the_csv(tmp_path, capsys):
    store = tmp_path / "mlflow.db"
    ids = write_mlflow(store)
    csv, _ = load_groups(write_csvs(tmp_path), reward_col="val-core/gsm8k/acc")
    ml, info = load_groups(Inputs([str(store)], experiments=["grpo"]),
                           reward_col="val-core/gsm8k/acc")
    assert info["compute_col"] == "step"
    same_groups(ml, csv)
    one, _ = load_groups(Inputs([f"sqlite:///{store}"], run_ids=[ids["lr_3e-6"]]),
                         reward_col="val-core/gsm8k/acc", compute_col="compute_device_hours")
    assert len(one) == 1 and one[0].key == {} and one[0].meta["run"] == "lr_3e-6"
    np.testing.assert_allclose(one[0].compute, STEPS / 100)
    np.testing.assert_array_equal(one[0].reward, csv[1].reward)
    with pytest.raises(InputError, match="no experiment nope; experiments: "):
        load_groups(Inputs([str(store)], experiments=["nope"]), reward_col="val-core/gsm8k/acc")
    # through the CLI: predictions equal those from the CSVs
    outs = []
    for inputs in ([str(store), "--experiment", "grpo"], write_csvs(tmp_path)):
        out = tmp_path / "p.parquet"
        out.unlink(missing_ok=True)
        assert main(["predict", *inputs, "--metric", "val-core/gsm8k/acc", "--final-step",
                     "800", "--bootstrap", "20", "--out", str(out)]) == 0
        outs.append(pd.read_parquet(out))
    pd.testing.assert_frame_equal(outs[0], outs[1])
    capsys.readouterr()
    # all experiments: the run of "other" logged nothing and is left out
    assert main(["predict", str(store), "--metric", "val-core/gsm8k/acc", "--final-step",
                 "800", "--bootstrap", "0"]) == 0
    assert "2 run(s)" in capsys.readouterr().err
    assert main(["predict", str(store), "--metric", "nope", "--final-step", "800"]) == 2
    assert ("none of its 3 run(s) logged nope; metrics logged: compute_device_hours, "
            "val-core/gsm8k/acc") in capsys.readouterr().err


def test_a_missing_package_names_the_extra(tmp_path, monkeypatch):
    write_tensorboard(tmp_path / "tb", runs={"a": 0.6})
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_file_loader",
                        None)
    with pytest.raises(InputError, match=r"needs the 'tensorboard' package.*"
                                         r"pip install 'scalerl\[tracking\]'"):
        load_groups([tmp_path / "tb"])
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    (tmp_path / "store.db").write_bytes(b"")
    with pytest.raises(InputError, match=r"needs the 'mlflow' package.*scalerl\[tracking\]"):
        load_groups([tmp_path / "store.db"])


def test_wandb_chart_export_and_run_names(tmp_path):
    # W&B "Export CSV" of a chart: Step, then <run> - <metric> with __MIN / __MAX per run
    export = tmp_path / "wandb_export.csv"
    a, b = curve(0.7, 0), curve(0.55, 1)
    b_col = np.where(STEPS <= 300, b, np.nan)  # run b stopped at step 300
    pd.DataFrame({"Step": STEPS, "lr_1e-6 - val/acc": a, "lr_1e-6 - val/acc__MIN": a,
                  "lr_1e-6 - val/acc__MAX": a, "lr_3e-6 - val/acc": b_col,
                  "lr_3e-6 - val/acc__MIN": b_col, "lr_3e-6 - val/acc__MAX": b_col}
                 ).to_csv(export, index=False)
    groups, info = load_groups([export])
    assert info["reward_col"] == "val/acc" and info["compute_col"] == "step"
    assert [g.key for g in groups] == [{"run": "lr_1e-6"}, {"run": "lr_3e-6"}]
    np.testing.assert_array_equal(groups[0].reward, a)
    assert groups[1].compute[-1] == 300
    # NAME=PATH names a run; two inputs with one name are an error naming both
    csvs = write_csvs(tmp_path)
    named, _ = load_groups([f"base={csvs[0]}", csvs[1]], reward_col="val-core/gsm8k/acc")
    assert [g.key["run"] for g in named] == ["base", "lr_3e-6"]
    (tmp_path / "x").mkdir()
    clash = tmp_path / "x" / "lr_3e-6.csv"
    clash.write_text((tmp_path / "lr_3e-6.csv").read_text())
    with pytest.raises(InputError, match="both give run 'lr_3e-6'; name them apart"):
        load_groups([csvs[1], str(clash)], reward_col="val-core/gsm8k/acc")
    # several runs in one table: --group-by picks them apart
    table = tmp_path / "seeds.csv"
    pd.concat([pd.DataFrame({"step": STEPS, "acc": curve(0.6, s), "seed": s})
               for s in range(3)]).to_csv(table, index=False)
    seeds, _ = load_groups([table], group_by=["seed"])
    assert [g.key for g in seeds] == [{"seed": 0}, {"seed": 1}, {"seed": 2}]
