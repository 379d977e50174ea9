"""Fault injection for fit inputs: an infinite reward or compute value is refused with an error
naming the file and the row; the input files are left unchanged."""
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scalerl.fit.readers.inputs import load_groups
from scalerl.fit.readers.tables import InputError


def _checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("column", ["reward", "compute"])
def test_inf_in_second_file_names_file_and_row(tmp_path, column):
    good = pd.DataFrame({"gpu_hours": [1.0, 2.0], "mean_reward": [0.1, 0.2]})
    bad = pd.DataFrame({"gpu_hours": [3.0, 4.0, 5.0], "mean_reward": [0.3, 0.4, 0.5]})
    bad.loc[2, "gpu_hours" if column == "compute" else "mean_reward"] = np.inf
    good.to_csv(tmp_path / "a.csv", index=False)
    bad.to_csv(tmp_path / "b.csv", index=False)
    before = _checksums(tmp_path)
    with pytest.raises(InputError) as err:
        load_groups([tmp_path / "a.csv", tmp_path / "b.csv"],
                    compute_col="gpu_hours", reward_col="mean_reward")
    assert f"{tmp_path / 'b.csv'} row 2" in str(err.value) and "infinite" in str(err.value)
    assert _checksums(tmp_path) == before


# -- eval files of another run (or of an older config) pooled into one curve ------------------
def _eval_file(path: Path, *, run: str, chunk: int, config_hash: str) -> Path:
    from scalerl.eval.schema import build_eval_table, write_eval_table

    rows = [dict(run=run, model="tiny-s", gen_len=48, recipe="scalerl", seed=0, chunk=chunk,
                 step=2 * chunk, compute_flops=1e9 * chunk, compute_device_hours=0.1 * chunk,
                 task=task, test_type="answer" if task == "math" else "function",
                 dataset="val", prompt_id=f"{task}{p}", sample_idx=j,
                 reward=1.0 if (p + j + chunk) % 3 else -1.0, correct=bool((p + j + chunk) % 3),
                 n_tokens=10, truncated=False, interrupted=False, response="x")
            for task in ("math", "code") for p in range(3) for j in range(2)]
    meta = {"scalerl.version": "0", "scalerl.config_hash": config_hash,
            "scalerl.checkpoint": f"chunk{chunk}", "scalerl.k": "2"}
    return write_eval_table(build_eval_table(rows, meta), path)


def _run_files(root: Path, run="r1", config_hash="aaaa1111", chunks=4) -> list[Path]:
    (root / run).mkdir(parents=True, exist_ok=True)
    return [_eval_file(root / run / f"chunk{k}.parquet", run=run, chunk=k,
                       config_hash=config_hash) for k in range(chunks)]


@pytest.mark.parametrize("foreign", ["other_run", "stale_config"])
def test_eval_file_of_another_run_in_one_curve_names_both_files(tmp_path, foreign):
    files = _run_files(tmp_path / "in")
    (tmp_path / "in" / "x").mkdir()
    other = _eval_file(tmp_path / "in" / "x" / "chunk2.parquet",
                       run="r2" if foreign == "other_run" else "r1", chunk=2,
                       config_hash="bbbb2222")
    before = _checksums(tmp_path)
    with pytest.raises(InputError) as err:
        load_groups([*files, other], group_by=["task"])
    msg = str(err.value)
    assert str(files[0]) in msg and str(other) in msg
    assert ("'r1' vs 'r2'" if foreign == "other_run" else "'aaaa1111' vs 'bbbb2222'") in msg
    assert "pass only one run's eval files" in msg and "--group-by run" in msg
    assert _checksums(tmp_path) == before


def test_grouping_by_run_separates_two_runs(tmp_path):
    files = _run_files(tmp_path, "r1") + _run_files(tmp_path, "r2", config_hash="bbbb2222")
    groups, info = load_groups(files)  # default grouping: run and task
    assert info["group_by"] == ["run", "task"] and len(groups) == 4
    same, _ = load_groups(_run_files(tmp_path / "again", "r1"), group_by=["task"])
    assert len(same) == 2  # one run's own files: no complaint


def test_scalerl_fit_refuses_the_foreign_file_and_keeps_prior_fits(tmp_path, capsys):
    from scalerl.cli import main

    files = _run_files(tmp_path / "in")
    other = _eval_file(tmp_path / "in" / "r1" / "chunk9.parquet", run="r2", chunk=3,
                       config_hash="bbbb2222")
    out = tmp_path / "fit"
    out.mkdir()
    (out / "fits.json").write_text("[]\n")  # a prior fit's output
    before = _checksums(tmp_path)
    code = main(["fit", *map(str, files), str(other), "--group-by", "task",
                 "--compute-col", "compute_flops", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and str(other) in err and str(files[0]) in err
    assert _checksums(tmp_path) == before
