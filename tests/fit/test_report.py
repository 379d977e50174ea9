"""The scaling report from fit.json records (no CLI)."""

import json

import numpy as np
import pandas as pd
import pytest

from scalerl.fit.curves.curve import fit_curve
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.report.scaling import collect_records, fits_frame, write_report
from scalerl.utils.io import write_json_atomic


def _record(a, gen_len, recipe, seed=0, **meta):
    rng = np.random.default_rng(seed)
    c = np.linspace(50, 4000, 30)
    y = sigmoid(c, a, 2.0, 1000.0, 0.2) + rng.normal(0, 0.003, c.size)
    fit = fit_curve(np.r_[0.0, c], np.r_[0.2, y], FitConfig(bootstrap_n=10))
    return fit.to_dict(compute_col="compute", reward_col="pass_rate", group={},
                       meta={"model": "tiny-s", "gen_len": gen_len, "recipe": recipe,
                             "seed": seed, **meta})


@pytest.fixture
def fit_dir(tmp_path):
    specs = [(0.50, 128, "scalerl", 0), (0.45, 64, "scalerl", 0), (0.46, 64, "scalerl", 1),
             (0.40, 64, "dapo", 0)]
    for i, (a, gen_len, recipe, seed) in enumerate(specs):
        write_json_atomic(tmp_path / "fits" / f"run{i}" / "fit.json",
                          _record(a, gen_len, recipe, seed))
    (tmp_path / "fits" / "fits.json").write_text("[]")  # not a fit.json: ignored
    return tmp_path / "fits"


def test_report_tables_and_plot(fit_dir, tmp_path):
    records = collect_records([fit_dir])
    assert len(records) == 4 and all(r["path"].endswith("fit.json") for r in records)
    paths = write_report(records, tmp_path / "rep", by=("model", "gen_len", "recipe", "task"))
    df = pd.read_parquet(paths["parquet"])
    # natural order: gen_len 64 before 128, recipe dapo before scalerl
    assert df[["gen_len", "recipe"]].values.tolist() == [[64, "dapo"], [64, "scalerl"],
                                                        [64, "scalerl"], [128, "scalerl"]]
    assert "task" not in df.columns  # no record has a task
    assert df["A"].tolist() == pytest.approx([0.40, 0.45, 0.46, 0.50], abs=0.01)
    assert (df["A_lo"] <= df["A"]).all() and (df["A"] <= df["A_hi"]).all()
    text = paths["markdown"].read_text()
    assert "not shown): task" in text
    assert "| tiny-s | 64 | scalerl | 2 | 0.455 | 0.006 | yes |" in text  # the two seeds
    # the gen_len axis varies, but no cell holds one fit at both lengths (seeds, dapo at 64 only)
    assert "### gen_len: 64 < 128" in text
    assert "| tiny-s | dapo | A 0.40" in text and "| – | fewer than two single fits" in text
    assert "| tiny-s | scalerl | 2 fits | A 0.50" in text
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_fits_frame_mixed_types_and_missing(fit_dir):
    records = collect_records([fit_dir])
    records[0]["meta"]["model"] = 7  # int in one record, str in the others
    del records[1]["meta"]["gen_len"]
    df = fits_frame(records, ["model", "gen_len"])
    assert set(df["model"]) == {"7", "tiny-s"} and df["gen_len"].isna().sum() == 1


def test_collect_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no fit.json"):
        collect_records([tmp_path])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        collect_records([tmp_path / "nope.json"])
    bad = tmp_path / "fit.json"
    bad.write_text(json.dumps({"A": 1}))
    with pytest.raises(ValueError, match="missing B, C_mid, R0, points"):
        collect_records([bad])
    bad.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        collect_records([bad])
