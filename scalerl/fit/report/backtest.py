"""The prediction backtest as the report shows it: a Markdown section and a figure.

`backtest_markdown(table, bins)`: the summary of `scalerl.fit.forecast.backtest` per form and
fraction-of-compute bin as a Markdown table (predictions, median and p90 absolute error, the
share with an interval, their coverage of the observed final against the nominal level and
median width, both persistence forecasts' errors (the last value, and the smoothed last
value: the mean of the last few evals) and the ratios to them, and what the forecasts were
fitted with: the curve prior or none); `scaling.md` carries it and `scalerl predict
--backtest` prints it. `plot_backtest(table, path)`: the absolute error
against the compute fraction, one thin line per run and form, the median per tenth of the
compute thick, sigmoid vs power law (matplotlib Agg, PNG written atomically).

Deliberately left out: computing the backtest (`scalerl.fit.forecast.backtest`) and any
verdict on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalerl.fit.forecast.backtest import DEFAULT_BINS, backtest_summary  # noqa: E402
from scalerl.utils.io import atomic_path  # noqa: E402

__all__ = ["backtest_markdown", "plot_backtest"]

FORM_COLOURS = {"sigmoid": "C1", "power_law": "C2"}


def backtest_markdown(table: pd.DataFrame, bins: Sequence[float] = DEFAULT_BINS) -> str:
    """The report section: the summary as a Markdown table."""
    summary = backtest_summary(table, bins)
    conf = summary["confidence"].dropna()
    nominal = f"{conf.iloc[0]:.0%}" if len(conf) else "the nominal level"
    lines = ["", "## Prediction backtest", "",
             f"{table['run'].nunique()} finished run(s): predictions of the final pass rate "
             "made at a fraction of the compute (`scalerl predict`) against the observed final."
             " with interval: share of predictions the data supported an interval for; "
             f"coverage: share of those intervals (of one observed eval, nominal {nominal}) "
             "containing the observed final; width: their median width. persistence: the "
             "last-value forecast (the run stays at the reward observed when predicting); "
             "smoothed: the mean of the last few evals seen (the baseline to beat); ratio = "
             "median abs. error / the baseline's (< 1: the forecast is better).",
             *_fitted_with(table), "",
             "| form | compute fraction | predictions | median abs. error | p90 abs. error "
             "| with interval | coverage | width | persistence median | persistence p90 "
             "| ratio | smoothed median | smoothed p90 | ratio to smoothed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in summary.iterrows():
        lines.append(f"| {r['form']} | {r['fraction_bin']} | {r['n']} | "
                     f"{r['median_abs_error']:.3f} | {r['p90_abs_error']:.3f} | "
                     f"{_pct(r['with_interval'])} | {_pct(r['coverage'])} | "
                     f"{_num(r['median_width'])} | {_num(r['persistence_median_abs_error'])} | "
                     f"{_num(r['persistence_p90_abs_error'])} | "
                     f"{_num(r['error_ratio'], '.2f')} | "
                     f"{_num(r['smoothed_median_abs_error'])} | "
                     f"{_num(r['smoothed_p90_abs_error'])} | "
                     f"{_num(r['smoothed_ratio'], '.2f')} |")
    return "\n".join(lines) + "\n"


def _fitted_with(table: pd.DataFrame) -> list[str]:
    """A line naming what the sigmoid forecasts were fitted with (the `prior` column), if
    known."""
    if "prior" not in table.columns:
        return []
    used = table.loc[table["form"] == "sigmoid", "prior"].dropna().astype(str)
    priors = sorted(set(used) - {"none"})
    if not priors:
        return ["", "Sigmoid forecasts: the plain least-squares fit (no curve prior)."] \
            if len(used) else []
    plain = int((used == "none").sum())
    tail = f"; {plain} with the plain fit (where the prior does not apply)." if plain else "."
    return ["", f"Sigmoid forecasts fitted with the curve prior ({'; '.join(priors)}){tail}"]


def _num(value: float, spec: str = ".3f") -> str:
    return "n/a" if not np.isfinite(value) else format(value, spec)


def _pct(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.0%}"


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
