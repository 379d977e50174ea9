"""TrackingConfig: which experiment tracker a run logs to (the `tracking:` section of run.yaml).

    tracking: {backend: mlflow, project: scalerl, dir: results/tracking}

`backend: none` (the default) logs nothing and imports nothing. The others need the
`tracking` extra (`pip install 'scalerl[tracking]'`) and write under `dir` with no network:
W&B in offline mode (`wandb sync DIR/wandb/offline-run-*` uploads later), MLflow to a local
SQLite store file (`mlflow ui --backend-store-uri sqlite:///DIR/mlflow.db`), TensorBoard event files
(`tensorboard --logdir DIR/tensorboard`).

Deliberately left out: credentials and hosted servers (set `wandb_mode: online` or
`mlflow_uri` yourself; the trainer never needs them).
"""

from __future__ import annotations

import dataclasses

from scalerl.config import Config, field_

__all__ = ["BACKENDS", "TrackingConfig"]

BACKENDS = ("none", "wandb", "mlflow", "tensorboard")


@dataclasses.dataclass(frozen=True)
class TrackingConfig(Config):
    """Experiment tracker of a run: backend, project (W&B project / MLflow experiment), dir."""

    backend: str = field_("none", "none, wandb, mlflow or tensorboard", choices=BACKENDS)
    project: str = field_("scalerl", "W&B project / MLflow experiment name")
    dir: str = field_("tracking", "local directory the backend writes to (W&B offline runs, "
                      "the MLflow store file mlflow.db, TensorBoard event files)")
    wandb_mode: str = field_("offline", "W&B mode: offline (no network; `wandb sync` later), "
                             "online or disabled", choices=("offline", "online", "disabled"))
    mlflow_uri: str = field_("", "MLflow tracking URI; empty = sqlite:///DIR/mlflow.db (local file)")
