"""MLflow backend: a local SQLite store file by default, one MLflow run per scalerl run.

The tracking URI is `tracking.mlflow_uri`, or `sqlite:///DIR/mlflow.db`: one local file, no
server, no network (`mlflow ui --backend-store-uri sqlite:///DIR/mlflow.db` shows it).
MLflow 3 refuses the older `./mlruns` directory store unless MLFLOW_ALLOW_FILE_STORE=true is
set; with that, `mlflow_uri: file:DIR/mlruns` works too. The experiment is `tracking.project`;
the run is found again by its `scalerl.run` tag, so every chunk appends to the same run. Each
point is logged at its optimizer step, with `compute_flops` and `compute_device_hours` as
metrics at the same step (MLflow's charts can use a metric as the x-axis). The run config
goes in as flattened parameters when the run is created; fits as `fit/<name>/<param>`
metrics at step 0.

Deliberately left out: artifacts and model registry.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scalerl.tracking.base import Tracker, require
from scalerl.tracking.config import TrackingConfig

RUN_TAG = "scalerl.run"


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping → {"a.b": "value"} (values as strings, cut to MLflow's 6000 chars)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = str(value)[:6000]
    return out


class MlflowTracker(Tracker):
    def __init__(self, cfg: TrackingConfig, *, run: str, config: Mapping[str, Any]):
        require("mlflow")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        Path(cfg.dir).mkdir(parents=True, exist_ok=True)
        uri = cfg.mlflow_uri or f"sqlite:///{(Path(cfg.dir) / 'mlflow.db').resolve()}"
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(cfg.project)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(cfg.project))
        found = self.client.search_runs([experiment_id], f"tags.`{RUN_TAG}` = '{run}'",
                                        max_results=1)
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = self.client.create_run(experiment_id, tags={RUN_TAG: run},
                                                 run_name=run).info.run_id
            params = [Param(k, v) for k, v in flatten(config).items()]
            for start in range(0, len(params), 100):  # log_batch takes <= 100 params
                self.client.log_batch(self.run_id, params=params[start:start + 100])

    def _metrics(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def _log(self, values: dict[str, float], axes: dict[str, Any]) -> None:
        step = axes["step"]
        self._metrics({**values, "compute_flops": axes["compute_flops"],
                       "compute_device_hours": axes["compute_device_hours"]}, step)

    def _summary(self, values: dict[str, float]) -> None:
        self._metrics(values, 0)

    def close(self) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED")
