"""Forecast the runs of any log: per-run curves, predictions and verdicts.

The shared core of `scalerl predict INPUT...`, `scalerl race INPUT...` and `scalerl watch`:

- `run_curves(groups, info)`: the curves of `scalerl.fit.readers.inputs.load_groups` named for
  predictions.parquet: `run` = the group's run (other group keys but the task appended,
  `run/seed=1`), `task` = the group's task, else the metric's name (`eval/acc`);
- `final_compute_of(curve, final_compute=..., final_step=...)`: the planned total in the
  curve's compute units: given as is, or from a final step: the step itself when compute is
  the step, else latest compute x final step / latest step (compute per step assumed constant
  from here on, as `scalerl predict --run-config` does); `reached_final(curve, final)`;
- `forecast_rows(curve, final, config, upto=k, prior=...)`: PREDICTIONS_SCHEMA rows (sigmoid
  and power law, `scalerl.fit.forecast.predict.predict_final`, with the curve prior `prior`)
  from the points 0..k; `chunk` holds k, the index of the latest point used (scalerl's own
  evals use their chunk instead), `latest_reward` that point's reward, `smoothed_reward` the
  mean of the last few; `latest_rows(rows)`: the latest row per run and task;
- `sweeps_of(curves, by)`: the curves of one task (and one value of each `by` column, e.g.
  recipe) as one sweep; `sweep_rows(sweep, finals, config, prior=...)`: the latest rows of a
  sweep's runs with their sigmoids fitted jointly (`predict_sweep`): what `scalerl predict
  --joint` does, since a log does not say which runs share a recipe;
- `verdicts(rows, ...)`: per run "too early" (under `min_fraction` of its compute, too few
  points, or no interval of A yet: `interval_status` says why), "collapsed", "stop" (the
  racing rule of `scalerl.fit.forecast.racing.race`: A's interval clearly below the best's,
  or, with no interval of A, the recent pass rate clearly below the run's own start),
  "continue", or "finished" once it reached its final compute.

Deliberately left out: forecasting a metric that falls (a loss: the sigmoid rises towards A),
the command-line options (`scalerl.fit.commands.options`) and the printed table
(`scalerl.fit.report.forecasts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from scalerl.fit.curves.compare import A_MARGIN
from scalerl.fit.curves.sigmoid import FitConfig
from scalerl.fit.forecast.predict import (
    DEFAULT_PRIOR,
    predict_final,
    predict_sweep,
    prediction_rows,
    smoothed_level,
)
from scalerl.fit.forecast.racing import race
from scalerl.fit.readers.inputs import STEP_COLUMNS, PointGroup
from scalerl.fit.readers.tables import InputError

__all__ = ["RunCurve", "run_curves", "final_compute_of", "reached_final", "forecast_rows",
           "sweeps_of", "sweep_rows", "latest_rows", "verdicts", "VERDICTS"]

VERDICTS = ("too early", "collapsed", "stop", "continue", "finished")


@dataclasses.dataclass(frozen=True)
class RunCurve:
    """One run's curve for one task/metric, sorted by compute."""

    run: str
    task: str
    compute: np.ndarray  # [N]
    reward: np.ndarray  # [N]
    step: np.ndarray | None  # [N] or None when the log has no step column
    n_samples: np.ndarray | None  # [N] graded samples per point (per-sample evals), else None
    step_is_compute: bool = False  # the compute axis is the step itself
    labels: tuple[tuple[str, str], ...] = ()  # the group's key and metadata, (column, value)

    def label(self, column: str) -> str | None:
        return dict(self.labels).get(column)

    @property
    def latest_step(self) -> float | None:
        return None if self.step is None else float(self.step[-1])


def _name(key: Mapping, meta: Mapping, metric: str) -> tuple[str, str]:
    task = key.get("task", meta.get("task"))
    run = key.get("run", meta.get("run"))
    extra = [f"{k}={v}" for k, v in key.items() if k not in ("run", "task")]
    parts = [str(p) for p in (run, *extra) if p is not None and str(p) != ""]
    return "/".join(parts) or "run", metric if task is None else str(task)


def run_curves(groups: Sequence[PointGroup], info: Mapping) -> list[RunCurve]:
    """The groups of `load_groups` as named curves (see the module docstring)."""
    curves = []
    for g in groups:
        run, task = _name(g.key, g.meta, str(info["reward_col"]))
        binomial = g.stderr is not None and bool(np.isfinite(g.stderr).all())
        labels = tuple(sorted((str(k), str(v)) for k, v in {**g.meta, **g.key}.items()))
        curves.append(RunCurve(run, task, g.compute, g.reward, g.step,
                               g.n_rows.astype(float) if binomial else None,
                               info["compute_col"] in STEP_COLUMNS, labels))
    names = [(c.run, c.task) for c in curves]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"several curves are named {dup[0]}: group them apart (--group-by "
                         "with the column that tells them apart)")
    return curves


def final_compute_of(curve: RunCurve, *, final_compute: float | None = None,
                     final_step: float | None = None) -> float:
    """The run's planned total compute (see the module docstring)."""
    if final_compute is not None:
        return float(final_compute)
    if final_step is None:
        raise ValueError("give the run's planned total: --final-step N or --final-compute X")
    if curve.step_is_compute:
        return float(final_step)
    if curve.step is None or not np.isfinite(curve.step[-1]):
        raise InputError(f"{curve.run}: --final-step needs a step column "
                         f"({', '.join(STEP_COLUMNS)}) beside the compute column; pass "
                         "--final-compute")
    latest_step, latest = float(curve.step[-1]), float(curve.compute[-1])
    if latest_step <= 0 or latest <= 0:
        raise ValueError(f"{curve.run}: only step 0 is logged so far; the final compute "
                         "cannot be estimated from compute per step: pass --final-compute")
    return latest * float(final_step) / latest_step


def reached_final(curve: RunCurve, final: float) -> bool:
    return float(curve.compute[-1]) >= final * (1 - 1e-9)


def forecast_rows(curve: RunCurve, final: float, config: FitConfig, *,
                  upto: int | None = None, prior=DEFAULT_PRIOR) -> tuple[list[dict], list]:
    """PREDICTIONS_SCHEMA rows from points 0..upto (default: all) and the `Prediction`s
    (`prior` as in `predict_final`)."""
    k = curve.compute.size - 1 if upto is None else int(upto)
    n = None if curve.n_samples is None else curve.n_samples[:k + 1]
    preds = predict_final(curve.compute[:k + 1], curve.reward[:k + 1],
                          max(final, float(curve.compute[k])), config, n_samples=n,
                          prior=prior)
    rows = prediction_rows(curve.run, curve.task, k, float(curve.compute[k]), final, preds,
                           latest_reward=float(curve.reward[k]),
                           smoothed_reward=smoothed_level(curve.reward[:k + 1]))
    return rows, preds


def sweeps_of(curves: Sequence[RunCurve], by: Sequence[str] = ()) -> list[list[RunCurve]]:
    """The curves split into sweeps: one per task and value of the `by` columns (the group's
    key or metadata, e.g. recipe), each fitted jointly by `sweep_rows`."""
    sweeps: dict[tuple, list[RunCurve]] = {}
    for curve in curves:
        missing = [col for col in by if curve.label(col) is None]
        if missing:
            raise InputError(f"{curve.run}: no column {', '.join(missing)} to tell its sweep "
                             "(--joint-by names group or metadata columns of the inputs; "
                             "add them to --group-by)")
        sweeps.setdefault((curve.task, *(curve.label(col) for col in by)), []).append(curve)
    return [sweeps[key] for key in sorted(sweeps)]


def sweep_rows(curves: Sequence[RunCurve], finals: Sequence[float], config: FitConfig, *,
               prior=DEFAULT_PRIOR) -> tuple[list[dict], list]:
    """PREDICTIONS_SCHEMA rows of the latest point of every run of one sweep, the sigmoids
    fitted jointly (`scalerl.fit.forecast.predict.predict_sweep`), and the `Prediction`s."""
    points = [(c.compute, c.reward) for c in curves]
    ends = [max(f, float(c.compute[-1])) for c, f in zip(curves, finals)]
    preds = predict_sweep(points, ends, config, n_samples=[c.n_samples for c in curves],
                          prior=prior)
    rows = []
    for curve, final, p in zip(curves, finals, preds):
        k = curve.compute.size - 1
        rows += prediction_rows(curve.run, curve.task, k, float(curve.compute[k]), final, p,
                                latest_reward=float(curve.reward[k]),
                                smoothed_reward=smoothed_level(curve.reward))
    return rows, preds


def latest_rows(rows: pd.DataFrame, form: str = "sigmoid") -> pd.DataFrame:
    """The latest row of every run and task for one form."""
    sub = rows[rows["form"] == form]
    return sub.sort_values(["run", "task", "chunk"]).groupby(["run", "task"], sort=True) \
        .tail(1).reset_index(drop=True)


def verdicts(rows: pd.DataFrame, *, finished: set[tuple[str, str]] = frozenset(),
             min_fraction: float = 0.3, margin: float | None = None,
             groups: Mapping[str, str] | None = None) -> dict[tuple[str, str], str]:
    """{(run, task): verdict} from the latest sigmoid rows (see the module docstring)."""
    out = {}
    for task, sub in rows.groupby(rows["task"].astype(str), sort=True):
        result = race(sub, task=task, margin=A_MARGIN if margin is None else margin,
                      min_fraction=min_fraction, groups=groups or {})
        for d in result["decisions"]:
            key = (d["run"], task)
            if key in finished:
                out[key] = "finished"
            elif d["status"] == "collapsed":
                out[key] = "collapsed"
            elif d["decision"] == "stop":  # by A, or by the observed rule
                out[key] = "stop"
            elif d["compute_fraction"] < min_fraction or d["A"] is None \
                    or d["A_lo"] is None:  # no interval of A: racing cannot judge it yet
                out[key] = "too early"
            else:
                out[key] = "continue"
    return out
