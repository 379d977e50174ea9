"""`scalerl report FIT_JSON_OR_DIR... --out DIR [--by model,gen_len,recipe,task] [--order AXIS=V1,V2]`.

Collects fit.json records written by `scalerl fit` (directories are searched recursively) and
writes, atomically:
    DIR/scaling.parquet   one row per fit: the --by columns (from each record's `group`, then
                          `meta`), A, B, C_mid with bootstrap bounds (*_lo, *_hi), R0, r2,
                          points, extrapolation errors, power law, C_90, converged, warnings
    DIR/scaling.md        the same as a Markdown table sorted by the --by columns, plus a
                          comparison along the scale axes (model, gen_len: does the
                          largest value give a higher A than the smallest?) and a
                          per-cell summary when several fits (seeds) share a cell
    DIR/curves.png        every curve redrawn from its parameters and stored points, one
                          colour per --by combination
    DIR/backtest.png      with --predictions: prediction error vs fraction of compute
    DIR/mismatch.png      with --steps: each run's generator–trainer mismatch per step
                          (mismatch_kl, the extremes of π_train/π_gen), and its section
                          in scaling.md
--order model=tiny-s,tiny-m gives an axis's values smallest first (gen_len is numeric).
--size MODEL=SIZE gives a model's parameters (0.6B, or its model directory) for the forecast
across scale in scaling.md (the largest model or length predicted from the smaller ones, and
the predicted A of the next size up; `scalerl.fit.report.across`); without it a model's size
is read from its name (qwen3-0.6b) when it states one.
Tag runs with `scalerl fit ... --meta model=tiny-s --meta recipe=scalerl` so the columns exist.

Deliberately left out: re-fitting (the report trusts the fit.json records) and HTML output.
"""

from __future__ import annotations

import argparse

from scalerl.config import key_value
from scalerl.fit.commands.options import add_size_options, sizes_from_args
from scalerl.fit.forecast.predict import read_predictions
from scalerl.fit.report.scaling import DEFAULT_BY, collect_records, write_report
from scalerl.utils.log import progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("fits", nargs="+", metavar="FIT_JSON_OR_DIR")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--by", default=",".join(DEFAULT_BY),
                        help=f"comma-separated grouping columns (default {','.join(DEFAULT_BY)})")
    parser.add_argument("--order", action="append", default=[], metavar="AXIS=V1,V2,...",
                        help="values of a scale axis from smallest to largest, e.g. "
                             "model=tiny-s,tiny-m (repeatable; numbers sort by value)")
    parser.add_argument("--predictions", nargs="+", metavar="PARQUET", help="predictions.parquet "
                        "files (scalerl predict): adds the prediction backtest")
    parser.add_argument("--racing", nargs="+", metavar="JSON", help="decision files of "
                        "`scalerl race` (racing/chunk{k}.json): adds the racing section")
    parser.add_argument("--steps", nargs="+", metavar="CHECKPOINT_OR_PARQUET",
                        help="checkpoint directories of `scalerl train` (or their "
                             "steps.parquet): adds the generator–trainer mismatch section "
                             "and mismatch.png")
    add_size_options(parser)


def run(args: argparse.Namespace) -> int:
    by = [c.strip() for c in args.by.split(",") if c.strip()]
    order = {}
    for item in args.order:
        axis, values = key_value(item, "--order", "AXIS=V1,V2,... (e.g. model=tiny-s,tiny-m)",
                                 need_value=True)
        order[axis.strip()] = [v.strip() for v in values.split(",") if v.strip()]
    records = collect_records(args.fits)
    progress(f"report: {len(records)} fit(s), by {', '.join(by) or '(nothing)'}")
    predictions = None
    if args.predictions:
        predictions = read_predictions(args.predictions)
    paths = write_report(records, args.out, by, order, predictions, args.racing, args.steps,
                         sizes_from_args(args))
    flagged = sum(not r.get("converged", False) for r in records)
    progress(f"report: wrote {', '.join(str(p) for p in paths.values())}"
             + (f"; {flagged} fit(s) not converged (see scaling.md)" if flagged else ""))
    return 0
