"""The command-line options each stage's command gets from the sweep.

The workflow's rules call `scalerl fit`, `scalerl predict`, `scalerl race` and `scalerl report`
with options that are science, not file layout: which eval column is the compute axis, which
sweep coordinates tag a fit and form the report's columns, which runs are seeds of one cell,
how racing decides. They are decided here, from the typed sweep (`SweepConfig`, `Run`), so the
workflow only names files and passes these lists on (docs/design.md, "Sweep"):

- `fit_options(sweep, run)`: `--group-by`, `--compute-col`, one `--meta` per coordinate of the
  run (`Run.meta`), then `fit.extra_args`;
- `predict_options(sweep, all_chunks=...)`: `--chunks`, `--compute-col`, then
  `fit.predict_args` (and `--all-chunks` for the run's backtest file);
- `sweep_mates(sweep, run, runs)`: the runs whose evals `scalerl predict --sweep-eval` fits
  jointly with `run`'s (`fit.joint`): same recipe, batch and mix; B and C_mid are set mostly by
  the recipe (Khatri et al. 2025), so the runs along model size and length share most of their
  curve's shape;
- `race_options(sweep, runs)`: `sweep.racing`'s task, margin and minimum fraction, and one
  `--group RUN=CELL` per run (`Run.cell`: its seeds race as one);
- `report_options(sweep)`: `--by` the sweep's axes (`scalerl.sweep.runs.AXES`) and the fit
  groups, `--order` the models as the sweep lists them (smallest first).

Deliberately left out: file names (the workflow's rules name every path).
"""

from __future__ import annotations

from collections.abc import Iterable

from scalerl.sweep.config import SweepConfig
from scalerl.sweep.runs import AXES, Run

__all__ = ["fit_options", "predict_options", "sweep_mates", "race_options", "report_options"]


def fit_options(sweep: SweepConfig, run: Run) -> list[str]:
    """`scalerl fit` options of `run`'s fits (module docstring)."""
    meta = [arg for key, value in run.meta().items() for arg in ("--meta", f"{key}={value}")]
    return ["--group-by", sweep.fit.group_by, "--compute-col", sweep.fit.compute_col, *meta,
            *sweep.fit.extra_args]


def predict_options(sweep: SweepConfig, *, all_chunks: bool) -> list[str]:
    """`scalerl predict` options of every run (module docstring)."""
    return [*(["--all-chunks"] if all_chunks else []), "--chunks", str(sweep.chunks),
            "--compute-col", sweep.fit.compute_col, *sweep.fit.predict_args]


def sweep_mates(sweep: SweepConfig, run: Run, runs: Iterable[Run]) -> list[Run]:
    """The runs fitted jointly with `run` (`fit.joint`): the others of the same recipe, batch
    and mix, which differ from it along model, gen_len or seed (module docstring)."""
    if not sweep.fit.joint:
        return []
    same = ("recipe", "prompts", "generations", "mix")
    return [r for r in runs if r.id != run.id
            and all(getattr(r, k) == getattr(run, k) for k in same)]


def race_options(sweep: SweepConfig, runs: Iterable[Run]) -> list[str]:
    """`scalerl race` options (module docstring)."""
    racing = sweep.grid.racing
    groups = [arg for run in runs for arg in ("--group", f"{run.id}={run.cell}")]
    return ["--task", racing.task, "--margin", str(racing.margin), "--min-fraction",
            str(racing.min_fraction), *groups]


def report_options(sweep: SweepConfig) -> list[str]:
    """`scalerl report` options (module docstring)."""
    return ["--by", ",".join((*AXES, sweep.fit.group_by)),
            "--order", "model=" + ",".join(sweep.grid.models)]
