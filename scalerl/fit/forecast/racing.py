"""Racing: stop the runs of a sweep whose predicted ceiling A is clearly below the best's.

`race(predictions, task=..., margin=0.02, min_fraction=0.3, groups=None, form="sigmoid")` is a
pure function of the latest prediction of every run (`scalerl.fit.forecast.predict`, one
predictions.parquet per run, concatenated). Units: a "group" is one configuration; without
`groups` every run is its own group, with `groups` ({run: group}) the seeds of one
configuration are judged together.

Per group (the runs with a usable prediction, i.e. not few_points, finite A):
- one run: A, A_lo, A_hi are the run's (the calibrated interval of A,
  `scalerl.fit.forecast.intervals`: block bootstrap widened by the run's own backtest; 95 % by
  default);
- k >= 2 seeds: A = mean of the seeds' A, spread = max - min of their A, A_lo / A_hi = mean
  of the bounds of the seeds that have an interval; the fraction of compute is the smallest
  of the seeds'.
A group none of whose seeds has an interval (interval_status before_c_mid, no_backtest, ...:
the data cannot support one yet) is kept and is not a reference. The best group has the
largest A among the groups with an interval. A group is stopped when all of:
1. it has run at least `min_fraction` of its compute (earlier, A is weakly determined);
2. its A_hi < best A_lo - margin (the intervals are separated by more than the margin);
3. it is not tied with the best: best A - A > max(margin, its spread, the best's spread)
   (paper §2.1: A of identical runs varies by ~0.02, so closer A values are a tie).
A run whose curve collapsed (status "collapsed") is stopped once past min_fraction (its
seeds are judged without it).

Observed rule (`observed=True`, the default): a group past min_fraction that the rule above
does not stop (it has no interval of A yet, or its interval does not separate it from the best)
is stopped when its pass rate fell clearly below its own start: `recent_gain` (the mean eval of the
latest half of its compute minus R0, `scalerl.fit.forecast.predict`) + z se < -margin, z the
one-sided normal quantile at the predictions' `confidence` (seeds: mean gain, se of the mean). A
sigmoid never falls below R0, so such a run is not on a rising curve (a diverged or broken run;
a collapse after a peak is the rule above), whatever A its fit has: with the curve prior
(`scalerl.fit.forecast.prior`) a few falling points still get a sigmoid and a wide interval of
A, shaped by the prior, that no interval rule separates from a learning run. The rule needs no
interval (sparse evals, a flat run that never reaches its C_mid). It does not compare runs on their present pass
rates: a run behind now can reach the higher A later (a larger C_mid), and on synthetic sweeps
(benchmarks/bench_prediction.py) that comparison stopped the best run in a third of them.
`--no-observed` turns it off. Everything else is kept, with the reason. Stopping saves the
compute a run has not spent yet: compute / compute_fraction - compute.

`read_stopped(path)`: the runs a decisions.json (the result of `race` as JSON, written by
`scalerl race --out`, `scalerl.fit.commands.race`) stops; the workflow skips their later chunks.

Deliberately left out: restarting stopped runs, successive halving schedules, judging B
(efficiency) rather than A, and the command (`scalerl.fit.commands.race`) and the report's
section (`scalerl.fit.report.racing`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

from scalerl.fit.curves.compare import A_MARGIN
from scalerl.fit.forecast.predict import FORMS

__all__ = ["race", "latest_predictions", "seed_groups", "read_stopped"]

UNUSABLE = ("few_points",)


def latest_predictions(df: pd.DataFrame, task: str, form: str = "sigmoid") -> pd.DataFrame:
    """The row of the latest chunk of every run for `task` and `form`."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    sub = df[(df["task"].astype(str) == str(task)) & (df["form"] == form)]
    if sub.empty:
        tasks = sorted(df["task"].astype(str).unique())
        raise ValueError(f"no {form} predictions for task {task!r}; tasks present: "
                         f"{', '.join(tasks) or 'none'}")
    return sub.sort_values(["run", "chunk"]).groupby("run", sort=True).tail(1) \
        .reset_index(drop=True)


def seed_groups(runs, pattern: str) -> dict[str, str]:
    """{run: run with `pattern` removed}, e.g. pattern '_s[0-9]+$' groups seeds of a cell."""
    regex = re.compile(pattern)
    return {str(r): regex.sub("", str(r)) for r in runs}


def _float(v) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def _interval_status(sub: pd.DataFrame) -> pd.Series:
    """Per row: interval_status, or "ok" for rows written before the column existed."""
    if "interval_status" not in sub.columns:
        return pd.Series("ok", index=sub.index)
    return sub["interval_status"].fillna("ok").astype(str)


def _summaries(latest: pd.DataFrame, groups: Mapping[str, str]) -> dict[str, dict]:
    out = {}
    for name, sub in latest.groupby(latest["run"].map(lambda r: groups.get(r, r)), sort=True):
        usable = sub[~sub["status"].isin(UNUSABLE) & np.isfinite(sub["A"])
                     & (sub["status"] != "collapsed")]
        bounded = usable[np.isfinite(usable["A_lo"].astype(float))
                         & np.isfinite(usable["A_hi"].astype(float))]
        s = {"runs": sorted(sub["run"]), "n_seeds": int(len(usable)),
             "fraction": float(sub["compute_fraction"].min()),
             "collapsed": sorted(sub.loc[sub["status"] == "collapsed", "run"]),
             "A": None, "A_lo": None, "A_hi": None, "spread": 0.0,
             "no_interval": sorted(set(_interval_status(usable[~usable.index.isin(
                 bounded.index)]))) if len(bounded) < len(usable) else []}
        seen = sub[np.isfinite(sub["recent_gain"].astype(float))
                   & np.isfinite(sub["recent_gain_se"].astype(float))
                   & (sub["status"] != "collapsed")] if "recent_gain" in sub.columns \
            else sub.iloc[:0]
        s.update(gain=None, gain_se=None)
        if len(seen):
            gain, se = seen["recent_gain"].astype(float), seen["recent_gain_se"].astype(float)
            s.update(gain=float(gain.mean()), gain_se=float(np.sqrt((se ** 2).sum()) / len(se)))
        if len(usable):
            s.update(A=float(usable["A"].mean()),
                     spread=float(usable["A"].max() - usable["A"].min()))
        if len(bounded):
            s.update(A_lo=float(bounded["A_lo"].mean()), A_hi=float(bounded["A_hi"].mean()))
        out[str(name)] = s
    return out


def _fell_below_start(g: dict, margin: float, z: float) -> tuple[bool, str]:
    """The observed rule (module docstring): stop?, and why."""
    if g["gain"] is None:
        return False, "no recent evals to judge"
    bound = g["gain"] + z * g["gain_se"]
    text = (f"observed: recent pass rate - R0 = {g['gain']:+.3f}, upper bound {bound:+.3f} "
            f"(+ {z:.2f} x se {g['gain_se']:.3f})")
    if bound < -margin:
        return True, f"{text} < -{margin:g}: it fell below its start"
    return False, f"{text} >= -{margin:g}: not below its start"


def race(predictions: pd.DataFrame, *, task: str, margin: float = A_MARGIN,
         min_fraction: float = 0.3, groups: Mapping[str, str] | None = None,
         form: str = "sigmoid", observed: bool = True) -> dict:
    """Stop/keep decisions for every run of the sweep; see the module docstring."""
    if margin < 0 or not 0 <= min_fraction <= 1:
        raise ValueError(f"need margin >= 0 and 0 <= min_fraction <= 1, got {margin}, "
                         f"{min_fraction}")
    latest = latest_predictions(predictions, task, form)
    groups = dict(groups or {})
    summary = _summaries(latest, groups)
    ranked = [g for g in summary if summary[g]["A"] is not None
              and summary[g]["A_lo"] is not None]
    best = max(ranked, key=lambda g: summary[g]["A"]) if ranked else None
    b = summary[best] if best else None
    conf = latest["confidence"].astype(float) if "confidence" in latest.columns else None
    conf = float(conf.dropna().iloc[0]) if conf is not None and conf.notna().any() else 0.95
    z = float(norm.ppf(conf))
    decisions, saved, planned = [], 0.0, 0.0
    for _, row in latest.iterrows():
        name = groups.get(row["run"], row["run"])
        g = summary[str(name)]
        final = row["compute"] / row["compute_fraction"] if row["compute_fraction"] > 0 \
            else float("nan")
        planned += final if np.isfinite(final) else 0.0
        stop, reason = False, ""
        no_interval = g["A"] is None or g["A_lo"] is None
        if g["fraction"] < min_fraction:
            reason = (f"only {g['fraction']:.0%} of compute run (< min_fraction "
                      f"{min_fraction:.0%}): A is not yet trusted")
        elif row["status"] == "collapsed":
            stop, reason = True, "the run collapsed (reward fell well below its peak)"
        elif no_interval:  # (a group with an interval ranks: a best exists)
            reason = ("no usable prediction yet (too few points)" if g["A"] is None else
                      f"no interval of A yet ({', '.join(g['no_interval']) or 'none'})")
            if not observed:
                reason += "; the data cannot support an A decision, so none"
        elif name == best:
            reason = "best A so far"
        else:
            gap = b["A"] - g["A"]
            tie = max(margin, g["spread"], b["spread"])
            separated = g["A_hi"] < b["A_lo"] - margin
            if gap <= tie:
                reason = (f"tie with the best: A gap {gap:.3f} <= {tie:.3f} (max of the margin "
                          "and the seed spreads)")
            elif not separated:
                reason = (f"A upper bound {g['A_hi']:.3f} not below the best's lower bound "
                          f"{b['A_lo']:.3f} - margin {margin:g}")
            else:
                stop = True
                reason = (f"A upper bound {g['A_hi']:.3f} < best ({best}) lower bound "
                          f"{b['A_lo']:.3f} - margin {margin:g}")
        if observed and not stop and g["fraction"] >= min_fraction \
                and row["status"] != "collapsed":  # the observed rule, whatever A says
            fell, why = _fell_below_start(g, margin, z)
            if no_interval:  # the only judge: its verdict either way
                stop, reason = fell, f"{reason}; {why}"
            elif fell:  # an interval of A need not see it
                stop, reason = True, f"{why} (by A alone: {reason})"
        save = float(final - row["compute"]) if stop and np.isfinite(final) else 0.0
        saved += save
        decisions.append({"run": str(row["run"]), "group": str(name),
                          "decision": "stop" if stop else "keep", "reason": reason,
                          "chunk": int(row["chunk"]), "compute_fraction":
                          float(row["compute_fraction"]), "A": _float(row["A"]),
                          "A_lo": _float(row["A_lo"]), "A_hi": _float(row["A_hi"]),
                          "status": str(row["status"]), "compute_saved": save})
    return {"task": str(task), "form": form, "margin": margin, "min_fraction": min_fraction,
            "observed": observed,
            "best": None if best is None else {"group": best, **b},
            "groups": summary, "decisions": decisions, "compute_saved": saved,
            "compute_planned": planned,
            "fraction_saved": saved / planned if planned > 0 else 0.0}


def read_stopped(path: str | Path) -> set[str]:
    """The runs a decisions.json (written by `scalerl race`: the result of `race`) stops."""
    data = json.loads(Path(path).read_text())
    return {d["run"] for d in data.get("decisions", []) if d.get("decision") == "stop"}
