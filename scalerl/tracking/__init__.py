"""Experiment tracking (W&B offline, MLflow file store, TensorBoard); see `scalerl.tracking.base`."""

from scalerl.tracking.base import (
    AXES,
    INSTALL_HINT,
    NullTracker,
    Tracker,
    make_tracker,
)
from scalerl.tracking.config import BACKENDS, TrackingConfig

__all__ = ["AXES", "BACKENDS", "INSTALL_HINT", "NullTracker", "Tracker", "TrackingConfig",
           "make_tracker"]
