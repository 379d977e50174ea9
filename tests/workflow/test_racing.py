"""Racing on a real tiny sweep: a broken run (lr 3e-2, 100x the other's) is stopped after a
race, the other finishes, and the report lists the stopped run and the compute saved.

Two runs of one tiny model share the base and the seed, so they start at the same R0 and
evaluate with the same random numbers (48 held-out math prompts x 8 samples: binomial se ~0.015
per eval). The broken run's pass rate falls from R0 towards 0; the other's stays near R0 or
rises. From six points the sigmoids' intervals of A (fitted with the curve prior) are too wide
to separate the two runs, so `scalerl race` decides on the observed rule
(`scalerl.fit.forecast.racing`): from chunk 4 (the first past min_fraction 0.3 with the four
points a prediction needs) the broken run's pass rate lies below its own start by more than the
noise and the margin; its later chunks are never scheduled (Snakemake checkpoint `race`).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake_run import SNAKEFILE

TINY = Path(__file__).with_name("tiny.yaml")
CHUNKS = 6


def _config(workdir: Path) -> Path:
    cfg = yaml.safe_load(TINY.read_text())
    cfg["data"]["config"]["sources"][0]["n"] = 240  # 192 train + 48 held out (math only)
    cfg["data"]["config"]["val_size"] = 48
    cfg["mixes"] = {"m": {"math": 1.0, "code": 0.0}}
    cfg["recipes"] = {"learn": {"preset": "scalerl", "overrides": {"optimizer": {"lr": 3.0e-4}}},
                      "broken": {"preset": "scalerl", "overrides": {"optimizer": {"lr": 3.0e-2}}}}
    cfg["sweep"].update(recipes=["learn", "broken"], mixes=["m"], batches=["8x4"],
                        racing={"enabled": True, "margin": 0.02, "min_fraction": 0.3,
                                "task": "math"})
    cfg["train"].update(chunks=CHUNKS, steps_per_chunk=[1, 1, 2, 2, 3, 3])
    cfg["eval"].update(samples_per_prompt=8, max_prompts=48)
    cfg["fit"]["predict_args"] = ["--bootstrap", "30"]
    path = workdir / "racing.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_a_clearly_worse_run_is_stopped_by_racing(tmp_path):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory",
           str(tmp_path), "--configfile", str(_config(tmp_path)), "--cores", "2",
           "--workflow-profile", "none"]
    dry = subprocess.run([*cmd, "-n"], capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1500,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = tmp_path / "results" / "runs"
    learn, broken = "tiny-s_L48_learn_b8x4_s0", "tiny-s_L48_broken_b8x4_s0"
    races = sorted((tmp_path / "results" / "racing").glob("chunk*.json"))
    stopped = {}
    for path in races:
        for d in json.loads(path.read_text())["decisions"]:
            if d["decision"] == "stop":
                stopped[d["run"]] = int(path.stem.removeprefix("chunk"))
    assert list(stopped) == [broken], [json.loads(p.read_text())["decisions"] for p in races]
    k = stopped[broken]
    reason = next(d["reason"] for d in json.loads(races[k - 1].read_text())["decisions"]
                  if d["run"] == broken)
    assert "fell below its start" in reason, reason
    assert 4 <= k < CHUNKS
    # the stopped run's later chunks were never trained or evaluated; the other run finished
    assert (runs / broken / f"chunk{k}").is_dir() and not (runs / broken / f"chunk{k + 1}").exists()
    assert not (runs / broken / "eval" / f"chunk{k + 1}.parquet").exists()
    assert (runs / learn / f"chunk{CHUNKS}").is_dir()
    assert (runs / broken / "fit" / "fits.json").exists()
    report = (tmp_path / "results" / "report" / "scaling.md").read_text()
    assert "## Racing" in report and broken in report and "Compute saved" in report
    # a rerun has nothing to do: the racing decisions are stable outputs
    again = subprocess.run([*cmd, "-n"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
