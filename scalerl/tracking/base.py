"""The tracker interface: training steps, eval points and fits, each with compute x-axes.

Every point is logged with three x-axis values, so a chart can be drawn against any of them:
`step` (optimizer steps), `compute_flops` and `compute_device_hours` (`scalerl.rl.compute`;
the fit's axis, docs/design.md). Metric names are prefixed by what logged them: `train/…`
(one steps.parquet row per step), `eval/…` (pass rates of a checkpoint), `fit/<name>/…` (the
sigmoid fit's parameters: A, B, C_mid, …). Only numeric values are logged (bools as 0/1);
strings and None are skipped.

`make_tracker(cfg, run=…, config=…)` (`scalerl.tracking.factory`) builds the configured backend;
a backend whose package is missing raises ConfigError naming the extra to install. The trainer
calls `log_step` after every optimizer step and `close` at the end of the chunk; every chunk
of a run continues the same tracker run (same W&B id, same MLflow run, same TensorBoard dir).

Deliberately left out: artifacts (checkpoints, parquet files: the workflow keeps those),
media and system metrics.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from scalerl.config import ConfigError

__all__ = ["AXES", "INSTALL_HINT", "NullTracker", "Tracker", "numeric", "require"]

AXES = ("step", "compute_flops", "compute_device_hours")
INSTALL_HINT = "pip install 'scalerl[tracking]'"
_PACKAGES = {"wandb": "wandb", "mlflow": "mlflow", "tensorboard": "tensorboard"}


def require(backend: str, module: str | None = None) -> ModuleType:
    """Import the backend's package, or raise ConfigError naming the `tracking` extra."""
    name = module or _PACKAGES[backend]
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ConfigError(
            f"tracking.backend = {backend} needs the {_PACKAGES[backend]!r} package, which is "
            f"not installed ({err}); install the tracking extra: {INSTALL_HINT}, or set "
            "tracking.backend: none") from None


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries (bools as 0/1; NaN kept, infinities and non-numbers dropped)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, int | float) and not math.isinf(value):
            out[key] = float(value)
        elif hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy/torch scalar
            out.update(numeric({key: value.item()}))
    return out


class Tracker:
    """Base class; backends implement `_log(prefix, metrics, axes)`, `_summary` and `close`."""

    def log_step(self, row: Mapping[str, Any], *, step: int, flops: float,
                 device_hours: float) -> None:
        """One training step (a steps.parquet row) at its step and compute."""
        self._point("train", row, step, flops, device_hours)

    def log_eval(self, metrics: Mapping[str, Any], *, step: int, flops: float,
                 device_hours: float) -> None:
        """One evaluated checkpoint: pass rates (and any other numbers) at its compute."""
        self._point("eval", metrics, step, flops, device_hours)

    def log_fit(self, name: str, params: Mapping[str, Any]) -> None:
        """A fitted curve's parameters (A, B, C_mid, r2, …) as `fit/<name>/<param>`."""
        self._summary({f"fit/{name}/{k}": v for k, v in numeric(params).items()})

    def _point(self, prefix: str, metrics: Mapping[str, Any], step: int, flops: float,
               device_hours: float) -> None:
        values = {f"{prefix}/{k}": v for k, v in numeric(metrics).items() if k not in AXES}
        axes = {"step": int(step), "compute_flops": float(flops),
                "compute_device_hours": float(device_hours)}
        self._log(values, axes)

    def _log(self, values: dict[str, float], axes: dict[str, Any]) -> None:
        raise NotImplementedError

    def _summary(self, values: dict[str, float]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Flush and release the backend (the tracker run stays resumable)."""

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class NullTracker(Tracker):
    """backend: none — logs nothing."""

    def _log(self, values: dict[str, float], axes: dict[str, Any]) -> None:
        pass

    def _summary(self, values: dict[str, float]) -> None:
        pass
