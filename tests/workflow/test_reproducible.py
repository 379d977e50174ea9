"""Two runs of the tiny test sweep (tiny.yaml) on the fixed PipelineRL schedule give the same
eval tables, fits and predictions.

tiny.yaml trains on-policy; here its run uses the recipe's PipelineRL-8 with
`train.pipeline_fixed_lag: 1` (as config/config.yaml does), into two fresh directories. Every
eval Parquet's columns and rows (`scalerl.eval.schema.table_digest`: all but the measured
device-hours) and every fit's parameters must be equal, and so must the trained weights.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from snakemake_run import SNAKEFILE

from scalerl.eval.schema import read_eval_table, table_digest

TINY = Path(__file__).with_name("tiny.yaml")
FIT_KEYS = ("A", "B", "C_mid", "R0", "r2", "converged", "n_points")


def _sweep(workdir: Path) -> None:
    import subprocess

    cfg = yaml.safe_load(TINY.read_text())
    cfg["train"]["recipe_overrides"].pop("off_policy")  # the preset's PipelineRL-8
    cfg["train"]["pipeline_fixed_lag"] = 1
    workdir.mkdir()
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir),
         "--configfile", str(workdir / "config.yaml"), "--cores", "2", "--workflow-profile",
         "none"], capture_output=True, text=True, timeout=1200,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _digests(workdir: Path) -> dict[str, str]:
    """Relative path -> digest of every eval table, fit, prediction table and checkpoint."""
    results = workdir / "results"
    out = {}
    for path in sorted(results.glob("runs/*/eval/*.parquet")):
        out[str(path.relative_to(results))] = table_digest(read_eval_table(path))
    for path in sorted(results.glob("runs/*/fit/task=*/fit.json")):
        fit = json.loads(path.read_text())
        out[str(path.relative_to(results))] = json.dumps({k: fit.get(k) for k in FIT_KEYS})
    for path in sorted(results.glob("runs/*/predictions.parquet")):
        out[str(path.relative_to(results))] = pd.read_parquet(path).to_json()
    for path in sorted(results.glob("runs/*/chunk*/model.safetensors")):
        out[str(path.relative_to(results))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.mark.slow
def test_two_runs_of_the_test_sweep_are_identical(tmp_path):
    _sweep(tmp_path / "a")
    _sweep(tmp_path / "b")
    a, b = _digests(tmp_path / "a"), _digests(tmp_path / "b")
    assert len([k for k in a if "/eval/" in k]) == 5  # chunk 0 (the base) .. chunk 4
    assert any("/fit/" in k for k in a) and any("safetensors" in k for k in a)
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k] != b[k]]
    assert not differ, f"differ between two runs of one config: {differ}"
