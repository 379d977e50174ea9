"""The report's generator–trainer mismatch section: per run, from steps.parquet files."""

import math

import numpy as np
import pytest

from scalerl.fit.curves.curve import fit_curve
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.report.mismatch import mismatch_frame, mismatch_markdown
from scalerl.fit.report.scaling import write_report
from scalerl.rl.steps import STEP_COLUMNS, write_steps


def _steps(path, run, chunk, steps, kl, rho_max, rho_min, seq=math.nan):
    rows = []
    for i, step in enumerate(steps):
        row = dict.fromkeys(STEP_COLUMNS, 0.0)
        row.update(run=run, chunk=chunk, step=step, tokens=10, npr_retired=0, staleness_max=0,
                   mismatch_kl=kl[i], is_ratio_max=rho_max[i], is_ratio_min=rho_min[i],
                   seq_ratio_mean=seq)
        rows.append(row)
    path.mkdir(parents=True)
    write_steps(rows, path / "steps.parquet")
    return path


def test_mismatch_rows_per_run_by_hand(tmp_path):
    a1 = _steps(tmp_path / "a" / "chunk1", "a", 1, [1, 2], [0.01, 0.03], [1.5, 2.0], [0.8, 0.5])
    a2 = _steps(tmp_path / "a" / "chunk2", "a", 2, [3], [0.02], [1.2], [0.9])
    b1 = _steps(tmp_path / "b" / "chunk1", "b", 1, [1], [0.5], [4.0], [0.25], seq=1.1)
    frame = mismatch_frame([a2, b1 / "steps.parquet", a1])  # directories or files, any order
    assert frame["run"].tolist() == ["a", "a", "a", "b"]
    assert frame["step"].tolist() == [1, 2, 3, 1] and frame["chunk"].tolist() == [1, 1, 2, 1]
    text = mismatch_markdown(frame)
    # run a: 3 steps, kl mean (0.01 + 0.03 + 0.02) / 3 = 0.02, max 0.03, ρ in [0.5, 2]; no GSPO
    assert "| a | 3 | 0.02 | 0.03 | 0.5 | 2 | – |" in text
    assert "| b | 1 | 0.5 | 0.5 | 0.25 | 4 | 1.1 |" in text
    with pytest.raises(ValueError, match="no steps.parquet"):
        mismatch_frame([tmp_path / "a"])


def test_the_report_draws_the_mismatch_of_every_run(tmp_path):
    a1 = _steps(tmp_path / "a" / "chunk1", "a", 1, [1, 2], [0.0, 0.03], [1.5, 2.0], [0.8, 0.5])
    c = np.linspace(50, 4000, 20)
    fit = fit_curve(np.r_[0.0, c], np.r_[0.2, sigmoid(c, 0.5, 2.0, 1000.0, 0.2)],
                    FitConfig(bootstrap_n=5))
    records = [fit.to_dict(compute_col="compute", reward_col="pass_rate", group={"task": "math"},
                           meta={"run": "a", "model": "tiny-s"})]
    paths = write_report(records, tmp_path / "rep", by=("model", "task"), steps=[a1])
    assert paths["mismatch"].is_file() and paths["mismatch"].stat().st_size > 1000
    text = paths["markdown"].read_text()
    assert "## Generator–trainer mismatch" in text and "| a | 2 |" in text
    plain = write_report(records, tmp_path / "plain", by=("model", "task"))
    assert "mismatch" not in plain and "mismatch" not in plain["markdown"].read_text()
