"""Two runs of the tiny test sweep (tiny.yaml) on the fixed PipelineRL schedule give the same
eval tables, fits and predictions.

tiny.yaml trains on-policy; here its run uses the recipe's PipelineRL-8 with
config/config.yaml's `train.pipeline_fixed_lag` (1, the fixed schedule), into two fresh directories. Every
eval Parquet's columns and rows (all but the measured device-hours), every fit record, the
predictions and the trained weights must be equal (`scalerl.sweep.digest`).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake_run import SNAKEFILE

from scalerl.sweep.digest import differing, results_digests

TINY = Path(__file__).with_name("tiny.yaml")


def _sweep(workdir: Path) -> None:
    cfg = yaml.safe_load(TINY.read_text())
    cfg["train"]["recipe_overrides"].pop("off_policy")  # the preset's PipelineRL-8
    shipped = yaml.safe_load((SNAKEFILE.parents[1] / "config" / "config.yaml").read_text())
    cfg["train"]["pipeline_fixed_lag"] = shipped["train"]["pipeline_fixed_lag"]
    assert cfg["train"]["pipeline_fixed_lag"] == 1  # the CPU default: the fixed schedule
    workdir.mkdir()
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir),
         "--configfile", str(workdir / "config.yaml"), "--cores", "2", "--workflow-profile",
         "none"], capture_output=True, text=True, timeout=1200,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.slow
def test_two_runs_of_the_test_sweep_are_identical(tmp_path):
    _sweep(tmp_path / "a")
    _sweep(tmp_path / "b")
    a, b = (results_digests(tmp_path / name / "results") for name in ("a", "b"))
    assert len([k for k in a if "/eval/" in k]) == 5  # chunk 0 (the base) .. chunk 4
    assert len([k for k in a if k.endswith("fit.json")]) >= 1
    assert len([k for k in a if "chunk" in k and k.endswith("safetensors")]) == 4
    assert any(k.endswith("predictions.parquet") for k in a)
    assert not differing(a, b), f"differ between two runs of one config: {differing(a, b)}"
