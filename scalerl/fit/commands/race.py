"""`scalerl race (--predictions P... | INPUT... --metric M (--final-step N | --final-compute X))
[--task T] [--out decisions.json]`: which runs of a sweep to stop.

`scalerl race --predictions P... --task math --out decisions.json` applies the racing rule
(`scalerl.fit.forecast.racing.race`: stop a run whose interval of A lies clearly below the
best's, or, with no interval of A yet, whose pass rate fell clearly below its start) to the
latest prediction of every run in the predictions.parquet files (`scalerl predict`) and writes
its result as JSON, atomically (`read_stopped` reads it back). `scalerl race INPUT... --metric
M --final-step N` races the runs of any logs (TensorBoard, MLflow, CSV/Parquet), predicting
each from its points so far first (`scalerl.fit.forecast.runs`, with the curve prior `--prior`,
the shipped one by default; `--predictions` files were forecast by `scalerl predict`, whose
rows say what with). Both print one line per run:
keep or stop, the fraction of compute run, A [interval], and why; then how many were stopped
and the compute saved. Seeds of one configuration are judged together with `--group
RUN=GROUP` or `--seed-pattern REGEX`.

Deliberately left out: stopping the runs themselves (the workflow skips the chunks of a run
decisions.json stops) and the rule itself (`scalerl.fit.forecast.racing`).
"""

from __future__ import annotations

import argparse

import pandas as pd

from scalerl.config import key_value
from scalerl.fit.commands.options import (
    add_final_options,
    add_fit_options,
    add_input_options,
    curves_from_args,
    fit_config,
    prior_from_args,
)
from scalerl.fit.curves.compare import A_MARGIN
from scalerl.fit.forecast.predict import FORMS, read_predictions
from scalerl.fit.forecast.racing import race, seed_groups
from scalerl.fit.forecast.runs import final_compute_of, forecast_rows
from scalerl.utils.io import write_json_atomic
from scalerl.utils.log import progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Decide which runs of a sweep to stop from their latest predictions "
                          "(scalerl.fit.forecast.racing): predictions.parquet files, or "
                          "any runs' logs; writes decisions.json atomically.")
    add_input_options(parser, nargs="*")
    add_final_options(parser, required=False)
    parser.add_argument("--predictions", nargs="+", metavar="PARQUET",
                        help="predictions.parquet files of the sweep's runs (scalerl predict)")
    parser.add_argument("--task", help="task (or metric) whose value is raced, e.g. math "
                        "(default: the only one present)")
    parser.add_argument("--margin", type=float, default=A_MARGIN,
                        help=f"A margin (default {A_MARGIN}, the paper's seed variation)")
    parser.add_argument("--min-fraction", type=float, default=0.3, help="a run is never "
                        "stopped before this fraction of its compute (default 0.3)")
    parser.add_argument("--form", choices=FORMS, default="sigmoid",
                        help="which fitted form's A to race on (default sigmoid)")
    parser.add_argument("--group", action="append", default=[], metavar="RUN=GROUP",
                        help="put RUN in seed group GROUP (repeatable)")
    parser.add_argument("--seed-pattern", help="group runs by their name with this regex "
                        "removed, e.g. '_s[0-9]+$' (seeds of one configuration)")
    parser.add_argument("--no-observed", dest="observed", action="store_false",
                        help="no observed rule: stop a run only by its interval of A, never "
                        "because its pass rate fell below its start (see "
                        "scalerl.fit.forecast.racing)")
    parser.add_argument("--out", help="decisions.json")
    add_fit_options(parser, forecast=True)


def _predict_inputs(args: argparse.Namespace) -> pd.DataFrame:
    """The latest predictions of every run of INPUT... (`scalerl.fit.forecast.runs`)."""
    if args.final_step is None and args.final_compute is None:
        raise ValueError("racing runs from their logs needs their planned total: --final-step "
                         "N or --final-compute X")
    config = fit_config(args)
    prior, about = prior_from_args(args)
    progress(f"race: {about}")
    curves, _ = curves_from_args(args)
    rows = []
    for curve in curves:
        final = final_compute_of(curve, final_compute=args.final_compute,
                                 final_step=args.final_step)
        rows += forecast_rows(curve, final, config, prior=prior)[0]
    return pd.DataFrame(rows)


def _task(df: pd.DataFrame, task: str | None) -> str:
    if task is not None:
        return task
    tasks = sorted(df["task"].astype(str).unique())
    if len(tasks) != 1:
        raise ValueError(f"the predictions hold {len(tasks)} tasks ({', '.join(tasks)}); "
                         "pick one with --task")
    return tasks[0]


def run(args: argparse.Namespace) -> int:
    if bool(args.predictions) == bool(args.inputs):
        raise ValueError("give predictions.parquet files (--predictions) or the runs' logs "
                         "(INPUT...), one of the two")
    df = read_predictions(args.predictions) if args.predictions else _predict_inputs(args)
    groups = seed_groups(df["run"].unique(), args.seed_pattern) if args.seed_pattern else {}
    for item in args.group:
        run_id, group = key_value(item, "--group", "RUN=GROUP", need_value=True)
        groups[run_id.strip()] = group.strip()
    result = race(df, task=_task(df, args.task), margin=args.margin,
                  min_fraction=args.min_fraction, groups=groups, form=args.form,
                  observed=args.observed)
    if args.out:
        write_json_atomic(args.out, result)
    width = max(len(d["run"]) for d in result["decisions"])
    for d in result["decisions"]:
        a = "A -" if d["A"] is None else f"A {d['A']:.3f}"
        if d["A_lo"] is not None and d["A_hi"] is not None:
            a += f" [{d['A_lo']:.3f}, {d['A_hi']:.3f}]"
        print(f"{d['run']:<{width}}  {d['decision']:<4}  {d['compute_fraction']:>4.0%}  {a}  "
              f"{d['reason']}", flush=True)
    stopped = [d["run"] for d in result["decisions"] if d["decision"] == "stop"]
    progress(f"race: {len(result['decisions'])} run(s), stop {len(stopped)}"
             + (f" ({', '.join(stopped)})" if stopped else "")
             + f"; compute saved {result['fraction_saved']:.0%}"
             + (f"; wrote {args.out}" if args.out else ""))
    return 0
