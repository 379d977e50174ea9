"""`scalerl eval` and `scalerl fit --tracking RUN_YAML` log to the run's tracker: eval pass
rates at the checkpoint's step/compute, fitted parameters as `fit/<group>/<param>` (read back
from the TensorBoard event files)."""

import numpy as np
import pandas as pd
import pytest
import yaml

from scalerl.cli import main
from scalerl.rl.run_config import RunConfig


def _scalars(path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_fit_logs_its_parameters_to_the_run_tracker(tmp_path):
    pytest.importorskip("tensorboard")
    track = tmp_path / "track"
    run = RunConfig.from_dict({"run": "r_fit", "tracking": {"backend": "tensorboard",
                                                            "dir": str(track)}})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run.to_dict()))
    compute = np.geomspace(1e9, 1e12, 12)
    reward = 0.2 + (0.7 - 0.2) / (1 + (3e10 / compute) ** 1.2)  # A 0.7, B 1.2, C_mid 3e10
    pd.DataFrame({"compute": compute, "pass_rate": reward}).to_csv(tmp_path / "c.csv",
                                                                     index=False)
    assert main(["fit", str(tmp_path / "c.csv"), "--bootstrap", "0", "--r0", "0.2",
                 "--tracking", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "fit")]) == 0
    scalars = _scalars(track / "tensorboard" / "r_fit")
    assert scalars["fit/all/A"][0][1] == pytest.approx(0.7, abs=2e-3)
    assert scalars["fit/all/B"][0][1] == pytest.approx(1.2, rel=2e-2)
    assert "fit/all/C_mid" in scalars and "fit/all/r2" in scalars


def test_fit_without_tracking_writes_no_tracker_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    compute = np.geomspace(1e9, 1e12, 8)
    pd.DataFrame({"compute": compute, "pass_rate": 0.2 + 0.5 / (1 + 3e10 / compute)}).to_csv(
        "c.csv", index=False)
    assert main(["fit", "c.csv", "--bootstrap", "0", "--out", "fit"]) == 0
    assert not (tmp_path / "tracking").exists()
