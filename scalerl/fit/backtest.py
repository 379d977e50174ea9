"""Backtest the predictions: how far was each prediction of the final pass rate from the end?

For every finished run (one whose observed final pass rate is known), every prediction made
along the way (`scalerl.fit.predict`, one row per chunk and form) is compared with the
observed final: `backtest_table(predictions, finals)` gives one row per prediction with
error = predicted_final - observed_final, abs_error, and for the interval of the value the
user observes (`observed_final_lo/hi`; predictions files written before it existed: the
curve interval `predicted_final_lo/hi`) its width and whether it covered the observed final
(NaN where the prediction has no interval, `interval_status`); `backtest_summary(table,
fractions)` the median and 90th percentile of the absolute error, the share of predictions
with an interval, their coverage (against the nominal `confidence`) and median width per form
and fraction-of-compute bin; `plot_backtest(table,
path)` the absolute error against the compute fraction, one line per run and form, sigmoid
vs power law (matplotlib Agg). `finals_from_records(records)` takes the observed finals from
fit.json records (the last point of each curve) for `scalerl.fit.report`.

The observed final is itself a noisy measurement (binomial se ~ 0.018 at p = 0.5 on 800
samples, `scalerl.fit.noise`): errors below that are not resolvable. The observed interval
includes that noise; a curve interval (which excludes it) would cover it less often than its
nominal level, which is why coverage is scored on the observed interval.

Deliberately left out: weighting runs and scoring the prediction of A (A is never observed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalerl.utils.io import atomic_path  # noqa: E402

__all__ = ["backtest_table", "backtest_summary", "plot_backtest", "finals_from_records",
           "backtest_markdown", "DEFAULT_BINS", "SUMMARY_COLUMNS"]

DEFAULT_BINS = (0.0, 0.25, 0.5, 0.75, 1.0)
FORM_COLOURS = {"sigmoid": "C1", "power_law": "C2"}


def backtest_table(predictions: pd.DataFrame, finals: pd.DataFrame) -> pd.DataFrame:
    """One row per usable prediction of a finished run: the prediction columns plus
    observed_final, error, abs_error, covered. `finals`: columns run, task, observed_final."""
    need = {"run", "task", "observed_final"}
    if not need <= set(finals.columns):
        raise ValueError(f"finals need columns {sorted(need)}, got {list(finals.columns)}")
    keyed = finals.assign(run=finals["run"].astype(str), task=finals["task"].astype(str))
    pred = predictions.assign(run=predictions["run"].astype(str),
                              task=predictions["task"].astype(str))
    table = pred.merge(keyed[["run", "task", "observed_final"]], on=["run", "task"],
                       how="inner")
    table = table[np.isfinite(table["predicted_final"].astype(float))].copy()
    table["error"] = table["predicted_final"] - table["observed_final"]
    table["abs_error"] = table["error"].abs()
    lo, hi = _observed_interval(table)
    table["interval_width"] = hi - lo
    inside = (lo <= table["observed_final"]) & (table["observed_final"] <= hi)
    table["covered"] = inside.astype(float).where(np.isfinite(lo) & np.isfinite(hi))
    return table.sort_values(["run", "task", "form", "compute_fraction"]).reset_index(drop=True)


def _observed_interval(table: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """The interval of one observed eval per row: observed_final_lo/hi, or for rows written
    before those columns existed (interval_status empty) the curve interval."""
    lo = table["predicted_final_lo"].astype(float)
    hi = table["predicted_final_hi"].astype(float)
    if "observed_final_lo" not in table.columns:
        return lo, hi
    old = table["interval_status"].isna() if "interval_status" in table.columns \
        else pd.Series(True, index=table.index)
    return (lo.where(old, table["observed_final_lo"].astype(float)),
            hi.where(old, table["observed_final_hi"].astype(float)))


SUMMARY_COLUMNS = ["form", "fraction_bin", "n", "median_abs_error", "p90_abs_error",
                   "with_interval", "coverage", "median_width", "confidence"]


def backtest_summary(table: pd.DataFrame, bins: Sequence[float] = DEFAULT_BINS) -> pd.DataFrame:
    """Per form and compute-fraction bin (right-closed, e.g. (0.25, 0.5]): predictions, median
    and 90th-percentile absolute error, the share with an interval, their coverage of the
    observed final and median width, and the nominal confidence (NaN if unknown)."""
    cut = pd.cut(table["compute_fraction"], list(bins), include_lowest=True)
    rows = []
    for (form, interval), sub in table.groupby([table["form"], cut], observed=True, sort=True):
        given = sub["covered"].notna()
        conf = sub["confidence"].dropna() if "confidence" in sub.columns else pd.Series([])
        rows.append({"form": form, "fraction_bin": str(interval), "n": int(len(sub)),
                     "median_abs_error": float(sub["abs_error"].median()),
                     "p90_abs_error": float(sub["abs_error"].quantile(0.9)),
                     "with_interval": float(given.mean()),
                     "coverage": float(sub.loc[given, "covered"].mean()) if given.any()
                     else float("nan"),
                     "median_width": float(sub.loc[given, "interval_width"].median())
                     if given.any() else float("nan"),
                     "confidence": float(conf.iloc[0]) if len(conf) else float("nan")})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def backtest_markdown(table: pd.DataFrame, bins: Sequence[float] = DEFAULT_BINS) -> str:
    """The report section: the summary as a Markdown table."""
    summary = backtest_summary(table, bins)
    conf = summary["confidence"].dropna()
    nominal = f"{conf.iloc[0]:.0%}" if len(conf) else "the nominal level"
    lines = ["", "## Prediction backtest", "",
             f"{table['run'].nunique()} finished run(s): predictions of the final pass rate "
             "made at a fraction of the compute (`scalerl predict`) against the observed final."
             f" with interval: share of predictions the data supported an interval for; "
             f"coverage: share of those intervals (of one observed eval, nominal {nominal}) "
             "containing the observed final; width: their median width.", "",
             "| form | compute fraction | predictions | median abs. error | p90 abs. error "
             "| with interval | coverage | width |", "|---|---|---|---|---|---|---|---|"]
    for _, r in summary.iterrows():
        cov = "n/a" if np.isnan(r["coverage"]) else f"{r['coverage']:.0%}"
        width = "n/a" if np.isnan(r["median_width"]) else f"{r['median_width']:.3f}"
        lines.append(f"| {r['form']} | {r['fraction_bin']} | {r['n']} | "
                     f"{r['median_abs_error']:.3f} | {r['p90_abs_error']:.3f} | "
                     f"{r['with_interval']:.0%} | {cov} | {width} |")
    return "\n".join(lines) + "\n"


def plot_backtest(table: pd.DataFrame, path: str | Path, title: str = "") -> None:
    """|predicted - observed final| against the fraction of compute, per run and form."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for form, sub in table.groupby("form", sort=True):
        colour = FORM_COLOURS.get(form, "C0")
        for _, run in sub.groupby(["run", "task"], sort=True):
            ax.plot(run["compute_fraction"], run["abs_error"], color=colour, alpha=0.35, lw=1,
                    marker="o", ms=3, label=None)
        med = sub.groupby(pd.cut(sub["compute_fraction"], np.linspace(0, 1, 11)),
                          observed=True)["abs_error"].median()
        centres = [iv.mid for iv in med.index]
        ax.plot(centres, med.to_numpy(), color=colour, lw=2.5, label=f"{form} (median)")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("fraction of the run's compute when predicting")
    ax.set_ylabel("|predicted - observed final pass rate|")
    ax.set_xlim(0, 1.02)
    ax.set_title(title or f"prediction error, {table['run'].nunique()} finished run(s)",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def finals_from_records(records: Sequence[dict]) -> pd.DataFrame:
    """Observed finals from fit.json records: run and task from group/meta, the reward of the
    curve's last point (records without a run id are skipped)."""
    rows = []
    for r in records:
        values = {**r.get("meta", {}), **r.get("group", {})}
        if values.get("run") is None or not r.get("points", {}).get("reward"):
            continue
        rows.append({"run": str(values["run"]), "task": str(values.get("task", "math")),
                     "observed_final": float(r["points"]["reward"][-1])})
    return pd.DataFrame(rows, columns=["run", "task", "observed_final"])
