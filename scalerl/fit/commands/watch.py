"""`scalerl watch INPUT... --metric M (--final-step N | --final-compute X)`: follow runs while
they train, with a forecast of where each is heading.

Every `--interval` seconds (default 30; a plain wait between polls, never a busy loop) the
inputs are read again (TensorBoard event files incrementally, MLflow stores and tables whole:
`scalerl.fit.readers.inputs`); each run whose points changed since its last forecast is predicted
again (`scalerl.fit.forecast.runs`: sigmoid and power law, calibrated intervals; the sigmoid
with the curve prior `--prior`, the shipped one by default, which it names when it starts).
After each poll with a change:
- one table, kept up to date (redrawn in place on a terminal, printed again when it changed
  otherwise; `scalerl.utils.log.LiveBlock`): run, progress (step / final step), latest value,
  predicted final [95 % interval of one eval], A [interval], whether C_mid is reached, the
  interval status, and the verdict: too early (under `--min-fraction` of its compute, too few
  points, or no interval of A yet), collapsed, stop (the racing rule, `scalerl.fit.forecast.racing`:
  its A interval lies clearly below the best run's), continue, or finished;
- OUT/predictions.parquet (every forecast made so far, PREDICTIONS_SCHEMA, so `scalerl race
  --predictions` and a backtest read it) and OUT/forecast.png (points, fitted sigmoid,
  forecast to the final compute, predicted final with its interval) are rewritten atomically.

It exits (status 0) once every run has reached its final compute and was forecast on its last
points, or after `--max-polls` polls. Ctrl-C stops it between two polls or in a refit; both
files are always whole (the last refit's), and it exits with status 130. An input that cannot
be read yet (not created yet, no event file, the metric not logged yet) is reported once and
read again at the next poll; TensorBoard run directories that appear later are picked up. A
CSV is read whole at every poll: its writer should append whole lines (TensorBoard and MLflow
need no such care).

Deliberately left out: notifications and stopping runs itself (it says which to stop).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from scalerl.fit.commands.options import (
    add_final_options,
    add_fit_options,
    add_input_options,
    curves_from_args,
    fit_config,
    inputs_from_args,
    prior_from_args,
)
from scalerl.fit.forecast.predict import merge_predictions, read_predictions, write_predictions
from scalerl.fit.forecast.runs import final_compute_of, forecast_rows, reached_final, verdicts
from scalerl.fit.report.forecasts import forecast_table
from scalerl.fit.report.plots import plot_forecasts
from scalerl.utils.log import LiveBlock, progress

MIN_INTERVAL_S = 0.1  # the shortest wait between two polls


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    add_input_options(parser)
    add_final_options(parser, required=True)
    parser.add_argument("--out", default="watch", help="directory for predictions.parquet and "
                        "forecast.png (default ./watch)")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between two "
                        f"polls (default 30, at least {MIN_INTERVAL_S})")
    parser.add_argument("--max-polls", type=int, help="stop after this many polls (default: "
                        "until every run reached its final compute)")
    parser.add_argument("--min-fraction", type=float, default=0.3, help="verdict 'too early' "
                        "before this fraction of a run's compute (default 0.3)")
    parser.add_argument("--margin", type=float, help="racing margin on A (default 0.02)")
    add_fit_options(parser, forecast=True)


class Watch:
    """The state of one watch: what was forecast, from which points, and the outputs."""

    def __init__(self, args: argparse.Namespace, config, out: Path, prior=None):
        self.args, self.config, self.out, self.prior = args, config, out, prior
        self.inputs = None  # made at the first poll that finds every input
        self.seen: dict[tuple[str, str], tuple[int, float]] = {}  # (run, task) -> (N, last C)
        self.latest: dict[tuple[str, str], dict] = {}  # (run, task) -> forecast for the plot
        path = out / "predictions.parquet"
        self.rows = read_predictions(path) if path.exists() else None
        self.curves, self.info, self.finished = [], {}, set()

    def poll(self) -> bool:
        """Read the inputs and refit the runs with new points; True when anything changed."""
        if self.inputs is None:  # an input that does not exist yet raises: read again later
            self.inputs = inputs_from_args(self.args)
        curves, info = curves_from_args(self.args, self.inputs)
        self.curves, self.info = curves, info
        new_rows, changed = [], False
        for curve in curves:
            key = (curve.run, curve.task)
            state = (int(curve.compute.size), float(curve.compute[-1]))
            try:
                final = final_compute_of(curve, final_compute=self.args.final_compute,
                                         final_step=self.args.final_step)
            except ValueError:  # e.g. only step 0 so far: no compute per step yet
                continue
            if reached_final(curve, final):
                self.finished.add(key)
            if self.seen.get(key) == state:
                continue
            rows, preds = forecast_rows(curve, final, self.config, prior=self.prior)
            sig = next(p for p in preds if p.form == "sigmoid")
            self.latest[key] = {"run": curve.run, "task": curve.task, "final_compute": final,
                                "predicted_final": sig.predicted_final,
                                "predicted_final_lo": sig.predicted_final_lo,
                                "predicted_final_hi": sig.predicted_final_hi,
                                "params": sig.params}
            new_rows += rows
            self.seen[key] = state
            changed = True
        if new_rows:
            self.rows = merge_predictions(self.rows, new_rows)
        return changed

    def progress_text(self) -> dict[tuple[str, str], str]:
        out = {}
        for curve in self.curves:
            final = self.latest.get((curve.run, curve.task), {}).get("final_compute")
            if curve.step is not None and self.args.final_step is not None:
                out[(curve.run, curve.task)] = f"{curve.latest_step:g}/{self.args.final_step:g}"
            elif final:
                out[(curve.run, curve.task)] = f"{curve.compute[-1]:.4g}/{final:.4g}"
        return out

    def table(self) -> list[str]:
        keys = {(c.run, c.task) for c in self.curves}
        rows = self.rows[[k in keys for k in zip(self.rows["run"].astype(str),
                                                   self.rows["task"].astype(str))]]
        verdict = verdicts(rows, finished=self.finished, min_fraction=self.args.min_fraction,
                           margin=self.args.margin)
        for key, v in verdict.items():
            if key in self.latest:
                self.latest[key]["verdict"] = v
        title = (f"{self.info['reward_col']} against {self.info['compute_col']}: "
                 f"{len(keys)} run(s), {len(self.finished & keys)} finished")
        return [title, *forecast_table(rows, verdict, steps=self.progress_text())]

    def write(self) -> None:
        write_predictions(self.out / "predictions.parquet", self.rows)
        plot_forecasts(self.curves, [self.latest[(c.run, c.task)] for c in self.curves
                                     if (c.run, c.task) in self.latest],
                       self.out / "forecast.png", xlabel=self.info["compute_col"],
                       ylabel=self.info["reward_col"])

    def done(self) -> bool:
        keys = {(c.run, c.task) for c in self.curves}
        return bool(keys) and keys <= self.finished


def watch(args: argparse.Namespace, *, wait: Callable[[float], None] = time.sleep,
          block: LiveBlock | None = None) -> int:
    """The polling loop; `wait(seconds)` sleeps between polls (a test passes its own)."""
    if not np.isfinite(args.interval) or args.interval < MIN_INTERVAL_S:
        raise ValueError(f"--interval must be at least {MIN_INTERVAL_S} s, got {args.interval}")
    if args.max_polls is not None and args.max_polls < 1:
        raise ValueError(f"--max-polls must be >= 1, got {args.max_polls}")
    config = fit_config(args)
    prior, about = prior_from_args(args)
    progress(f"watch: {about}")
    state = Watch(args, config, Path(args.out), prior)
    block = block or LiveBlock()
    polls, lines, said = 0, ["waiting for the first points"], None
    try:
        while True:
            polls += 1
            try:
                if state.poll():
                    lines = state.table()
                    state.write()
                note = f"poll {polls}, {time.strftime('%H:%M:%S')}"
            except (ValueError, FileNotFoundError) as err:  # not written yet: read again
                note = f"poll {polls}, {time.strftime('%H:%M:%S')}: cannot read yet"
                if str(err) != said:  # each new reason once, also in a log
                    progress(f"watch: cannot read the inputs yet (read again every "
                             f"{args.interval:g} s): {err}")
                    said = str(err)
            if state.done():
                block.show(lines, note + ": every run reached its final compute")
                break
            if args.max_polls is not None and polls >= args.max_polls:
                block.show(lines, note + f": stopped after {polls} poll(s)")
                break
            block.show(lines, note + f", next in {args.interval:g} s (Ctrl-C stops)")
            wait(args.interval)
    except KeyboardInterrupt:
        block.close()
        progress(f"watch: interrupted after {polls} poll(s); {args.out} holds the last "
                 "forecast")
        return 130
    block.close()
    progress(f"watch: {polls} poll(s); wrote {Path(args.out) / 'predictions.parquet'} and "
             f"{Path(args.out) / 'forecast.png'}")
    return 0


def run(args: argparse.Namespace) -> int:
    return watch(args)
