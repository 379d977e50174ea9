"""Weights & Biases backend: offline by default, one W&B run per scalerl run (id = run id).

`wandb.init(mode=offline)` (what WANDB_MODE=offline does) writes `DIR/wandb/offline-run-*/
run-<id>.wandb` and never touches the network; `wandb sync DIR/wandb/offline-run-*` uploads
later. Every chunk re-opens the same id (`resume="allow"`), so synced chunks join one run.
`step`, `compute_flops` and `compute_device_hours` are logged with every point and declared
as metrics, so the W&B x-axis can be switched to compute; `train/*` and `eval/*` default to
`step`. Fits go to the run summary.

`close()` tears the wandb service down so the run file is complete when it returns.

Deliberately left out: console capture and system metrics (the trainer logs to stderr itself).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scalerl.tracking.base import AXES, Tracker, require
from scalerl.tracking.config import TrackingConfig


class WandbTracker(Tracker):
    def __init__(self, cfg: TrackingConfig, *, run: str, config: Mapping[str, Any]):
        wandb = require("wandb")
        Path(cfg.dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=cfg.project, name=run, id=re.sub(r"[^A-Za-z0-9_.-]", "-", run),
            dir=cfg.dir, mode=cfg.wandb_mode, resume="allow", config=dict(config),
            settings=wandb.Settings(console="off", x_disable_stats=True, silent=True))
        for axis in AXES:
            self.run.define_metric(axis)
        for prefix in ("train", "eval"):
            self.run.define_metric(f"{prefix}/*", step_metric="step")

    def _log(self, values: dict[str, float], axes: dict[str, Any]) -> None:
        self.run.log({**axes, **values})

    def _summary(self, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.run.summary[key] = value

    def close(self) -> None:
        import wandb

        self.run.finish()
        # offline finish() can return before the run file is flushed (seen with wandb 0.31:
        # a 7-byte file read right after); teardown waits for the wandb service to exit.
        wandb.teardown()
