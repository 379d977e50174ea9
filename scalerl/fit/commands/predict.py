"""`scalerl predict (INPUT... | --eval EVAL...) (--final-step N | --final-compute X |
--run-config run.yaml) [--out FILE]`: where is each run heading?

Predicts each run's final value and asymptote A from its points so far
(`scalerl.fit.forecast.predict`) with the sigmoid and the power law, prints one line per run
(latest value, predicted final [interval], A [interval], whether C_mid is reached, status:
collapsed, few_points, ...) and, with `--out`, writes the rows of the latest point of every run
into predictions.parquet (`PREDICTIONS_SCHEMA`), atomically. Rows of that (run, task, chunk)
already in FILE are replaced, all others kept, so re-running after each eval is idempotent and a
crashed run resumes. `--all-chunks` predicts at every point (the points up to it) and skips
those FILE already has unless `--force`: the input of a backtest
(`scalerl.fit.forecast.backtest`).

INPUT: any run's logs (`scalerl.fit.readers.inputs`): TensorBoard log directories, MLflow
stores, CSV/Parquet tables (W&B history or chart exports, one row per eval point), several runs
per call (one input per run, `NAME=INPUT` to name it, or `--group-by`). `--metric` picks the
value to forecast (the task column of the output is the metric's name unless the table has a
task), `--compute-col` the x-axis (default: step). For these rows `chunk` is the index of the
latest point fitted.

Curve prior (`--prior`, default shipped): the sigmoid of a pass-rate curve is fitted with the
prior over curve shape learned from public RL runs that ships with scalerl
(`scalerl.fit.forecast.prior`; rebuilt by `scalerl prior`): the run's own points dominate once
it has many; early on the prior supplies the shape an RL curve usually has. The command prints
which prior (its sources, curves and build date) before anything else; `--prior PATH` takes a
rebuilt one, `--prior none` the plain least-squares fit. The power law never uses it.

Intervals: 95 % by default (`confidence` in --config), calibrated: with the prior from 4
points on (its posterior plus the discrepancy calibrated on held-out public sources), without
it from the run's own backtest (`scalerl.fit.forecast.intervals`). `observed_final_lo/hi` for
the eval of the final model the user will see, `predicted_final_lo/hi` for the mean curve,
`A_lo/hi`, `C_mid_lo/hi`; `interval_status` says when the data cannot support one yet (bounds
empty).

EVAL (`--eval`): scalerl's per-sample eval Parquet files (`scalerl/eval/schema.py`) of one run;
only the held-out split (`dataset` = val) is used when the column exists. Pass rate per (task,
chunk) = mean of `correct`, with n = its number of samples (binomial weights, `--weighting
binomial`); the default compute column is compute_device_hours.

Final compute: `--final-compute X` in the units of the compute axis; `--final-step N`: N when
the compute axis is the step, else the latest compute x N / the latest step (compute per step
assumed constant from here on); or `--run-config run.yaml`: N = sum(chunk_steps), or
steps_per_chunk x `--chunks`.

Joint fit (`--joint`, INPUT only): the runs of a sweep that share a recipe and differ along a
sweep axis (model size, generation length, ...) share most of their curve's shape (Khatri et al.
2025: B and C_mid are set mostly by the recipe). With `--joint` the runs of each task are one
sweep and their sigmoids are fitted together under the curve prior
(`scalerl.fit.forecast.joint`: each run's shape scatters about the sweep's), so a run that
started late borrows the bend its sweep-mates already show. The command knows which runs
share a recipe only from the user: `--joint` says all runs given do; `--joint-by recipe` (a
group or metadata column, e.g. with `--group-by run,recipe`) pools only runs with equal
values. The power law and runs the prior does not apply to are fitted alone. For scalerl's
own runs, `--eval` (one run) with `--sweep-eval` (its sweep-mates' eval files: the workflow
passes those of the runs with the same recipe, batch and mix, `fit.joint`) fits the run
jointly with its mates at each chunk, the sweep's runs being evaluated chunk by chunk in step;
only the `--eval` run's rows are written.

`--backtest` (INPUT only): the logs are of finished runs; predicts each from the points up to
`--at` fractions of its last compute (default 0.25, 0.5, 0.75) and prints the backtest table
(`scalerl.fit.forecast.backtest`): median and p90 absolute error against the last point, for the
sigmoid, the power law and the two persistence forecasts (the value when predicting, and the
mean of the last few values then: the smoothed one), and the ratio of the forecast's median
error to each.

Deliberately left out: stopping runs (`scalerl race`), following them while they train
(`scalerl watch`), and a plot (`scalerl watch` draws forecast.png).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from scalerl.fit.commands.options import (
    add_final_options,
    add_fit_options,
    add_input_options,
    curves_from_args,
    fit_config,
    prior_from_args,
)
from scalerl.fit.forecast.backtest import backtest_curve, backtest_sweep, backtest_table
from scalerl.fit.forecast.predict import (
    merge_predictions,
    predict_final,
    predict_sweep,
    prediction_rows,
    read_predictions,
    smoothed_level,
    write_predictions,
)
from scalerl.fit.forecast.runs import final_compute_of, forecast_rows, sweep_rows, sweeps_of
from scalerl.fit.readers.tables import InputError, read_tables, resolve_column
from scalerl.fit.report.backtest import backtest_markdown
from scalerl.fit.report.forecasts import forecast_table
from scalerl.utils.log import progress

EVAL_COMPUTE_COLUMNS = ("compute_device_hours", "compute_flops", "compute", "step")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    add_input_options(parser, nargs="*")
    final = add_final_options(parser, required=False)
    final.add_argument("--run-config", help="run.yaml: total steps from its chunking")
    parser.add_argument("--eval", nargs="+", metavar="EVAL",
                        help="scalerl per-sample eval Parquet files (or dirs) of one run")
    parser.add_argument("--sweep-eval", nargs="+", metavar="EVAL",
                        help="with --eval: the eval files of the other runs of its sweep (same "
                        "recipe, differing along a sweep axis): the --eval run is fitted "
                        "jointly with them at each chunk (its rows only are written)")
    parser.add_argument("--chunks", type=int, help="number of chunks, with --run-config when "
                        "it has steps_per_chunk rather than chunk_steps")
    parser.add_argument("--out", help="predictions.parquet to update")
    parser.add_argument("--all-chunks", action="store_true", help="predict at every chunk "
                        "(point), not only the latest (skips those already in --out)")
    parser.add_argument("--force", action="store_true", help="with --all-chunks: redo chunks "
                        "already in --out")
    parser.add_argument("--backtest", action="store_true", help="INPUT holds finished runs: "
                        "score predictions from part of each against its end, and against "
                        "the persistence (last-value) forecast")
    parser.add_argument("--at", default="0.25,0.5,0.75", help="with --backtest: fractions of "
                        "the compute to predict from (default 0.25,0.5,0.75)")
    parser.add_argument("--joint", action="store_true", help="INPUT's runs are one sweep of "
                        "one recipe (they differ along a sweep axis: model size, length, ...): "
                        "fit each task's runs jointly under the curve prior")
    parser.add_argument("--joint-by", metavar="COLUMNS", help="with --joint: runs sharing "
                        "these comma-separated group or metadata columns (e.g. recipe) form "
                        "one sweep; the others are fitted apart")
    add_fit_options(parser, forecast=True)


def eval_points(paths, compute_col: str | None, *, one_run: bool = True):
    """Per (task, chunk): compute, step, pass rate, samples; and the run id. `one_run=False`:
    the files may hold several runs (the points get a `run` column, the id is None)."""
    df = read_tables(paths)
    need = [c for c in ("run", "task", "chunk", "correct") if c not in df.columns]
    if need:
        raise InputError(f"the eval files lack column(s) {', '.join(need)}: give scalerl's "
                         "per-sample eval Parquet (scalerl/eval/schema.py)")
    if "dataset" in df.columns and (df["dataset"] == "val").any():
        df = df[df["dataset"] == "val"]
    runs = sorted(df["run"].astype(str).unique())
    if one_run and len(runs) != 1:
        raise InputError(f"the eval files hold {len(runs)} runs ({', '.join(runs[:5])}); "
                         "`scalerl predict --eval` takes the evals of one run (its sweep-"
                         "mates' go to --sweep-eval)")
    ccol = resolve_column(df, compute_col, EVAL_COMPUTE_COLUMNS, "compute", "--compute-col")
    df = df.assign(_correct=df["correct"].astype(float), run=df["run"].astype(str))
    step = df["step"] if "step" in df.columns else df["chunk"]
    df = df.assign(_step=step)
    keys = ["task", "chunk"] if one_run else ["run", "task", "chunk"]
    points = df.groupby(keys, sort=True).agg(
        compute=(ccol, "mean"), step=("_step", "max"), pass_rate=("_correct", "mean"),
        n=("_correct", "size")).reset_index()
    return (runs[0] if one_run else None), ccol, points


def _mates(args, run_id: str) -> dict[str, tuple]:
    """The --sweep-eval runs: {run: (points, final compute)} (the chunk schedule, hence the
    total steps, is the sweep's: the same as the --eval run's)."""
    if not args.sweep_eval:
        return {}
    _, _, points = eval_points(args.sweep_eval, args.compute_col, one_run=False)
    mates = {str(run): (sub.drop(columns="run"), final_compute_from(args, sub))
             for run, sub in points.groupby("run", sort=True) if str(run) != run_id}
    progress(f"predict: fitted jointly with its sweep-mates (--sweep-eval): "
             f"{', '.join(mates) or 'none'}")
    return mates


def _predict_chunk(upto, final, mates, task, chunk, config, prior) -> list:
    """The predictions of the --eval run from its points `upto`, jointly with its mates'
    points of `task` up to the same chunk when there are any."""
    own = (upto["compute"].to_numpy(float), upto["pass_rate"].to_numpy(float))
    n_own = upto["n"].to_numpy(float)
    seen = [(pts[(pts["task"] == task) & (pts["chunk"] <= chunk)], f) for pts, f in mates]
    seen = [(pts.sort_values("chunk"), f) for pts, f in seen if len(pts)]
    if not seen:
        return predict_final(*own, final, config, n_samples=n_own, prior=prior)
    curves = [own] + [(p["compute"].to_numpy(float), p["pass_rate"].to_numpy(float))
                      for p, _ in seen]
    finals = [final] + [max(f, float(p["compute"].iloc[-1])) for p, f in seen]
    n = [n_own] + [p["n"].to_numpy(float) for p, _ in seen]
    return predict_sweep(curves, finals, config, n_samples=n, prior=prior)[0]


def total_steps_from(args) -> float | None:
    """--final-step, or the total steps of --run-config; None when neither is given."""
    if args.final_step is not None:
        return float(args.final_step)
    if args.run_config is None:
        return None
    from scalerl.rl.run_config import load_run_config

    cfg = load_run_config(args.run_config)
    if cfg.chunk_steps:
        return float(sum(cfg.chunk_steps))
    if args.chunks:
        return float(cfg.steps_per_chunk * args.chunks)
    raise ValueError(f"{args.run_config} gives steps_per_chunk = {cfg.steps_per_chunk} but "
                     "not the number of chunks: pass --chunks N (or --final-compute)")


def final_compute_from(args, points) -> float:
    if args.final_compute is not None:
        return float(args.final_compute)
    total = total_steps_from(args)
    latest = points.sort_values("chunk").iloc[-1]
    if latest["step"] <= 0 or latest["compute"] <= 0:
        raise ValueError("only the base model (step 0) is evaluated so far: the final compute "
                         "cannot be estimated from compute per step; pass --final-compute")
    return float(latest["compute"]) * total / float(latest["step"])


def run(args: argparse.Namespace) -> int:
    if bool(args.eval) == bool(args.inputs):
        raise ValueError("give the runs' logs (INPUT...) or scalerl's eval files (--eval "
                         "EVAL...), one of the two")
    if not args.backtest and args.final_compute is None and args.final_step is None \
            and args.run_config is None:
        raise ValueError("give the runs' planned total: --final-step N, --final-compute X or "
                         "--run-config run.yaml (or --backtest for finished runs)")
    config = fit_config(args)
    prior, about = prior_from_args(args)
    progress(f"predict: {about}")
    if args.inputs:
        return run_inputs(args, config, prior)
    if args.backtest or args.joint:
        raise ValueError(f"{'--backtest' if args.backtest else '--joint'} reads runs' logs "
                         "(INPUT...), not --eval (the evals of one run; its sweep-mates' go "
                         "to --sweep-eval)")
    if args.out is None:
        raise ValueError("--eval needs --out predictions.parquet")
    run_id, ccol, points = eval_points(args.eval, args.compute_col)
    final = final_compute_from(args, points)
    mates = list(_mates(args, run_id).values())
    out = Path(args.out)
    old = read_predictions(out) if out.exists() else None
    done = set() if old is None or args.force else set(
        zip(old["run"].astype(str), old["task"].astype(str), old["chunk"].astype(int)))
    rows = []
    for task, sub in points.groupby("task", sort=True):
        sub = sub.sort_values("chunk")
        chunks = sub["chunk"].tolist() if args.all_chunks else [sub["chunk"].iloc[-1]]
        for chunk in chunks:
            if args.all_chunks and (run_id, str(task), int(chunk)) in done:
                continue
            upto = sub[sub["chunk"] <= chunk]
            preds = _predict_chunk(upto, final, mates, task, chunk, config, prior)
            latest = float(upto["compute"].iloc[-1])
            rows += prediction_rows(run_id, str(task), int(chunk), latest, final, preds,
                                    latest_reward=float(upto["pass_rate"].iloc[-1]),
                                    smoothed_reward=smoothed_level(upto["pass_rate"]))
            text = ", ".join(f"{p.form} final {p.predicted_final:.3f} (observed "
                             f"[{p.observed_final_lo:.3f}, {p.observed_final_hi:.3f}]) A "
                             f"{p.A:.3f} [{p.A_lo:.3f}, {p.A_hi:.3f}] ({p.status}; interval "
                             f"{p.interval_status})" for p in preds)
            progress(f"predict: {run_id} {task} chunk {chunk} ({latest / final:.0%} of compute "
                     f"{final:.4g} {ccol}): {text}")
    merged = merge_predictions(old, rows)
    write_predictions(out, merged)
    progress(f"predict: wrote {len(rows)} row(s) ({len(merged)} in all) to {out}")
    return 0


def _fractions(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(0 < v < 1 for v in values):
        raise ValueError(f"--at takes fractions in (0, 1) separated by commas, got {text!r}")
    return values


def run_backtest(args, config, curves, prior) -> int:
    rows, finals = [], []
    for sweep in _sweeps(args, curves, prior):  # one run each without --joint
        if len(sweep) == 1:
            curve = sweep[0]
            r, final = backtest_curve(curve.compute, curve.reward, run=curve.run,
                                      task=curve.task, config=config,
                                      fractions=_fractions(args.at), prior=prior)
            r_finals = [final]
        else:
            r, r_finals = backtest_sweep([(c.compute, c.reward, c.run, c.task) for c in sweep],
                                         config=config, fractions=_fractions(args.at),
                                         prior=prior)
        rows += r
        finals += r_finals
        for final in r_finals:
            progress(f"predict: backtest {final['run']} {final['task']}: observed final "
                     f"{final['observed_final']:.3f}")
    table = backtest_table(pd.DataFrame(rows), pd.DataFrame(finals))
    sys.stdout.write(backtest_markdown(table, bins=(0.0, *_fractions(args.at), 1.0)))
    sys.stdout.flush()
    if args.out:
        write_predictions(args.out, merge_predictions(None, rows))
        progress(f"predict: wrote {len(rows)} row(s) to {args.out}")
    return 0


def _sweeps(args, curves, prior) -> list[list]:
    """The groups of curves fitted together: each run alone, or with --joint the runs of each
    task (and --joint-by value), which the user says share a recipe: a log does not say it."""
    if not args.joint:
        if args.joint_by:
            raise ValueError("--joint-by goes with --joint")
        return [[curve] for curve in curves]
    if prior is None:
        progress("predict: --joint without a curve prior (--prior none): each run alone")
        return [[curve] for curve in curves]
    by = [c.strip() for c in (args.joint_by or "").split(",") if c.strip()]
    sweeps = sweeps_of(curves, by)
    for sweep in sweeps:
        progress(f"predict: fitted jointly (one sweep, task {sweep[0].task}"
                 + "".join(f", {col} {sweep[0].label(col)}" for col in by)
                 + f"): {', '.join(c.run for c in sweep)}")
    return sweeps


def run_inputs(args, config, prior) -> int:
    """Predict every run of INPUT... (see the module docstring)."""
    curves, info = curves_from_args(args)
    progress(f"predict: {len(curves)} run(s); metric {info['reward_col']!r} against "
             f"{info['compute_col']!r}")
    if args.backtest:
        return run_backtest(args, config, curves, prior)
    out = Path(args.out) if args.out else None
    old = read_predictions(out) if out is not None and out.exists() else None
    done = set() if old is None or args.force else set(
        zip(old["run"].astype(str), old["task"].astype(str), old["chunk"].astype(int)))
    total_steps = total_steps_from(args)
    rows, latest = [], []
    if args.joint:
        if args.all_chunks:
            raise ValueError("--joint predicts each run from its latest points (the sweep as "
                             "it stands); --all-chunks would cut every run at one index: use "
                             "--backtest --joint for finished runs")
        for sweep in _sweeps(args, curves, prior):
            finals = [final_compute_of(c, final_compute=args.final_compute,
                                       final_step=total_steps) for c in sweep]
            r, _ = sweep_rows(sweep, finals, config, prior=prior)
            rows += r
        latest = rows
        curves = []
    for curve in curves:
        final = final_compute_of(curve, final_compute=args.final_compute,
                                 final_step=total_steps)
        last = curve.compute.size - 1
        for k in range(last + 1) if args.all_chunks else [last]:
            if args.all_chunks and k != last and (curve.run, curve.task, k) in done:
                continue
            r, _ = forecast_rows(curve, final, config, upto=k, prior=prior)
            rows += r
            if k == last:
                latest += r
    sys.stdout.write("\n".join(forecast_table(pd.DataFrame(latest))) + "\n")
    sys.stdout.flush()
    if out is not None:
        merged = merge_predictions(old, rows)
        write_predictions(out, merged)
        progress(f"predict: wrote {len(rows)} row(s) ({len(merged)} in all) to {out}")
    return 0
