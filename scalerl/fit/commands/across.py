"""`scalerl across NAME=INPUT... --target-size SIZE (--final-compute X | --final-step N)
[--size NAME=SIZE]... [--axis size|gen_len] [--target-r0 [TASK=]R0] [--out FILE.json]`: what
would a run of an untried model size (or generation length) reach, from runs of other sizes
trained with the same recipe?

Reads the runs as `scalerl predict INPUT...` does (TensorBoard, MLflow, CSV/Parquet, W&B
exports, scalerl's per-sample eval directories; `scalerl.fit.readers.inputs`), one curve per
run and task, and forecasts, per task, a run of `--target-size` trained to the final compute
with `scalerl.fit.predict_across` (`scalerl.fit.forecast.across`): each run's own sigmoid fit,
then power laws of the gap 1 - A and of C_mid in size, a shared B, intervals from how far the
runs scatter about the laws (docs/design.md, "Forecast across scale"). The runs must differ
only in size (same recipe, data, batch, schedule and compute unit); the command cannot check
that.

Sizes: each run's comes from `--size NAME=SIZE`, NAME the run's name or its `model` column
(scalerl's evals name the run `tiny-m_L80_...` and the model `tiny-m`), else from the name:
`0.6B=runs/a` names the run by its size, and a name that states one (`Qwen3-0.6B-Base`) is
read. SIZE is a number with an optional suffix (k, M, B, T: powers of 1000; 0.6B, 600M, 1.7e9)
or a model directory (the parameters its base_info.json records, else its *.safetensors
headers). With `--axis gen_len` every size is a generation length in tokens (8192, 16k; a
`gen_len` column, as scalerl's evals have, gives it) and `--target-size` the target's.

Final compute, in the units of the compute axis (`--compute-col`; default: step): the target's
`--final-compute`, or `--final-step N` when the compute axis is the step. (A larger model's
step costs more FLOPs or GPU-hours, so a step is not a compute there: give the compute.)

`--target-r0`: the target's base score (its eval before RL; cheap to measure and the
forecast's anchor), one number, or TASK=R0 per task (repeatable); without it R0 comes from a
law across the runs' base scores, with a warning.

Prints per task the forecast (predicted final with the interval of the one eval the user
will observe, A and C_mid with theirs, the status and warnings) and the per-run estimates it
used (each run's A, B, C_mid, R0 and the laws it entered, or why not). With fewer than three
distinct sizes whose fits determine A (or C_mid) the forecast is refused: status few_sizes,
no number, and the reason (two sizes fix a line but not how far sizes scatter about it). Exit
status 0 when the forecast ran (refused or not). `--out FILE.json` writes every task's
Prediction (NaN as null) and the run names, atomically.

Deliberately left out: writing predictions.parquet (this is not a forecast of a run from its
own prefix: there is no chunk), the target's compute per step, and runs that differ in
anything but size.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from scalerl.fit.commands.options import (
    add_final_options,
    add_fit_options,
    add_input_options,
    add_size_options,
    fit_config,
    groups_from_args,
    sizes_from_args,
)
from scalerl.fit.forecast.across import AXES, predict_across
from scalerl.fit.forecast.runs import run_curves
from scalerl.fit.readers.sizes import format_size, parse_size, size_of, size_of_run
from scalerl.fit.readers.tables import InputError
from scalerl.fit.report.across import estimate_lines, law_warnings
from scalerl.utils.io import write_json_atomic
from scalerl.utils.log import progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    add_input_options(parser)
    add_size_options(parser)
    parser.add_argument("--axis", choices=tuple(AXES), default="size", help="what the runs "
                        "differ in: model size (default) or generation length (gen_len)")
    parser.add_argument("--target-size", "--target-len", dest="target_size", required=True,
                        metavar="SIZE", help="the untried run's size (0.6B, 14e9, a model "
                        "directory) or, with --axis gen_len, its generation length")
    add_final_options(parser, required=True)
    parser.add_argument("--target-r0", action="append", default=[], metavar="[TASK=]R0",
                        help="the target's base score (eval before RL), for every task or "
                        "per task (repeatable)")
    parser.add_argument("--out", help="JSON file for the forecasts (written atomically)")
    add_fit_options(parser, forecast=True, omit=("--r0", "--prior"))


def _target_r0(specs: list[str], tasks: list[str]) -> dict[str, float | None]:
    """{task: R0 or None} of --target-r0 (one number, or TASK=R0 each)."""
    out: dict[str, float | None] = dict.fromkeys(tasks)
    for spec in specs:
        task, sep, value = spec.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--target-r0 {spec!r}: expected a number or TASK=NUMBER") from None
        if not sep:
            out = dict.fromkeys(tasks, number) | {t: v for t, v in out.items() if v is not None}
        elif task not in out:
            raise ValueError(f"--target-r0 {spec!r}: no task {task!r} in the runs (tasks: "
                             f"{', '.join(tasks)})")
        else:
            out[task] = number
    return out


def _final(args, curves) -> float:
    if args.final_compute is not None:
        return float(args.final_compute)
    if not all(c.step_is_compute for c in curves):
        raise ValueError("--final-step needs the step as the compute axis (--compute-col step):"
                         " the target's compute per step is not measured (a larger model's "
                         "step costs more); give --final-compute in the compute axis' units")
    return float(args.final_step)


def _plain(value):
    """JSON-ready: NaN -> None, tuples -> lists, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _summary(pred) -> str:
    if pred.status != "ok":
        return f"no forecast ({pred.status}): {pred.warnings[0].removeprefix('no forecast: ')}"
    level = f"{pred.confidence:.0%}"
    return (f"predicted final {pred.predicted_final:.3f}, one eval in "
            f"[{pred.observed_final_lo:.3f}, {pred.observed_final_hi:.3f}] ({level}); A "
            f"{pred.A:.3f} [{pred.A_lo:.3f}, {pred.A_hi:.3f}]; C_mid {pred.C_mid:.4g} "
            f"[{pred.C_mid_lo:.4g}, {pred.C_mid_hi:.4g}] ("
            + ("reached" if pred.reached_c_mid else "not reached") + " by the final compute);"
            f" B {pred.params['B']:.2f}; R0 {pred.params['R0']:.3f} ({pred.params['R0_source']})"
            "; status ok")


def _size_of(run: str, meta: dict, sizes: dict, axis: str) -> float | None:
    """The run's position on `axis` (module docstring, "Sizes")."""
    if axis == "gen_len" and run not in sizes and meta.get("gen_len") is not None:
        return float(meta["gen_len"])
    return size_of_run([run, meta.get("model")], sizes)


def _label(name: str, size: float) -> str:
    return format_size(size) if parse_size(name) is not None else f"{name} ({format_size(size)})"


def run(args: argparse.Namespace) -> int:
    config = fit_config(args)
    sizes = sizes_from_args(args)
    target = size_of(args.target_size)
    groups, info = groups_from_args(args)
    curves = run_curves(groups, info)
    size = {c.run: _size_of(c.run, g.meta, sizes, args.axis) for c, g in zip(curves, groups)}
    unsized = sorted(run for run, s in size.items() if s is None)
    if unsized:
        raise InputError(f"no size for run(s) {', '.join(unsized)}: name each input by its "
                         "size (0.6B=INPUT) or pass --size NAME=SIZE (a number such as 0.6B, "
                         "or a model directory)")
    final = _final(args, curves)
    tasks = sorted({c.task for c in curves})
    r0 = _target_r0(args.target_r0, tasks)
    word = AXES[args.axis]
    progress(f"across: {len(curves)} curve(s) of {len({c.run for c in curves})} run(s); "
             f"metric {info['reward_col']!r} against {info['compute_col']!r}")
    results = {}
    for task in tasks:
        chosen = sorted((c for c in curves if c.task == task), key=lambda c: (size[c.run], c.run))
        runs = [(size[c.run], c.compute, c.reward) for c in chosen]
        pred = predict_across(runs, target, final, r0[task], config, axis=args.axis)
        names = [c.run for c in chosen]
        known = ", ".join(_label(c.run, size[c.run]) for c in chosen)
        lines = [f"{task}: {word} {format_size(target)} to {final:.4g} {info['compute_col']}, "
                 f"from {known}", f"  {_summary(pred)}"]
        lines += [f"  warning: {w}" for w in law_warnings(pred)]
        lines += ["  " + line for line in estimate_lines(pred, names, args.axis)]
        sys.stdout.write("\n".join(lines) + "\n\n")
        results[task] = {"runs": names, "prediction": dataclasses.asdict(pred)}
    sys.stdout.flush()
    if args.out:
        write_json_atomic(args.out, _plain({
            "axis": args.axis, "target_size": target, "final_compute": final,
            "compute_col": info["compute_col"], "metric": info["reward_col"],
            "tasks": results}))
        progress(f"across: wrote {args.out}")
    return 0
