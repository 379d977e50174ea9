"""Forecasts of real public RL curves against their end, and against two persistence forecasts.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_forecast_public.py
    (options: --curves DIR (default benchmarks/public_curves), --heldout DIR (a second set,
    e.g. one kept outside the repository), --max-points N... (0: all points; N: thin each
    curve to about N evenly spaced points, the sparser eval cadence of a typical run),
    --weighting none|noise, --bootstrap N, --prior none|shipped|PATH (default none))

Each curve (`step,value` CSV, described by the set's `sources.csv`: `kind` eval or train_reward)
is read with the input layer of `scalerl fit` / `predict`
(`scalerl.fit.readers.inputs.load_groups`, compute = step) and backtested with
`scalerl.fit.forecast.backtest.backtest_curve`, the code behind `scalerl predict --backtest`: at
25, 50 and 75 % of its last step, the points so far predict the value at the last step, with the
sigmoid and the power law (`scalerl.fit.forecast.predict.predict_final`); the persistence
forecast is the value observed when predicting, the smoothed persistence forecast the mean of
the last 3 values then (`smoothed_level`). Printed per set, kind, cadence, form and fraction:
the number of curves, the median and 90th percentile of |predicted - observed last value|, the
same for both persistence forecasts on the same curves, and the ratio of the medians to each
(< 1: better than it), plus the share of curves where the forecast was the closer one.

The sigmoid is the plain least-squares fit by default (`--prior none`): the curve prior that
ships with scalerl was learned from these very curves (benchmarks/public_curves), so scoring it
here would score it on its training data; benchmarks/bench_forecast_loso.py scores it on
sources it never saw. `--prior shipped` is for a `--heldout` set outside the corpus. The observed
last value is itself one noisy measurement (GSM8K test set: 1319 problems, binomial se ~0.013 at
p = 0.64). A curve flagged collapsed (`scalerl.fit.curves.collapse`) has no forecast; such
predictions are counted (column `collapsed`) and left out of both forecasts' errors. Curves
whose whole history collapses (the same test on all their points: they fall well below their
peak by the end, which no rising curve can forecast) are reported apart, as kind "<kind>,
collapses", and then all curves of that kind together ("<kind>, all").

Deliberately left out: intervals and their coverage (issue 29's benchmark), and train-reward
curves' errors in accuracy units (their reward is a sum of reward functions, any scale).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalerl.fit.curves.collapse import detect_collapse  # noqa: E402
from scalerl.fit.curves.sigmoid import FitConfig  # noqa: E402
from scalerl.fit.forecast.backtest import DEFAULT_FRACTIONS, backtest_curve, backtest_table  # noqa: E402
from scalerl.fit.forecast.corpus import thin  # noqa: E402
from scalerl.fit.forecast.prior import CurvePrior  # noqa: E402
from scalerl.fit.readers.inputs import load_groups  # noqa: E402

HERE = Path(__file__).resolve().parent


def read_set(folder: Path) -> pd.DataFrame:
    """sources.csv of a curve collection (file, repo, path, commit, kind, ...)."""
    sources = pd.read_csv(folder / "sources.csv")
    missing = [f for f in sources["file"] if not (folder / f).exists()]
    if missing:
        raise SystemExit(f"{folder}: {len(missing)} file(s) of sources.csv missing, e.g. "
                         f"{missing[0]}")
    return sources


def backtest_set(folder: Path, max_points: int, config: FitConfig, prior=None) -> pd.DataFrame:
    """The backtest table of every curve of a set (one row per prediction), with its kind;
    `max_points` > 0: every k-th point only, k = ceil(points / max_points), and the last."""
    sources = read_set(folder)
    tables = []
    for src in sources.itertuples():
        (group,), _ = load_groups([folder / src.file], compute_col="step", reward_col="value")
        keep = thin(group.compute.size, max_points)  # [<= max_points + 1], the last kept
        rows, final = backtest_curve(group.compute[keep], group.reward[keep], run=src.file,
                                     task=src.kind, config=config,
                                     fractions=DEFAULT_FRACTIONS, prior=prior)
        frame = pd.DataFrame(rows)
        table = backtest_table(frame, pd.DataFrame([final]))
        # A collapsed prediction has no value (NaN): counted, not scored.
        collapsed = frame[frame["status"] == "collapsed"]
        table = pd.concat([table, collapsed.assign(abs_error=np.nan)], ignore_index=True)
        c, y = group.compute[keep], group.reward[keep]
        ends = detect_collapse(c[c > 0], y[c > 0], float(y[0]), FitConfig().collapse_drop)
        kind = f"{src.kind}, collapses" if ends is not None else src.kind
        tables.append(table.assign(kind=kind, all_kind=f"{src.kind}, all",
                                   n_points=int(keep.size)))
    return pd.concat(tables, ignore_index=True)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per kind, form and fraction: errors of the forecast and of both persistence forecasts
    on the same (not collapsed) curves, the ratios, and how often the forecast was the closer
    one."""
    rows = []
    nearest = np.asarray(DEFAULT_FRACTIONS)
    at = nearest[np.argmin(np.abs(table["compute_fraction"].to_numpy()[:, None] - nearest),
                           axis=1)]
    for (kind, form, frac), sub in table.groupby([table["kind"], table["form"], at], sort=True):
        scored = sub[np.isfinite(sub["abs_error"].astype(float))]
        med, pers = scored["abs_error"].median(), scored["persistence_abs_error"].median()
        smooth = scored["smoothed_abs_error"].median()
        rows.append({"kind": kind, "form": form, "at": f"{frac:.0%}", "curves": len(sub),
                     "collapsed": int((sub["status"] == "collapsed").sum()),
                     "median": med, "p90": scored["abs_error"].quantile(0.9),
                     "persistence median": pers,
                     "persistence p90": scored["persistence_abs_error"].quantile(0.9),
                     "ratio": med / pers if pers > 0 else np.nan,
                     "smoothed median": smooth,
                     "smoothed p90": scored["smoothed_abs_error"].quantile(0.9),
                     "ratio smoothed": med / smooth if smooth > 0 else np.nan,
                     "beats persistence": (scored["abs_error"]
                                           < scored["persistence_abs_error"]).mean(),
                     "beats smoothed": (scored["abs_error"]
                                        < scored["smoothed_abs_error"]).mean()})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curves", type=Path, default=HERE / "public_curves")
    parser.add_argument("--heldout", type=Path, help="a second set (same layout)")
    parser.add_argument("--max-points", type=int, nargs="+", default=[0, 30],
                        help="0: every point; N: thin each curve to about N evenly spaced "
                        "points, a typical eval cadence (default: 0 and 30)")
    parser.add_argument("--weighting", choices=("none", "noise"), default="none")
    parser.add_argument("--bootstrap", type=int, default=0)
    parser.add_argument("--prior", default="none", help="curve prior of the sigmoid: none "
                        "(default: the shipped one was learned from benchmarks/public_curves), "
                        "shipped, or a prior file")
    args = parser.parse_args()
    config = FitConfig(bootstrap_n=args.bootstrap, weighting=args.weighting)
    prior = None if args.prior == "none" else \
        "shipped" if args.prior == "shipped" else CurvePrior.load(args.prior)
    sets = [("public", args.curves)] + ([("held-out", args.heldout)] if args.heldout else [])
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    for name, folder in sets:
        for max_points in args.max_points:
            t0 = time.perf_counter()
            table = backtest_set(folder, max_points, config, prior)
            split = summary(table)
            both = summary(table.assign(kind=table["all_kind"]))
            out = pd.concat([split, both[both["kind"].isin(
                {f"{k.split(',')[0]}, all" for k in split["kind"] if "collapses" in k})]])
            points = table.groupby("run")["n_points"].first()
            print(f"\n## {name} set ({folder.name}), "
                  + (f"thinned to <= {max_points} points" if max_points else "all points")
                  + f" ({points.min()}-{points.max()} per curve), weighting {args.weighting}, "
                  f"prior {args.prior}, "
                  f"{time.perf_counter() - t0:.0f} s")
            print(out.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
