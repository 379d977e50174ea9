"""Experiment tracking (W&B offline, MLflow file store, TensorBoard): the interface in
`scalerl.tracking.base`, the backends in `*_backend`, `make_tracker` in
`scalerl.tracking.factory`."""

from scalerl.tracking.base import AXES, INSTALL_HINT, NullTracker, Tracker
from scalerl.tracking.config import BACKENDS, TrackingConfig
from scalerl.tracking.factory import make_tracker

__all__ = ["AXES", "BACKENDS", "INSTALL_HINT", "NullTracker", "Tracker", "TrackingConfig",
           "make_tracker"]
