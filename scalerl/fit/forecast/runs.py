"""Forecast the runs of any log: per-run predictions, verdicts and the table the CLIs print.

The shared core of `scalerl predict INPUT...`, `scalerl race INPUT...` and `scalerl watch`:

- `run_curves(groups, info)`: the curves of `scalerl.fit.readers.inputs.load_groups` named for
  predictions.parquet: `run` = the group's run (other group keys but the task appended,
  `run/seed=1`), `task` = the group's task, else the metric's name (`eval/acc`);
- `final_compute_of(curve, final_compute=..., final_step=...)`: the planned total in the
  curve's compute units: given as is, or from a final step: the step itself when compute is
  the step, else latest compute x final step / latest step (compute per step assumed constant
  from here on, as `scalerl predict --run-config` does);
- `forecast_rows(curve, final, config, upto=k)`: PREDICTIONS_SCHEMA rows (sigmoid and power
  law, `scalerl.fit.forecast.predict.predict_final`) from the points 0..k; `chunk` holds k, the index
  of the latest point used (scalerl's own evals use their chunk instead), `latest_reward`
  that point's reward;
- `verdicts(rows, ...)`: per run "too early" (under `min_fraction` of its compute, too few
  points, or no interval of A yet: `interval_status` says why), "collapsed", "stop" (the
  racing rule of `scalerl.fit.forecast.racing.race`: A's interval clearly below the best's, or, with
  no interval of A, the recent pass rate clearly below the run's own start),
  "continue", or "finished" once it reached its final compute;
- `forecast_table(rows, verdicts, ...)`: the text table (run, latest, predicted final
  [interval of the one eval the user will observe, `scalerl.fit.forecast.intervals`], A [calibrated
  interval], reached C_mid, interval status, verdict).

`add_input_arguments(parser)` declares the options every command over logs shares (inputs,
--metric, --compute-col, --group-by, MLflow selection, --final-compute / --final-step).

Deliberately left out: forecasting a metric that falls (a loss): the sigmoid rises towards A.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from scalerl.fit.curves.sigmoid import FitConfig
from scalerl.fit.forecast.predict import predict_final, prediction_rows
from scalerl.fit.readers.inputs import STEP_COLUMNS, InputError, Inputs, PointGroup, load_groups

__all__ = ["RunCurve", "run_curves", "final_compute_of", "forecast_rows", "verdicts",
           "forecast_table", "add_input_arguments", "curves_from_args", "latest_rows"]

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
        curves.append(RunCurve(run, task, g.compute, g.reward, g.step,
                               g.n_rows.astype(float) if binomial else None,
                               info["compute_col"] in STEP_COLUMNS))
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
                  upto: int | None = None) -> tuple[list[dict], list]:
    """PREDICTIONS_SCHEMA rows from points 0..upto (default: all) and the `Prediction`s."""
    k = curve.compute.size - 1 if upto is None else int(upto)
    n = None if curve.n_samples is None else curve.n_samples[:k + 1]
    preds = predict_final(curve.compute[:k + 1], curve.reward[:k + 1],
                          max(final, float(curve.compute[k])), config, n_samples=n)
    rows = prediction_rows(curve.run, curve.task, k, float(curve.compute[k]), final, preds,
                           latest_reward=float(curve.reward[k]))
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
    from scalerl.fit.curves.compare import A_MARGIN
    from scalerl.fit.forecast.racing import race

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
            elif d["decision"] == "stop":  # by A, or by the observed fallback
                out[key] = "stop"
            elif d["compute_fraction"] < min_fraction or d["A"] is None \
                    or d["A_lo"] is None:  # no interval of A: racing cannot judge it yet
                out[key] = "too early"
            else:
                out[key] = "continue"
    return out


def _interval(value: float, lo: float, hi: float) -> str:
    if not np.isfinite(value):
        return "-"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{value:.3f}"
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def _final_interval(r: pd.Series) -> tuple[float, float]:
    """The interval of the one eval the user will observe at the final compute; for rows
    written before it existed (no interval_status), the mean curve's."""
    if isinstance(r.get("interval_status"), str):
        return r["observed_final_lo"], r["observed_final_hi"]
    return r["predicted_final_lo"], r["predicted_final_hi"]


def forecast_table(rows: pd.DataFrame, verdict: Mapping[tuple[str, str], str] | None = None,
                   *, steps: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """Text lines: one per run and task from its latest sigmoid row; `steps`: the progress
    text per (run, task) (e.g. 'step 120/400'), default the compute fraction."""
    latest = latest_rows(rows)
    conf = latest["confidence"].dropna() if "confidence" in latest.columns else ()
    level = f"{conf.iloc[0]:.0%}" if len(conf) else "95%"
    header = ["run", "task", "progress", "latest", f"predicted final [{level}, one eval]",
              f"A [{level}]", "C_mid", "interval", "verdict" if verdict is not None else "status"]
    table = []
    for _, r in latest.iterrows():
        key = (str(r["run"]), str(r["task"]))
        progress = (steps or {}).get(key, f"{r['compute_fraction']:.0%}")
        state = r["status"] if r["status"] not in ("ok", "not_converged") else ""
        table.append([key[0], key[1], progress,
                      "-" if not np.isfinite(r["latest_reward"]) else f"{r['latest_reward']:.3f}",
                      _interval(r["predicted_final"], *_final_interval(r)),
                      _interval(r["A"], r["A_lo"], r["A_hi"]),
                      "reached" if r["reached_c_mid"] else ("not yet" if not state else "-"),
                      r["interval_status"] if isinstance(r.get("interval_status"), str)
                      else "-",
                      (verdict or {}).get(key, state or "-")])
    if latest["task"].nunique() <= 1:  # one task: its name goes in the title, not a column
        header.pop(1)
        table = [row[:1] + row[2:] for row in table]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    return ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip()
            for line in [header, *table]]


# -- command-line options shared by predict, race and watch --------------------------------

def add_input_arguments(parser: argparse.ArgumentParser, *, final_required: bool = True,
                        inputs_nargs: str = "+"):
    """Declare the shared options; returns the --final-step / --final-compute group (a
    command may add its own alternative to it)."""
    parser.add_argument("inputs", nargs=inputs_nargs, metavar="INPUT",
                        help="TensorBoard log dirs, MLflow stores (.db, mlruns, URI), "
                        "CSV/Parquet files or dirs (W&B exports, eval points); NAME=INPUT "
                        "names a run")
    parser.add_argument("--metric", "--reward-col", dest="metric", help="the metric to "
                        "forecast: a TensorBoard tag, MLflow metric or table column (auto: "
                        "pass_rate, accuracy, reward, ... by name)")
    parser.add_argument("--compute-col", help="compute axis: step (default for logs), "
                        "wall_time (seconds), or a logged metric/column such as "
                        "compute_device_hours")
    parser.add_argument("--group-by", help="comma-separated columns, one run per value "
                        "combination (default: run and task when they vary)")
    parser.add_argument("--experiment", action="append", default=[], metavar="NAME",
                        help="MLflow: only the runs of this experiment (repeatable)")
    parser.add_argument("--run-id", action="append", default=[], metavar="ID",
                        help="MLflow: only this run (repeatable)")
    final = parser.add_mutually_exclusive_group(required=final_required)
    final.add_argument("--final-step", type=float, help="the runs' planned last step")
    final.add_argument("--final-compute", type=float, help="the runs' planned total compute, "
                       "in the units of the compute axis")
    return final


def inputs_from_args(args: argparse.Namespace) -> Inputs:
    return Inputs(args.inputs, experiments=args.experiment, run_ids=args.run_id)


def curves_from_args(args: argparse.Namespace, inputs: Inputs | None = None
                     ) -> tuple[list[RunCurve], dict]:
    """Read the inputs of a command (or re-read `inputs`) into named curves."""
    group_by = [c.strip() for c in args.group_by.split(",") if c.strip()] \
        if args.group_by else None
    groups, info = load_groups(inputs or inputs_from_args(args), compute_col=args.compute_col,
                               reward_col=args.metric, group_by=group_by)
    return run_curves(groups, info), info
