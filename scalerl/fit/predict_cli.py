"""`scalerl predict --eval EVAL... (--final-compute X | --run-config run.yaml) --out FILE`.

Predicts one run's final pass rate and asymptote A from its evaluations so far
(`scalerl.fit.predict`), per task, with the sigmoid and the power law, and writes the rows of
the latest evaluated chunk into predictions.parquet (`PREDICTIONS_SCHEMA`), atomically. Rows
of that (run, task, chunk) already in FILE are replaced, all others kept, so re-running after
each chunk is idempotent and a crashed run resumes. `--all-chunks` predicts at every chunk
(the points up to it) and skips chunks FILE already has unless `--force`: the input of a
backtest (`scalerl.fit.backtest`).

Intervals: 95 % by default (`confidence` in --config), calibrated (`scalerl.fit.intervals`):
`observed_final_lo/hi` for the eval of the final model the user will see,
`predicted_final_lo/hi` for the mean curve, `A_lo/hi`, `C_mid_lo/hi`; `interval_status` says
when the data cannot support one yet (bounds empty).

EVAL: scalerl's per-sample eval Parquet files (`scalerl/eval/schema.py`) of one run; only the
held-out split (`dataset` = val) is used when the column exists. Pass rate per (task, chunk) =
mean of `correct`, with n = its number of samples (binomial weights, `--weighting binomial`).

Final compute: `--final-compute X` in the units of `--compute-col` (default
compute_device_hours); or `--run-config run.yaml`: total steps = sum(chunk_steps), or
steps_per_chunk x `--chunks`, and the final compute is estimated as the latest chunk's compute
x total steps / its step (compute per step assumed constant from here on).

Deliberately left out: several runs per call (one run per rule, one file per run).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scalerl.fit.cli import _FLAG_TO_FIELD, config_from_args
from scalerl.fit.inputs import InputError, read_tables, resolve_column
from scalerl.fit.predict import (
    merge_predictions,
    predict_final,
    prediction_rows,
    read_predictions,
    write_predictions,
)
from scalerl.utils.log import progress

EVAL_COMPUTE_COLUMNS = ("compute_device_hours", "compute_flops", "compute", "step")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("--eval", nargs="+", required=True, metavar="EVAL",
                        help="per-sample eval Parquet files (or dirs) of one run")
    final = parser.add_mutually_exclusive_group(required=True)
    final.add_argument("--final-compute", type=float, help="the run's planned total compute")
    final.add_argument("--run-config", help="run.yaml: total steps from its chunking")
    parser.add_argument("--chunks", type=int, help="number of chunks, with --run-config when "
                        "it has steps_per_chunk rather than chunk_steps")
    parser.add_argument("--compute-col", help="compute column (default: "
                        + ", ".join(EVAL_COMPUTE_COLUMNS) + ", first present)")
    parser.add_argument("--out", required=True, help="predictions.parquet to update")
    parser.add_argument("--all-chunks", action="store_true", help="predict at every chunk, "
                        "not only the latest (skips chunks already in --out)")
    parser.add_argument("--force", action="store_true", help="with --all-chunks: redo chunks "
                        "already in --out")
    # Fit options, as in `scalerl fit` (grid settings: --config FILE with FitConfig fields).
    parser.add_argument("--r0", type=float, help="base-model reward (default: the chunk-0 eval)")
    parser.add_argument("--cutoff", type=float, help="exclude compute below this (default 0)")
    parser.add_argument("--cutoff-fraction", type=float,
                        help="exclude compute below this fraction of the latest compute")
    parser.add_argument("--bootstrap", type=int, help="bootstrap replicates for the intervals "
                        "(default 200)")
    parser.add_argument("--seed", type=int, help="bootstrap seed (default 0)")
    parser.add_argument("--weighting", choices=("none", "binomial"), help="point weights: none "
                        "(default) or binomial (1 / se^2, se = sqrt(p (1 - p) / n))")
    parser.add_argument("--config", help="YAML/JSON file with FitConfig fields (flags override)")


def _fit_args(args: argparse.Namespace) -> argparse.Namespace:
    """The namespace `scalerl.fit.cli.config_from_args` expects (options not offered: unset)."""
    full = argparse.Namespace(**{flag: None for flag in _FLAG_TO_FIELD}, paper_grid=False,
                              no_power_law=False, extrapolate_fraction="none")
    for key, value in vars(args).items():
        setattr(full, key, value)
    return full


def eval_points(paths, compute_col: str | None):
    """Per (task, chunk): compute, step, pass rate, samples; and the run id."""
    df = read_tables(paths)
    need = [c for c in ("run", "task", "chunk", "correct") if c not in df.columns]
    if need:
        raise InputError(f"the eval files lack column(s) {', '.join(need)}: give scalerl's "
                         "per-sample eval Parquet (scalerl/eval/schema.py)")
    if "dataset" in df.columns and (df["dataset"] == "val").any():
        df = df[df["dataset"] == "val"]
    runs = sorted(df["run"].astype(str).unique())
    if len(runs) != 1:
        raise InputError(f"the eval files hold {len(runs)} runs ({', '.join(runs[:5])}); "
                         "`scalerl predict` takes the evals of one run")
    ccol = resolve_column(df, compute_col, EVAL_COMPUTE_COLUMNS, "compute", "--compute-col")
    df = df.assign(_correct=df["correct"].astype(float))
    step = df["step"] if "step" in df.columns else df["chunk"]
    df = df.assign(_step=step)
    points = df.groupby(["task", "chunk"], sort=True).agg(
        compute=(ccol, "mean"), step=("_step", "max"), pass_rate=("_correct", "mean"),
        n=("_correct", "size")).reset_index()
    return runs[0], ccol, points


def final_compute_from(args, points) -> float:
    if args.final_compute is not None:
        return float(args.final_compute)
    from scalerl.rl.run_config import load_run_config

    cfg = load_run_config(args.run_config)
    if cfg.chunk_steps:
        total = sum(cfg.chunk_steps)
    elif args.chunks:
        total = cfg.steps_per_chunk * args.chunks
    else:
        raise ValueError(f"{args.run_config} gives steps_per_chunk = {cfg.steps_per_chunk} but "
                         "not the number of chunks: pass --chunks N (or --final-compute)")
    latest = points.sort_values("chunk").iloc[-1]
    if latest["step"] <= 0 or latest["compute"] <= 0:
        raise ValueError("only the base model (step 0) is evaluated so far: the final compute "
                         "cannot be estimated from compute per step; pass --final-compute")
    return float(latest["compute"]) * total / float(latest["step"])


def run(args: argparse.Namespace) -> int:
    config = config_from_args(_fit_args(args))
    run_id, ccol, points = eval_points(args.eval, args.compute_col)
    final = final_compute_from(args, points)
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
            preds = predict_final(upto["compute"].to_numpy(float),
                                  upto["pass_rate"].to_numpy(float), final, config,
                                  n_samples=upto["n"].to_numpy(float))
            latest = float(upto["compute"].iloc[-1])
            rows += prediction_rows(run_id, str(task), int(chunk), latest, final, preds)
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
