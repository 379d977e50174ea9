"""`make_tracker`: the configured tracking backend, the one module that knows them all.

The backends (`wandb_backend`, `mlflow_backend`, `tensorboard_backend`) import the interface
from `scalerl.tracking.base`; only this module imports the backends, so the imports run one
way: config ← base ← backends ← factory. Each backend is imported when asked for (its package
is optional: the `tracking` extra).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scalerl.config import ConfigError
from scalerl.tracking.base import NullTracker, Tracker
from scalerl.tracking.config import TrackingConfig

__all__ = ["make_tracker"]


def make_tracker(cfg: TrackingConfig, *, run: str, config: Mapping[str, Any] | None = None
                 ) -> Tracker:
    """The configured backend for run `run` (`config`: the run config, logged as parameters)."""
    if cfg.backend == "none":
        return NullTracker()
    if cfg.backend == "wandb":
        from scalerl.tracking.wandb_backend import WandbTracker
        return WandbTracker(cfg, run=run, config=config or {})
    if cfg.backend == "mlflow":
        from scalerl.tracking.mlflow_backend import MlflowTracker
        return MlflowTracker(cfg, run=run, config=config or {})
    if cfg.backend == "tensorboard":
        from scalerl.tracking.tensorboard_backend import TensorBoardTracker
        return TensorBoardTracker(cfg, run=run, config=config or {})
    raise ConfigError(f"tracking.backend = {cfg.backend!r}: choose one of none, wandb, mlflow, "
                      "tensorboard")
