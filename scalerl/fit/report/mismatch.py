"""The generator–trainer mismatch of every run, from its steps.parquet files, for the report.

The trainer records per optimizer step how far the generator's sampling policy was from the
trainer's (`scalerl.rl.steps`: `mismatch_kl`, the k3 estimate of KL(π_gen ‖ π_train) over the
loss tokens, and the extremes `is_ratio_max` / `is_ratio_min` of ρ = π_train/π_gen). That gap
is what the FP32 LM head narrows and what staleness widens (ScaleRL §3.2, §3.1); it is the
first thing to look at when a run's curve bends early.

- `mismatch_frame(paths)`: the rows of every steps.parquet (a file, or a checkpoint directory
  holding one), one run per `run` value, sorted by step;
- `mismatch_markdown(frame)`: one table row per run (steps, mean and largest mismatch_kl, the
  range of ρ, and GSPO's mean sequence ratio where recorded);
- `plot_mismatch(frame, path)`: mismatch_kl and the range of ρ against the step, one colour
  per run (matplotlib Agg).

Deliberately left out: judging a run by its mismatch (no threshold is the paper's) and
per-token data (rollouts.parquet has the samples).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalerl.utils.io import atomic_path  # noqa: E402

__all__ = ["mismatch_frame", "mismatch_markdown", "plot_mismatch"]

COLUMNS = ("run", "chunk", "step", "mismatch_kl", "is_ratio_max", "is_ratio_min",
           "seq_ratio_mean", "staleness_mean")


def mismatch_frame(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The `COLUMNS` of every steps.parquet in `paths` (files or checkpoint directories),
    sorted by run and step; ValueError naming a path without steps.parquet."""
    from scalerl.rl.steps import read_steps

    frames = []
    for path in paths:
        path = Path(path)
        file = path / "steps.parquet" if path.is_dir() else path
        if not file.is_file():
            raise ValueError(f"{path}: no steps.parquet (give a checkpoint directory of "
                             "`scalerl train` or its steps.parquet)")
        frames.append(read_steps(file)[list(COLUMNS)])
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    frame = pd.concat(frames, ignore_index=True)
    return frame.sort_values(["run", "step"], kind="stable").reset_index(drop=True)


def _num(value: float, fmt: str) -> str:
    return format(value, fmt) if np.isfinite(value) else "–"


def mismatch_markdown(frame: pd.DataFrame) -> str:
    """The report section: one row per run (module docstring); '' without rows."""
    if not len(frame):
        return ""
    lines = ["", "## Generator–trainer mismatch", "",
             "Per optimizer step, ρ = π_train/π_gen over the loss tokens (steps.parquet; "
             "mismatch.png). mismatch_kl = mean(ρ − 1 − log ρ), an estimate of "
             "KL(π_gen ‖ π_train) that the FP32 head narrows and staleness widens.", "",
             "| run | steps | mismatch_kl mean | mismatch_kl max | ρ min | ρ max "
             "| GSPO sequence ratio |", "|---|---|---|---|---|---|---|"]
    for run, sub in frame.groupby("run", sort=True):
        kl = sub["mismatch_kl"].astype(float)
        seq = sub["seq_ratio_mean"].astype(float)
        lines.append(
            f"| {run} | {len(sub)} | {_num(kl.mean(), '.3g')} | {_num(kl.max(), '.3g')} "
            f"| {_num(sub['is_ratio_min'].astype(float).min(), '.3g')} "
            f"| {_num(sub['is_ratio_max'].astype(float).max(), '.3g')} "
            f"| {_num(seq.mean(), '.3g') if seq.notna().any() else '–'} |")
    return "\n".join(lines) + "\n"


def plot_mismatch(frame: pd.DataFrame, path: str | Path) -> None:
    """Two panels against the step: mismatch_kl, and the extremes of ρ of each step (max
    solid, min dashed); one colour per run; symmetric-log axes (an exact 0 stays drawn)."""
    fig, (ax_kl, ax_rho) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (run, sub) in enumerate(frame.groupby("run", sort=True)):
        colour = f"C{i % 10}"
        steps = sub["step"].to_numpy()
        ax_kl.plot(steps, sub["mismatch_kl"].astype(float).to_numpy(), color=colour, lw=1.2,
                   marker="o", ms=2, label=str(run))
        ax_rho.plot(steps, sub["is_ratio_max"].astype(float).to_numpy(), color=colour, lw=1)
        ax_rho.plot(steps, sub["is_ratio_min"].astype(float).to_numpy(), color=colour, lw=1,
                    ls="--")
    ax_kl.set_yscale("symlog", linthresh=1e-4)
    ax_kl.set_xlabel("optimizer step")
    ax_kl.set_ylabel("mismatch_kl  (mean ρ − 1 − log ρ)")
    ax_rho.set_yscale("symlog", linthresh=1e-2)
    ax_rho.axhline(1.0, color="grey", lw=0.8)
    ax_rho.set_xlabel("optimizer step")
    ax_rho.set_ylabel("ρ = π_train / π_gen: max (solid), min (dashed)")
    for ax in (ax_kl, ax_rho):
        ax.grid(True, which="both", alpha=0.3)
    if frame["run"].nunique() <= 12:
        ax_kl.legend(fontsize=7)
    fig.suptitle(f"generator–trainer mismatch, {frame['run'].nunique()} run(s)", fontsize=10)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
