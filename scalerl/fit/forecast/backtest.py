"""Backtest the predictions: how far was each prediction of the final pass rate from the end?

For every finished run (one whose observed final pass rate is known), every prediction made
along the way (`scalerl.fit.forecast.predict`, one row per chunk and form) is compared with the
observed final: `backtest_table(predictions, finals)` gives one row per prediction with
error = predicted_final - observed_final, abs_error, and for the interval of the value the
user observes (`observed_final_lo/hi`; predictions files written before it existed: the
curve interval `predicted_final_lo/hi`) its width and whether it covered the observed final
(NaN where the prediction has no interval, `interval_status`); `backtest_summary(table,
fractions)` the median and 90th percentile of the absolute error, the share of predictions
with an interval, their coverage (against the nominal `confidence`) and median width per form
and fraction-of-compute bin. `finals_from_records(records)` takes the observed finals from
fit.json records (the last point of each curve) for the report (`scalerl.fit.report.scaling`).

Skill: a forecast is only worth having if it beats assuming the run stays where it is. Every
prediction row carries the reward observed when it was made (`latest_reward`, the
persistence or last-value forecast) and the mean of the last few evals seen
(`smoothed_reward`, the smoothed persistence forecast, `SMOOTH_EVALS` of them: the last value
without one eval's noise); the table adds persistence_error / persistence_abs_error and
smoothed_error / smoothed_abs_error, and the summary, per form and fraction, each baseline's
median and p90 absolute error and the forecast's `error_ratio` = median abs. error /
persistence's and `smoothed_ratio` = / smoothed persistence's (< 1: the forecast is better).
Prediction files without those columns give NaN there.

`backtest_curve(compute, reward, ...)` backtests one finished curve from any log (`scalerl
predict --backtest`, `benchmarks/bench_forecast_public.py`): predictions from the points up to
each fraction of its final compute, scored against its last point; `backtest_sweep(curves)` the
same for the runs of one sweep fitted jointly (`scalerl predict --backtest --joint`).

The observed final is itself a noisy measurement (binomial se ~ 0.018 at p = 0.5 on 800
samples, `scalerl.fit.curves.noise`): errors below that are not resolvable. The observed interval
includes that noise; a curve interval (which excludes it) would cover it less often than its
nominal level, which is why coverage is scored on the observed interval.

Deliberately left out: weighting runs, scoring the prediction of A (A is never observed), and
the report's Markdown and figure of a backtest (`scalerl.fit.report.backtest`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from scalerl.fit.forecast.predict import (
    DEFAULT_PRIOR,
    FORMS,
    predict_final,
    predict_sweep,
    prediction_rows,
    smoothed_level,
)

__all__ = ["backtest_table", "backtest_summary", "finals_from_records", "backtest_curve",
           "backtest_sweep",
           "DEFAULT_BINS", "DEFAULT_FRACTIONS", "SUMMARY_COLUMNS"]

DEFAULT_BINS = (0.0, 0.25, 0.5, 0.75, 1.0)
DEFAULT_FRACTIONS = (0.25, 0.5, 0.75)


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
    latest = table["latest_reward"].astype(float) if "latest_reward" in table.columns \
        else np.nan
    table["persistence_error"] = latest - table["observed_final"]
    table["persistence_abs_error"] = table["persistence_error"].abs()
    smoothed = table["smoothed_reward"].astype(float) if "smoothed_reward" in table.columns \
        else np.nan
    table["smoothed_error"] = smoothed - table["observed_final"]
    table["smoothed_abs_error"] = table["smoothed_error"].abs()
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


SKILL_COLUMNS = ("persistence_median_abs_error", "persistence_p90_abs_error", "error_ratio",
                 "smoothed_median_abs_error", "smoothed_p90_abs_error", "smoothed_ratio")
SUMMARY_COLUMNS = ["form", "fraction_bin", "n", "median_abs_error", "p90_abs_error",
                   "with_interval", "coverage", "median_width", "confidence", *SKILL_COLUMNS]


def backtest_summary(table: pd.DataFrame, bins: Sequence[float] = DEFAULT_BINS) -> pd.DataFrame:
    """Per form and compute-fraction bin (right-closed, e.g. (0.25, 0.5]): predictions, median
    and 90th-percentile absolute error, the share with an interval, their coverage of the
    observed final and median width, the nominal confidence (NaN if unknown), and the skill
    against persistence (`SKILL_COLUMNS`)."""
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
                     "confidence": float(conf.iloc[0]) if len(conf) else float("nan"),
                     **_skill(sub)})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _skill(sub: pd.DataFrame) -> dict:
    """Each persistence forecast's median / p90 absolute error and the forecast's error ratio
    to it (NaN where the rows lack the baseline)."""
    out = {}
    for column, prefix, ratio_name in (("persistence_abs_error", "persistence", "error_ratio"),
                                       ("smoothed_abs_error", "smoothed", "smoothed_ratio")):
        base = sub[column].dropna() if column in sub.columns else pd.Series(dtype=float)
        med = float(base.median()) if len(base) else float("nan")
        out[f"{prefix}_median_abs_error"] = med
        out[f"{prefix}_p90_abs_error"] = float(base.quantile(0.9)) if len(base) \
            else float("nan")
        out[ratio_name] = float(sub["abs_error"].median()) / med if med > 0 else float("nan")
    return out


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


def _sorted(compute, reward) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(compute, float).ravel()
    y = np.asarray(reward, float).ravel()
    order = np.argsort(c, kind="stable")
    return c[order], y[order]


def _upto(c: np.ndarray, fraction: float) -> int:
    """How many of the sorted points `c` lie at or below `fraction` of the last."""
    return int(np.searchsorted(c, fraction * float(c[-1]) * (1 + 1e-12), side="right"))


def backtest_curve(compute, reward, *, run: str, task: str, config=None,
                   fractions: Sequence[float] = DEFAULT_FRACTIONS,
                   forms: Sequence[str] | None = None,
                   prior=DEFAULT_PRIOR) -> tuple[list[dict], dict]:
    """Prediction rows (PREDICTIONS_SCHEMA) of one finished curve at each fraction of its
    final compute (from the points with compute <= fraction x final; chunk = the index of the
    latest of them; `prior` as in `predict_final`), and its finals row {run, task,
    observed_final}: the last point."""
    c, y = _sorted(compute, reward)
    final = float(c[-1])
    if final <= 0:
        raise ValueError(f"{run} {task}: the last point is at compute {final}; a backtest "
                         "needs a finished curve")
    rows = []
    for fraction in fractions:
        upto = _upto(c, fraction)
        if upto == 0:
            continue
        preds = predict_final(c[:upto], y[:upto], final, config, forms=forms or FORMS,
                              prior=prior)
        rows += prediction_rows(run, task, upto - 1, float(c[upto - 1]), final, preds,
                                latest_reward=float(y[upto - 1]),
                                smoothed_reward=smoothed_level(y[:upto]))
    return rows, {"run": str(run), "task": str(task), "observed_final": float(y[-1])}


def backtest_sweep(curves: Sequence[tuple], *, config=None,
                   fractions: Sequence[float] = DEFAULT_FRACTIONS,
                   prior=DEFAULT_PRIOR) -> tuple[list[dict], list[dict]]:
    """`backtest_curve` of the finished runs of one sweep, fitted jointly: at each fraction
    every run is cut at that fraction of its own final compute and the sweep predicted with
    `predict_sweep`. `curves`: (compute, reward, run, task) per run. Returns the prediction
    rows and the finals rows."""
    runs = [(*_sorted(c, y), str(run), str(task)) for c, y, run, task in curves]
    bad = [run for c, _, run, _ in runs if not c.size or c[-1] <= 0]
    if bad:
        raise ValueError(f"{bad[0]}: a backtest needs a finished curve (points past compute 0)")
    rows = []
    for fraction in fractions:
        cut = [(c, y, run, task, _upto(c, fraction)) for c, y, run, task in runs]
        cut = [item for item in cut if item[4] > 0]
        preds = predict_sweep([(c[:k], y[:k]) for c, y, _, _, k in cut],
                              [float(c[-1]) for c, *_ in cut], config, prior=prior)
        for (c, y, run, task, k), p in zip(cut, preds):
            rows += prediction_rows(run, task, k - 1, float(c[k - 1]), float(c[-1]), p,
                                    latest_reward=float(y[k - 1]),
                                    smoothed_reward=smoothed_level(y[:k]))
    finals = [{"run": run, "task": task, "observed_final": float(y[-1])}
              for _, y, run, task in runs]
    return rows, finals
