"""Racing on a real tiny sweep: a frozen run (lr 0) is stopped after a race, the other
finishes, and the report lists the stopped run and the compute saved.

Two runs of one tiny model share the base and the seed, so they start at the same R0 and
evaluate with the same random numbers; the frozen run's curve is exactly flat at R0, the
learning run rises. After chunk 4 (the first with four points past R0) `scalerl race` compares
their predicted ceilings A; the frozen run's later chunks are never scheduled (Snakemake
checkpoint `race`).
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
    cfg["data"]["config"]["val_size"] = 24
    cfg["mixes"] = {"m": {"math": 1.0, "code": 0.0}}
    cfg["recipes"] = {"learn": {"preset": "scalerl", "overrides": {"optimizer": {"lr": 3.0e-4}}},
                      "frozen": {"preset": "scalerl", "overrides": {"optimizer": {"lr": 0.0}}}}
    cfg["sweep"].update(recipes=["learn", "frozen"], mixes=["m"], batches=["8x4"],
                        racing={"enabled": True, "margin": 0.02, "min_fraction": 0.3,
                                "task": "math"})
    cfg["train"].update(chunks=CHUNKS, steps_per_chunk=[1, 1, 2, 2, 3, 3])
    cfg["eval"].update(samples_per_prompt=4, max_prompts=16)
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
    learn, frozen = "tiny-s_L48_learn_b8x4_s0", "tiny-s_L48_frozen_b8x4_s0"
    races = sorted((tmp_path / "results" / "racing").glob("chunk*.json"))
    stopped = {}
    for path in races:
        for d in json.loads(path.read_text())["decisions"]:
            if d["decision"] == "stop":
                stopped[d["run"]] = int(path.stem.removeprefix("chunk"))
    assert list(stopped) == [frozen], [json.loads(p.read_text())["decisions"] for p in races]
    k = stopped[frozen]
    assert 4 <= k < CHUNKS
    # the stopped run's later chunks were never trained or evaluated; the other run finished
    assert (runs / frozen / f"chunk{k}").is_dir() and not (runs / frozen / f"chunk{k + 1}").exists()
    assert not (runs / frozen / "eval" / f"chunk{k + 1}.parquet").exists()
    assert (runs / learn / f"chunk{CHUNKS}").is_dir()
    assert (runs / frozen / "fit" / "fits.json").exists()
    report = (tmp_path / "results" / "report" / "scaling.md").read_text()
    assert "## Racing" in report and frozen in report and "Compute saved" in report
    # a rerun has nothing to do: the racing decisions are stable outputs
    again = subprocess.run([*cmd, "-n"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
