"""TensorBoard backend: event files under DIR/tensorboard/<run>, one directory per run.

TensorBoard's x-axis is an integer step, so every value is written three times: `<tag>` at
the optimizer step, `<prefix>_by_gflops/<name>` at round(FLOPs / 1e9) and
`<prefix>_by_device_ms/<name>` at round(device-hours × 3.6e6) (device-milliseconds; both
fit int64 for any run this project trains). Chunks of a run write into the same directory
(TensorBoard merges the event files). Fits are scalars at step 0.

Deliberately left out: histograms, images, hparams plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scalerl.tracking.base import Tracker, require
from scalerl.tracking.config import TrackingConfig


class TensorBoardTracker(Tracker):
    def __init__(self, cfg: TrackingConfig, *, run: str, config: Mapping[str, Any]):
        require("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(cfg.dir) / "tensorboard" / run
        self.writer = SummaryWriter(log_dir=str(self.log_dir))
        if config:
            import json

            self.writer.add_text("config", "```\n" + json.dumps(config, indent=1, default=str)
                                 + "\n```", 0)

    def _log(self, values: dict[str, float], axes: dict[str, Any]) -> None:
        gflops = round(axes["compute_flops"] / 1e9)
        device_ms = round(axes["compute_device_hours"] * 3.6e6)
        for tag, value in values.items():
            prefix, _, name = tag.partition("/")
            self.writer.add_scalar(tag, value, axes["step"])
            self.writer.add_scalar(f"{prefix}_by_gflops/{name}", value, gflops)
            self.writer.add_scalar(f"{prefix}_by_device_ms/{name}", value, device_ms)

    def _summary(self, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, 0)

    def close(self) -> None:
        self.writer.close()
