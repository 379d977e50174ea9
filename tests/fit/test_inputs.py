"""Reading curves: per-point CSV/Parquet, per-sample eval Parquet, W&B-style CSV, errors."""

import numpy as np
import pandas as pd
import pytest

from scalerl.fit.readers.inputs import group_slug, load_groups
from scalerl.fit.readers.tables import InputError, read_tables


def test_point_csv_and_parquet_give_the_same_curve(point_csv, tmp_path):
    groups, info = load_groups([point_csv])
    assert info["compute_col"] == "compute" and info["reward_col"] == "pass_rate"
    assert not info["per_sample"] and len(groups) == 1 and groups[0].key == {}
    pq = tmp_path / "curve.parquet"
    pd.read_csv(point_csv).to_parquet(pq)
    again, _ = load_groups([pq])
    np.testing.assert_array_equal(groups[0].compute, again[0].compute)
    np.testing.assert_allclose(groups[0].reward, again[0].reward)
    steps, info = load_groups([point_csv], compute_col="step")
    assert info["compute_col"] == "step" and steps[0].compute[-1] == 3000


def test_per_sample_eval_is_averaged_per_compute(write_eval):
    paths = write_eval("r1") + write_eval("r2", gen_len=128)
    groups, info = load_groups(paths)  # 24 chunk files concatenated
    assert info["per_sample"] and info["reward_col"] == "correct"
    assert info["compute_col"] == "compute_device_hours" and info["group_by"] == ["run"]
    assert [g.key for g in groups] == [{"run": "r1"}, {"run": "r2"}]
    g = groups[0]
    assert g.compute.tolist() == [float(k) for k in range(12)]
    assert g.n_rows.tolist() == [200] * 12  # 50 prompts x 4 samples per chunk
    # chunk 0: the base model, round(0.10 * 200) = 20 of 200 correct -> 0.10
    # chunk 3 (C = C_mid): p = 0.10 + 0.35 / 2 = 0.275 -> 55 of 200 -> 0.275
    assert g.reward[0] == pytest.approx(0.10) and g.reward[3] == pytest.approx(0.275)
    assert g.meta == {"run": "r1", "model": "tiny-s", "gen_len": 64, "recipe": "scalerl",
                      "seed": 0, "task": "math"}
    assert groups[1].meta["gen_len"] == 128
    by_model, _ = load_groups(paths, group_by=["gen_len"], compute_col="compute_flops",
                              reward_col="reward")
    assert [g.key for g in by_model] == [{"gen_len": 64}, {"gen_len": 128}]
    assert by_model[0].reward[0] == pytest.approx(0.1 * 1 + 0.9 * -1)  # mean of +-1 rewards
    assert by_model[0].compute[1] == pytest.approx(1e13)


def test_math_and_code_curves_are_not_pooled(tmp_path, make_eval_frame):
    eval_frame = make_eval_frame
    df = pd.concat([eval_frame(task="math", chunks=5), eval_frame(task="code", chunks=5, a=0.3)])
    path = tmp_path / "e.parquet"
    df.to_parquet(path)
    groups, info = load_groups([path])
    assert info["group_by"] == ["task"] and {g.key["task"] for g in groups} == {"math", "code"}


def test_wandb_history_with_sparse_eval_metric(tmp_path):
    steps = np.arange(0, 1000)
    metric = np.where(steps % 100 == 0, 0.2 + steps / 5000, np.nan)
    path = tmp_path / "wandb.csv"
    pd.DataFrame({"_step": steps, "train/loss": np.ones(steps.size),
                  "eval/pass_rate": metric}).to_csv(path, index=False)
    groups, info = load_groups([path])
    assert info["compute_col"] == "_step" and info["reward_col"] == "eval/pass_rate"
    assert groups[0].compute.tolist() == list(range(0, 1000, 100))
    assert "dropped 990 row(s)" in groups[0].notes[0]


def test_column_errors_list_the_available_columns(point_csv, tmp_path):
    with pytest.raises(InputError, match=r"'flops' not found; available columns: step, "
                                         r"compute, pass_rate, loss"):
        load_groups([point_csv], compute_col="flops")
    with pytest.raises(InputError, match="available columns"):
        load_groups([point_csv], reward_col="acc")
    with pytest.raises(InputError, match=r"--group-by column\(s\) model not found"):
        load_groups([point_csv], group_by=["model"])
    odd = tmp_path / "odd.csv"
    pd.DataFrame({"t": [1, 2], "score": [0.1, 0.2]}).to_csv(odd, index=False)
    with pytest.raises(InputError, match="pass --compute-col; available columns: t, score"):
        load_groups([odd])


def test_bad_files_and_values(tmp_path, write_eval):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_tables([tmp_path / "missing.csv"])
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InputError, match="unknown format"):
        read_tables([tmp_path / "x.json"])
    nan_compute = tmp_path / "nan.csv"
    pd.DataFrame({"compute": [1, np.nan, 3], "pass_rate": [0.1, 0.2, 0.3]}).to_csv(nan_compute)
    with pytest.raises(InputError, match="NaN compute"):
        load_groups([nan_compute])
    paths = write_eval("r1", chunks=4)
    df = pd.read_parquet(paths[1])
    df["correct"] = df["correct"].astype(float)
    df.loc[0, "correct"] = np.nan
    df.to_parquet(paths[1])
    with pytest.raises(InputError, match="empty value"):
        load_groups(paths)
    assert read_tables([paths[0].parent]).shape[0] == 800  # a directory = its files


def test_group_slug():
    assert group_slug({}) == "all"
    assert group_slug({"model": "tiny s", "gen_len": 64}) == "model=tiny-s_gen_len=64"
