"""`scalerl fit INPUT... --out DIR`: fit sigmoidal compute-performance curves.

INPUT: TensorBoard log directories, MLflow stores (.db, mlruns, URI; --experiment / --run-id
select runs), Parquet or CSV files (or directories of them): one row per evaluation point,
scalerl's per-sample eval Parquet (averaged to pass rates), or a CSV exported from other logs
such as a W&B history or chart export (see `scalerl.fit.readers.inputs`). Each input is one run
(NAME=INPUT names it) unless its rows carry a run column.

Output layout (all files written atomically):
    DIR/fit.json, DIR/curve.png            when there is one curve and no grouping
    DIR/<group>/fit.json, <group>/curve.png one per group otherwise (<group> = 'col=value_...')
    DIR/fits.json                          list of every group's record (or its error)
    DIR/fits.md                            Markdown table of all fits
    DIR/curves.png                         all groups on one plot (when there are several)

fit.json keys: A, B, C_mid, R0, r0_source, r2, sse, n_points, n_excluded, cutoff, status
("ok", or "collapsed": the reward fell well below its peak; fitted up to the peak, `collapse`
holds the peak), collapse, weighting (none | binomial: 1 / se^2 weights from the samples |
noise: 1 / s^2 from the curve's local noise),
compute_col, reward_col, converged, warnings, intervals {A, B, C_mid: [lo, hi], ...},
power_law {A, D, B, r2, ...}, extrapolation {fraction, max_abs_error, mean_abs_error,
predicted_final, observed_final, ...}, budget {C_50, C_75, C_90, C_95}, grid, points
{compute, reward, status}, group {col: value}, meta {key: value}, config, version.

A group that cannot be fitted (fewer than 4 points, ...) is reported in fits.json/fits.md and
makes the command exit with status 2; a fit that ran but is not trustworthy (flat curve,
parameter on a range bound) is written with converged = false and its warnings.

Deliberately left out: forecasting a run's end (`scalerl predict`) and the report across
fits (`scalerl report`, which reads these fit.json files).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from scalerl.config import key_value
from scalerl.fit.commands.options import (
    add_fit_options,
    add_input_options,
    fit_config,
    group_by_from,
    inputs_from_args,
)
from scalerl.fit.curves.curve import CollapseError, fit_curve
from scalerl.fit.readers.inputs import group_slug, load_groups
from scalerl.fit.report.plots import plot_combined, plot_curve
from scalerl.fit.report.scaling import fits_frame, fits_markdown
from scalerl.utils.io import write_json_atomic, write_text_atomic
from scalerl.utils.log import progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    add_input_options(parser)
    parser.add_argument("--out", required=True, help="output directory")
    add_fit_options(parser, forecast=False)
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                        help="copied into fit.json 'meta' (repeatable), e.g. --meta recipe=cispo")
    parser.add_argument("--tracking", metavar="RUN_YAML",
                        help="log the fitted parameters to the experiment tracker of this run "
                        "config (its `tracking:` section and run id; backend none: nothing)")


def _parse_value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_meta(items: list[str]) -> dict:
    meta = {}
    for item in items:
        key, value = key_value(item, "--meta")
        meta[key.strip()] = _parse_value(value.strip())
    return meta


def _num(value: float | None, spec: str) -> str:
    """A number for a progress line; fits that failed part-way carry None."""
    return "n/a" if value is None else format(value, spec)


def _log_fits(run_yaml: str, records: list[dict]) -> None:
    """Each fit's A, B, C_mid, R0, r2 as `fit/<group slug>/<param>` on the run's tracker."""
    from scalerl.rl.run_config import load_run_config
    from scalerl.tracking import make_tracker

    cfg = load_run_config(run_yaml)
    with make_tracker(cfg.tracking, run=cfg.run) as tracker:
        for record in records:
            tracker.log_fit(group_slug(record["group"]),
                            {k: record[k] for k in ("A", "B", "C_mid", "R0", "r2")
                             if record.get(k) is not None})


def run(args: argparse.Namespace) -> int:
    config = fit_config(args)
    meta_extra = parse_meta(args.meta)
    group_by = group_by_from(args)
    groups, info = load_groups(inputs_from_args(args), compute_col=args.compute_col,
                               reward_col=args.metric, group_by=group_by)
    out = Path(args.out)
    single = len(groups) == 1 and not groups[0].key
    progress(f"fit: {len(groups)} curve(s) from {info['n_rows']} row(s); compute = "
             f"{info['compute_col']!r}, reward = {info['reward_col']!r}"
             + (" (per-sample eval: pass rate per compute value)" if info["per_sample"] else ""))
    records, failures = [], []
    for i, group in enumerate(groups, 1):
        slug = group_slug(group.key)
        where = out if single else out / slug
        t0 = time.perf_counter()
        extra = {"compute_col": info["compute_col"], "reward_col": info["reward_col"],
                 "group": group.key, "meta": {**group.meta, **meta_extra},
                 "inputs": [str(p) for p in args.inputs]}
        binomial = group.stderr is not None and bool(np.isfinite(group.stderr).all())
        try:
            curve = fit_curve(group.compute, group.reward, config,
                              n_samples=group.n_rows if binomial else None)
        except ValueError as err:
            progress(f"[{i}/{len(groups)}] {slug}: cannot fit: {err}")
            failure = {**extra, "error": str(err), "dir": str(where)}
            if isinstance(err, CollapseError):
                failure.update(status="collapsed", collapse=err.collapse)
            failures.append(failure)
            continue
        record = curve.to_dict(**extra)
        record["warnings"] = [*record["warnings"], *group.notes]
        write_json_atomic(where / "fit.json", record)
        plot_curve(record, where / "curve.png")
        records.append(record)
        state = "ok" if record["converged"] else "NOT CONVERGED"
        state += " (COLLAPSED: fitted up to the peak)" if record["status"] == "collapsed" else ""
        ex = record["extrapolation"] or {}
        ex_text = f", extrap. max err {ex['max_abs_error']:.3f}" \
            if ex.get("max_abs_error") is not None else ""
        progress(f"[{i}/{len(groups)}] {slug}: A={_num(record['A'], '.3f')} "
                 f"B={_num(record['B'], '.2f')} C_mid={_num(record['C_mid'], '.4g')} "
                 f"R2={_num(record['r2'], '.3f')}{ex_text} "
                 f"({record['n_points']} pts, {time.perf_counter() - t0:.1f}s) {state}")
        for w in record["warnings"]:
            progress(f"    warning: {w}")
    write_json_atomic(out / "fits.json", records + failures)
    if args.tracking:
        _log_fits(args.tracking, records)
    by = list(group_by or info["group_by"])
    text = fits_markdown(fits_frame(records, by), by, title="Fits") if records else "# Fits\n"
    if failures:
        text += "\n## Groups that could not be fitted\n\n" + "\n".join(
            f"- {json.dumps(f['group'])}: {f['error']}" for f in failures) + "\n"
    write_text_atomic(out / "fits.md", text)
    if len(records) > 1:
        plot_combined(records, out / "curves.png", by=by or None)
    progress(f"fit: wrote {len(records)} fit(s) to {out}"
             + (f"; {len(failures)} group(s) failed" if failures else ""))
    if failures:
        if not records and len(failures) == 1:
            raise ValueError(failures[0]["error"])
        return 2
    return 0
