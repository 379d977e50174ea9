"""The text table of forecasts that `scalerl predict INPUT...` prints and `scalerl watch` keeps
up to date: one line per run and task from its latest sigmoid row of predictions.parquet.

`forecast_table(rows, verdicts, steps=...)`: run, task (a column only when there are several;
one task goes in the title), progress (the compute fraction, or the caller's text such as
'120/400'), latest value, predicted final [the interval of the one eval the user will observe,
`scalerl.fit.forecast.intervals`; rows written before it existed: the mean curve's], A
[calibrated interval], whether C_mid is reached, the interval status, and the verdict
(`scalerl.fit.forecast.runs.verdicts`) or, without verdicts, the prediction's status.

Deliberately left out: colours and terminal handling (`scalerl.utils.log.LiveBlock` redraws it)
and the forecasts themselves (`scalerl.fit.forecast`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from scalerl.fit.forecast.runs import latest_rows

__all__ = ["forecast_table"]


def _interval(value: float, lo: float, hi: float) -> str:
    if not np.isfinite(value):
        return "-"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{value:.3f}"
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def _final_interval(r: pd.Series) -> tuple[float, float]:
    """The interval of the one eval the user will observe at the final compute; for rows
    written before it existed (no interval_status), the mean curve's."""
    if isinstance(r.get("interval_status"), str):
        return r["observed_final_lo"], r["observed_final_hi"]
    return r["predicted_final_lo"], r["predicted_final_hi"]


def forecast_table(rows: pd.DataFrame, verdict: Mapping[tuple[str, str], str] | None = None,
                   *, steps: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """Text lines: one per run and task from its latest sigmoid row; `steps`: the progress
    text per (run, task) (e.g. 'step 120/400'), default the compute fraction."""
    latest = latest_rows(rows)
    conf = latest["confidence"].dropna() if "confidence" in latest.columns else ()
    level = f"{conf.iloc[0]:.0%}" if len(conf) else "95%"
    header = ["run", "task", "progress", "latest", f"predicted final [{level}, one eval]",
              f"A [{level}]", "C_mid", "interval", "verdict" if verdict is not None else "status"]
    table = []
    for _, r in latest.iterrows():
        key = (str(r["run"]), str(r["task"]))
        progress = (steps or {}).get(key, f"{r['compute_fraction']:.0%}")
        state = r["status"] if r["status"] not in ("ok", "not_converged") else ""
        table.append([key[0], key[1], progress,
                      "-" if not np.isfinite(r["latest_reward"]) else f"{r['latest_reward']:.3f}",
                      _interval(r["predicted_final"], *_final_interval(r)),
                      _interval(r["A"], r["A_lo"], r["A_hi"]),
                      "reached" if r["reached_c_mid"] else ("not yet" if not state else "-"),
                      r["interval_status"] if isinstance(r.get("interval_status"), str)
                      else "-",
                      (verdict or {}).get(key, state or "-")])
    if latest["task"].nunique() <= 1:  # one task: its name goes in the title, not a column
        header.pop(1)
        table = [row[:1] + row[2:] for row in table]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    return ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip()
            for line in [header, *table]]
