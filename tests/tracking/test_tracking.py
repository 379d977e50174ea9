"""The tracker backends write what they log to a local directory, read back with each tool's
own reader: the W&B offline run file (its protobuf records), MLflow's client on the local
SQLite store, TensorBoard's EventAccumulator. A missing package names the extra to install."""

import glob
import json
import struct
import sys

import pytest

from scalerl.config import ConfigError
from scalerl.rl.run_config import RunConfig
from scalerl.tracking import INSTALL_HINT, NullTracker, TrackingConfig, make_tracker

ROWS = [  # two training steps (steps.parquet-like rows) and their compute
    {"run": "r", "step": 1, "loss": 0.5, "pass_rate": 0.25, "compute_flops": 2.0e9,
     "compute_device_hours": 1.0e-3, "npr_retired": 0},
    {"run": "r", "step": 2, "loss": -0.25, "pass_rate": 0.75, "compute_flops": 4.5e9,
     "compute_device_hours": 2.5e-3, "npr_retired": 3},
]
EVAL = {"val/math": 0.375, "all": 0.5}
FIT = {"A": 0.8, "B": 1.5, "C_mid": 3.0e12, "note": "skipped: not a number"}


def _log_everything(tracker):
    with tracker:
        for row in ROWS:
            tracker.log_step(row, step=row["step"], flops=row["compute_flops"],
                             device_hours=row["compute_device_hours"])
        tracker.log_eval(EVAL, step=2, flops=4.5e9, device_hours=2.5e-3)
        tracker.log_fit("val", FIT)


def _cfg(tmp_path, backend):
    return TrackingConfig(backend=backend, project="proj", dir=str(tmp_path / "track"))


def test_run_config_has_tracking_none_by_default():
    cfg = RunConfig()
    assert cfg.tracking.backend == "none"
    assert isinstance(make_tracker(cfg.tracking, run="r"), NullTracker)
    with pytest.raises(ConfigError, match="backend"):
        RunConfig.from_dict({"tracking": {"backend": "neptune"}})


def _wandb_records(path):
    """Records of a .wandb file (LevelDB-log framing: 32 KiB blocks, 7-byte record headers)."""
    from wandb.proto import wandb_internal_pb2 as pb

    raw = open(path, "rb").read()
    assert raw[:4] == b":W&B"
    block, pos, buf, out = 32768, 7, b"", []
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        pos += 7
        if n == 0 and kind == 0:  # zero padding to the end of the block
            pos += left - 7
            continue
        buf += raw[pos:pos + n]
        pos += n
        if kind in (1, 4):  # FULL or LAST
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def _key(item):
    return item.key or "/".join(item.nested_key)


def test_wandb_offline_run_holds_the_logged_keys(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _log_everything(make_tracker(_cfg(tmp_path, "wandb"), run="r_0", config={"seed": 3}))
    runs = glob.glob(str(tmp_path / "track" / "wandb" / "offline-run-*" / "run-r_0.wandb"))
    assert len(runs) == 1
    history, summary = [], {}
    for rec in _wandb_records(runs[0]):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            summary.update({_key(i): json.loads(i.value_json) for i in rec.summary.update})
    train = [h for h in history if "train/loss" in h]
    assert [h["step"] for h in train] == [1, 2]
    assert [h["train/loss"] for h in train] == [0.5, -0.25]
    assert [h["compute_flops"] for h in train] == [2.0e9, 4.5e9]
    assert [h["compute_device_hours"] for h in train] == [1.0e-3, 2.5e-3]
    assert "train/run" not in train[0] and "train/step" not in train[0]
    (point,) = [h for h in history if "eval/val/math" in h]
    assert point["eval/val/math"] == 0.375 and point["step"] == 2
    assert summary["fit/val/A"] == 0.8 and summary["fit/val/C_mid"] == 3.0e12
    assert "fit/val/note" not in summary


def test_mlflow_local_store_reads_back_with_mlflows_client(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    cfg = _cfg(tmp_path, "mlflow")
    _log_everything(make_tracker(cfg, run="r_0", config={"recipe": {"preset": "scalerl"}}))
    # a second chunk appends to the same run
    with make_tracker(cfg, run="r_0", config={}) as again:
        again.log_step({"loss": 0.125}, step=3, flops=6.0e9, device_hours=4.0e-3)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'track' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.data.params["recipe.preset"] == "scalerl"
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert [(m.step, m.value) for m in sorted(loss, key=lambda m: m.step)] == [
        (1, 0.5), (2, -0.25), (3, 0.125)]
    flops = client.get_metric_history(run.info.run_id, "compute_flops")
    assert sorted((m.step, m.value) for m in flops) == [(1, 2.0e9), (2, 4.5e9), (2, 4.5e9),
                                                       (3, 6.0e9)]  # step 2: train + eval
    assert run.data.metrics["eval/val/math"] == 0.375
    assert run.data.metrics["fit/val/B"] == 1.5
    assert run.info.status == "FINISHED"


def test_tensorboard_events_read_back_with_event_accumulator(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _log_everything(make_tracker(_cfg(tmp_path, "tensorboard"), run="r_0"))
    acc = EventAccumulator(str(tmp_path / "track" / "tensorboard" / "r_0"))
    acc.Reload()

    def points(tag):
        return [(e.step, pytest.approx(e.value)) for e in acc.Scalars(tag)]

    assert points("train/loss") == [(1, 0.5), (2, -0.25)]
    assert points("train_by_gflops/loss") == [(2, 0.5), (4, -0.25)]  # round(4.5) = 4
    assert points("train_by_device_ms/pass_rate") == [(3600, 0.25), (9000, 0.75)]
    assert points("eval/val/math") == [(2, 0.375)]
    assert points("fit/val/A") == [(0, 0.8)]
    assert "train/run" not in acc.Tags()["scalars"]


@pytest.mark.parametrize("backend,module", [("wandb", "wandb"), ("mlflow", "mlflow"),
                                            ("tensorboard", "tensorboard")])
def test_missing_package_names_the_extra(tmp_path, monkeypatch, backend, module):
    monkeypatch.setitem(sys.modules, module, None)  # what an uninstalled package looks like
    with pytest.raises(ConfigError) as err:
        make_tracker(_cfg(tmp_path, backend), run="r")
    assert INSTALL_HINT in str(err.value) and f"backend = {backend}" in str(err.value)
