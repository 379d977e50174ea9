"""The options the fit commands share, declared once: adding a fit flag edits `FIT_OPTIONS` only.

- `FIT_OPTIONS`: every flag that sets a `FitConfig` field (its flags, the field, the help), and
  whether the forecast commands (`scalerl predict`, `race`, `watch`) offer it too or only
  `scalerl fit` does (the grid, the extrapolation check, the power law: a forecast always fits
  both forms on the grid `FitConfig` picks);
- `add_fit_options(parser, forecast=...)` declares them (plus `--paper-grid` for `scalerl fit`,
  `--prior PATH|shipped|none` for the forecast commands and `--config FILE` for all);
  `fit_config(args)` turns the parsed flags into the `FitConfig`: the `--config` file's fields,
  then `--paper-grid`, then every flag given (flags override); `prior_from_args(args)` loads
  the curve prior `--prior` names and says which (`scalerl.fit.forecast.prior`: the shipped
  one by default; none: the plain least-squares fit);
- `add_input_options(parser, nargs=...)`: the inputs of every command over logs (INPUT...,
  `--metric`, `--compute-col`, `--group-by`, MLflow's `--experiment` / `--run-id`);
- `add_size_options(parser)`: `--size NAME=SIZE` (a run's or model's size, or generation
  length), of `scalerl across` and `scalerl report`; `sizes_from_args(args)` reads them
  (`scalerl.fit.readers.sizes`);
  `add_final_options(parser, required=...)`: the runs' planned total (`--final-step` or
  `--final-compute`) of the forecast commands, as a group a command may add an alternative to;
- `inputs_from_args(args)`, `group_by_from(args)`, `groups_from_args(args)` and
  `curves_from_args(args)`: the parsed inputs as `scalerl.fit.readers.inputs.Inputs`, the
  grouping columns, the curves with their metadata (`PointGroup`), and the named curves of
  `scalerl.fit.forecast.runs`.

Deliberately left out: each command's own options (`--out`, `--meta`, `--margin`, ...), which
its module declares, and reading (but the prior file) or fitting anything.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from scalerl.config import ConfigError, load_mapping
from scalerl.fit.curves.sigmoid import WEIGHTINGS, FitConfig
from scalerl.fit.forecast.prior import SHIPPED_PATH, CurvePrior, shipped_prior
from scalerl.fit.forecast.runs import RunCurve, run_curves
from scalerl.fit.readers.inputs import Inputs, PointGroup, load_groups
from scalerl.fit.readers.sizes import sizes_from_specs

__all__ = ["FitOption", "FIT_OPTIONS", "add_fit_options", "fit_config", "add_input_options",
           "add_final_options", "add_size_options", "sizes_from_args", "inputs_from_args",
           "group_by_from", "groups_from_args", "curves_from_args", "prior_from_args"]

PAPER_GRID_FIELDS = ("a_min", "a_max", "a_step", "cmid_min", "cmid_max", "cmid_points",
                     "cmid_spacing")


def _fraction_or_none(text: str) -> float | None:
    text = text.strip().lower()
    return None if text in ("none", "0", "off") else float(text)


@dataclasses.dataclass(frozen=True)
class FitOption:
    """One command-line flag that sets a `FitConfig` field."""

    flag: str  # e.g. "--cutoff-fraction"; its argparse dest is the flag without dashes
    field: str  # the FitConfig field it sets
    help: str
    type: Callable | None = None  # argparse type (None: a str, or a store_true switch)
    choices: tuple[str, ...] | None = None
    forecast: bool = True  # offered by predict, race and watch too (else by `scalerl fit` only)
    switch: bool = False  # a store_true flag
    value: Callable = lambda v: v  # the flag's value -> the field's value

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


FIT_OPTIONS = (
    FitOption("--r0", "r0", "base-model reward R0 (default: the compute-0 point, e.g. the "
              "chunk-0 eval, else the first point)", float),
    FitOption("--cutoff", "cutoff", "exclude compute below this (paper: 1500 GPU-hours; "
              "default 0)", float),
    FitOption("--cutoff-fraction", "cutoff_fraction", "exclude compute below this fraction of "
              "the largest (latest) compute", float),
    FitOption("--extrapolate-fraction", "extrapolate_fraction", "fit on compute <= this "
              "fraction of the max, score the rest; 'none' to skip (default 0.5)",
              forecast=False, value=_fraction_or_none),
    FitOption("--bootstrap", "bootstrap_n", "bootstrap replicates for the intervals (default "
              "200; 0: no intervals)", int),
    FitOption("--bootstrap-method", "bootstrap_method", "resample residuals of the fit in "
              "moving blocks (default: keeps their correlation), one by one, or resample the "
              "points", choices=("blocks", "residuals", "points"), forecast=False),
    FitOption("--seed", "bootstrap_seed", "bootstrap seed (default 0)", int),
    FitOption("--a-min", "a_min", "lowest A (default: 0.45 for paper-like pass rates, else "
              "peak - 0.05)", float, forecast=False),
    FitOption("--a-max", "a_max", "highest A (default: 0.80 for paper-like pass rates, else "
              "1.0)", float, forecast=False),
    FitOption("--a-step", "a_step", "A grid step (default 0.005, the paper's)", float,
              forecast=False),
    FitOption("--cmid-min", "cmid_min", "lowest C_mid (default: smallest fitted compute)",
              float, forecast=False),
    FitOption("--cmid-max", "cmid_max", "highest C_mid (default: 4 x largest fitted compute)",
              float, forecast=False),
    FitOption("--cmid-points", "cmid_points", "number of C_mid values (default 100, the "
              "paper's)", int, forecast=False),
    FitOption("--b-min", "b_min", "lower bound of B (default 0.05)", float, forecast=False),
    FitOption("--b-max", "b_max", "upper bound of B (default 20)", float, forecast=False),
    FitOption("--cmid-spacing", "cmid_spacing", "C_mid grid spacing (auto: log when the range "
              "spans >= 100x)", choices=("auto", "linear", "log"), forecast=False),
    FitOption("--no-power-law", "power_law", "skip the power-law fit", forecast=False,
              switch=True, value=lambda on: not on),
    FitOption("--weighting", "weighting", "point weights: none (default, the paper's), binomial "
              "(1 / se^2, se = sqrt(p (1 - p) / n); needs per-sample evals) or noise (1 / s^2, "
              "s the curve's local noise; for logs without n)", choices=WEIGHTINGS),
)


def add_fit_options(parser: argparse.ArgumentParser, *, forecast: bool,
                    omit: tuple[str, ...] = ()) -> None:
    """Declare the `FIT_OPTIONS` a command offers (`forecast`: predict, race, watch, across),
    but the flags in `omit`, and `--config`; `scalerl fit` also gets `--paper-grid`, the
    forecast commands `--prior` (`scalerl across` omits it: its per-size fits are plain)."""
    for opt in FIT_OPTIONS:
        if (forecast and not opt.forecast) or opt.flag in omit:
            continue
        if opt.switch:  # default None: an absent switch leaves the field alone
            parser.add_argument(opt.flag, action="store_true", default=None, help=opt.help)
        else:
            parser.add_argument(opt.flag, type=opt.type, choices=opt.choices, help=opt.help)
    if not forecast:
        parser.add_argument("--paper-grid", action="store_true", help="the paper's grid: A "
                            "0.450..0.800 by 0.005, C_mid 100 linear values in [100, 40000]")
    elif "--prior" not in omit:
        parser.add_argument("--prior", default="shipped", metavar="PATH|shipped|none",
                            help="curve prior of the sigmoid of pass-rate curves: the one "
                            "learned from public RL runs that ships with scalerl (default), a "
                            "prior file (`scalerl prior --out PATH`), or none for the plain "
                            "least-squares fit")
    parser.add_argument("--config", help="YAML/JSON file with FitConfig fields (flags override)")


def fit_config(args: argparse.Namespace) -> FitConfig:
    """The FitConfig of the options `add_fit_options` declared (see the module docstring)."""
    given = vars(args)
    data = load_mapping(args.config) if args.config else {}
    if given.get("paper_grid"):
        paper = FitConfig.paper().to_dict()
        data.update({k: paper[k] for k in PAPER_GRID_FIELDS})
    for opt in FIT_OPTIONS:
        if given.get(opt.dest) is not None:
            data[opt.field] = opt.value(given[opt.dest])
    try:
        return FitConfig.from_dict(data)
    except ConfigError as err:
        raise ConfigError(f"fit options: {err}") from None


def prior_from_args(args: argparse.Namespace) -> tuple[CurvePrior | None, str]:
    """The curve prior `--prior` names and a sentence saying which, for the command's
    output."""
    choice = str(args.prior).strip()
    if choice.lower() == "none":
        return None, "no curve prior (--prior none): the plain least-squares sigmoid"
    if choice.lower() == "shipped":
        prior, where = shipped_prior(), f"shipped with scalerl ({SHIPPED_PATH.name})"
    else:
        try:
            prior, where = CurvePrior.load(choice), choice
        except (OSError, ValueError, KeyError) as err:
            raise ConfigError(f"--prior {choice}: {err} (give a file written by `scalerl "
                              "prior --out PATH`, 'shipped' or 'none')") from None
    return prior, (f"sigmoid of pass-rate curves fitted with the curve prior {where}: "
                   f"{prior.summary()}, interval calibration kappa {prior.kappa:.3f}, "
                   f"kappa_gain {prior.kappa_gain:.2f} (--prior none: the plain fit)")


def add_input_options(parser: argparse.ArgumentParser, *, nargs: str = "+") -> None:
    """INPUT... (`nargs`: "*" where a command takes another source instead) and the options
    that say which curves to read from them."""
    parser.add_argument("inputs", nargs=nargs, metavar="INPUT",
                        help="TensorBoard log dirs, MLflow stores (.db, mlruns, URI), "
                        "CSV/Parquet files or dirs (W&B exports, eval points, scalerl's "
                        "per-sample evals); NAME=INPUT names a run")
    parser.add_argument("--metric", "--reward-col", dest="metric", help="the metric to fit or "
                        "forecast: a TensorBoard tag, MLflow metric or table column (auto: "
                        "pass_rate, correct, accuracy, reward, ... by name; per-sample evals: "
                        "correct)")
    parser.add_argument("--compute-col", help="compute axis (auto: the first of compute, "
                        "compute_device_hours, compute_flops, step, _step, ... present; step "
                        "for logs), or wall_time (seconds) or any logged metric/column")
    parser.add_argument("--group-by", help="comma-separated columns, one curve per value "
                        "combination (default: run and task when they vary)")
    parser.add_argument("--experiment", action="append", default=[], metavar="NAME",
                        help="MLflow: only the runs of this experiment (repeatable)")
    parser.add_argument("--run-id", action="append", default=[], metavar="ID",
                        help="MLflow: only this run (repeatable)")


def add_final_options(parser: argparse.ArgumentParser, *, required: bool):
    """--final-step / --final-compute, mutually exclusive; returns the group (a command may add
    its own alternative to it)."""
    final = parser.add_mutually_exclusive_group(required=required)
    final.add_argument("--final-step", type=float, help="the runs' planned last step")
    final.add_argument("--final-compute", type=float, help="the runs' planned total compute, "
                       "in the units of the compute axis")
    return final


def add_size_options(parser: argparse.ArgumentParser) -> None:
    """--size NAME=SIZE, repeatable (`scalerl.fit.readers.sizes`)."""
    parser.add_argument("--size", action="append", default=[], metavar="NAME=SIZE",
                        help="the size of run or model NAME: parameters (0.6B, 600M, 1.7e9; "
                        "suffixes k, M, B, T are powers of 1000), a generation length in "
                        "tokens (8192) along that axis, or a model directory (the "
                        "parameters its base_info.json records, else its *.safetensors "
                        "shapes); repeatable")


def sizes_from_args(args: argparse.Namespace) -> dict[str, float]:
    """{NAME: size} of the --size options."""
    return sizes_from_specs(args.size)


def inputs_from_args(args: argparse.Namespace) -> Inputs:
    return Inputs(args.inputs, experiments=args.experiment, run_ids=args.run_id)


def group_by_from(args: argparse.Namespace) -> list[str] | None:
    """--group-by as a list of columns; None when not given (the readers' default)."""
    if not args.group_by:
        return None
    return [c.strip() for c in args.group_by.split(",") if c.strip()]


def groups_from_args(args: argparse.Namespace, inputs: Inputs | None = None
                     ) -> tuple[list[PointGroup], dict]:
    """Read the inputs of a command (or re-read `inputs`) into curves with their metadata."""
    return load_groups(inputs or inputs_from_args(args), compute_col=args.compute_col,
                       reward_col=args.metric, group_by=group_by_from(args))


def curves_from_args(args: argparse.Namespace, inputs: Inputs | None = None
                     ) -> tuple[list[RunCurve], dict]:
    """Read the inputs of a command (or re-read `inputs`) into named curves."""
    groups, info = groups_from_args(args, inputs)
    return run_curves(groups, info), info
