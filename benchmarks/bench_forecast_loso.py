"""Forecasts of public RL eval curves by leaving one source out: today's fit against the curve
prior (alone and with the sweep fitted jointly), and against two persistence baselines.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_forecast_loso.py
    (options: --curves DIR (default benchmarks/public_curves), --work DIR (cached priors and
    forecasts, default results/bench_forecast_loso), --bootstrap N (today's intervals,
    default 200 = FitConfig's), --sources S... (only these held-out sources), --no-before)

Protocol (fixed before any result was looked at; see benchmarks/public_curves/README.md for
the corpus and its inclusion rule): every `eval` curve of the corpus, thinned to at most 60
evals (`scalerl.fit.forecast.corpus.MAX_POINTS`), compute = step. For each source S (one repository or
paper) the curve prior is estimated from the other sources only (`estimate_prior`, whose
interval calibration (kappa, kappa_gain) is itself leave-one-source-out inside those sources:
nested, S never enters it), then every curve of S is forecast at 25, 50 and 75 % of its last
step from the points so far:

- before: `predict_final(..., prior=None)` (today's least-squares sigmoid, default FitConfig:
  block bootstrap, calibrated intervals from the run's own backtest);
- after: `predict_final(..., prior=<prior without S>)`;
- after, joint: the runs of each sweep of S (same source, model and eval set) fitted together
  (`scalerl.fit.forecast.joint.forecast_sweep`), each at the same fraction of its own steps, with the
  same prior; its intervals are `prior_intervals` of each run's joint posterior.

Scored, per fraction: |forecast - final| with final = the mean of the last 3 evals (median and
90th percentile), the same for persistence (the last value seen) and smoothed persistence (the
mean of the last 3 values seen), on the curves that got a forecast; how many forecasts were
closer to the final than persistence; how many had an interval (`interval_status` ok), how
many of those covered the last eval, and their median width (observed interval, nominal 95 %);
the width a constant interval would need for 85 / 95 % coverage at 50 % (an oracle bound); and
each held-out prior's calibration. No hyperparameter is tuned here: the prior's only fitted
constants come from the other sources. Cached under --work: the priors and the prior forecasts
per corpus (sources.csv), today's fits per source curves.
Deliberately left out: train-reward curves (not pass rates of a fixed set) and the power law.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalerl.fit.curves.sigmoid import FitConfig  # noqa: E402
from scalerl.fit.forecast.corpus import (  # noqa: E402
    DEFAULT_CORPUS,
    KAPPA_GAIN_GRID,
    estimate_prior,
    fraction_prefix,
    read_corpus,
)
from scalerl.fit.forecast.joint import forecast_sweep, prior_intervals  # noqa: E402
from scalerl.fit.forecast.predict import predict_final  # noqa: E402
from scalerl.fit.forecast.prior import CurvePrior  # noqa: E402

FRACTIONS = (0.25, 0.5, 0.75)
HERE = Path(__file__).resolve().parent


def _row(method, cv, frac, c, y, pred, lo, hi, status):
    final = float(np.mean(cv.reward[-3:]))
    return {"method": method, "source": cv.source, "file": cv.file, "fraction": frac,
            "n_seen": int(c.size), "predicted": pred, "observed_lo": lo, "observed_hi": hi,
            "interval_status": status, "final": final, "last": float(cv.reward[-1]),
            "persistence": float(y[-1]), "smoothed": float(np.mean(y[-3:]))}


def forecast_source(curves, source, prior, config, methods, log) -> list[dict]:
    """Rows of `methods` ("before", "after", "after, joint") for the curves of `source`."""
    rows = []
    mine = [cv for cv in curves if cv.source == source]
    for frac in FRACTIONS:
        t0 = time.perf_counter()
        for cv in mine:
            c, y = fraction_prefix(cv, frac)
            final = float(cv.compute[-1])
            for name, pr in (("after", prior), ("before", None)):
                if name not in methods:
                    continue
                (p,) = predict_final(c, y, final, config, forms=("sigmoid",), prior=pr)
                rows.append(_row(name, cv, frac, c, y, p.predicted_final, p.observed_final_lo,
                                 p.observed_final_hi, p.interval_status))
        for sweep in sorted({cv.sweep for cv in mine}) if "after, joint" in methods else ():
            runs = [cv for cv in mine if cv.sweep == sweep]
            seen = {cv.file: fraction_prefix(cv, frac) for cv in runs}
            fcs = forecast_sweep(seen, {cv.file: float(cv.compute[-1]) for cv in runs}, prior,
                                 config)
            for cv in runs:
                fc = fcs[cv.file]
                iv = prior_intervals(fc, prior, config.confidence)
                c, y = seen[cv.file]
                rows.append(_row("after, joint", cv, frac, c, y, fc.predicted, iv.observed[0],
                                 iv.observed[1], iv.status))
        log(f"    {source} at {frac:.0%}: {len(mine)} curve(s), {time.perf_counter() - t0:.0f} s")
    return rows


def _digest(*parts) -> str:
    h = hashlib.sha1()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
    return h.hexdigest()[:10]


def oracle_widths(table: pd.DataFrame, method: str = "after", at: float = 0.5) -> dict:
    """The width a constant interval centred on each forecast needs to cover the last eval in
    85 % and 95 % of the curves at `at` (quantiles of 2 |last - forecast|): the bound no
    calibration of a constant width can beat on these forecasts."""
    sub = table[(table["method"] == method) & (table["fraction"] == at)]
    miss = 2 * (sub["last"] - sub["predicted"]).abs().dropna()
    return {q: float(miss.quantile(q)) for q in (0.85, 0.95)}


def summary(table: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (method, frac), sub in table.groupby(["method", "fraction"], sort=True):
        ok = sub[np.isfinite(sub["predicted"])]
        err = (ok["predicted"] - ok["final"]).abs()
        pers = (ok["persistence"] - ok["final"]).abs()
        smooth = (ok["smoothed"] - ok["final"]).abs()
        given = sub[sub["interval_status"] == "ok"]
        cover = (given["observed_lo"] <= given["last"]) & (given["last"] <= given["observed_hi"])
        out.append({
            "method": method, "at": f"{frac:.0%}", "curves": len(sub), "forecast": len(ok),
            "median": err.median(), "p90": err.quantile(0.9),
            "pers median": pers.median(), "pers p90": pers.quantile(0.9),
            "smooth median": smooth.median(), "smooth p90": smooth.quantile(0.9),
            "closer than pers": int((err < pers).sum()),
            "closer than smooth": int((err < smooth).sum()),
            "interval": len(given), "covers last": int(cover.sum()),
            "coverage": cover.mean() if len(given) else np.nan,
            "median width": (given["observed_hi"] - given["observed_lo"]).median()
            if len(given) else np.nan})
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curves", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--work", type=Path, default=HERE.parent / "results"
                        / "bench_forecast_loso")
    parser.add_argument("--bootstrap", type=int, default=FitConfig().bootstrap_n)
    parser.add_argument("--sources", nargs="*", help="held-out sources (default: all)")
    parser.add_argument("--no-before", action="store_true", help="skip today's fits (slow)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    log = print
    curves = read_corpus(args.curves)
    sources = sorted({cv.source for cv in curves})
    corpus = _digest((args.curves / "sources.csv").read_bytes(), KAPPA_GAIN_GRID)
    config = FitConfig(bootstrap_n=args.bootstrap)
    t0 = time.perf_counter()
    tables, priors = [], {}
    for source in args.sources or sources:
        tag = source.replace("/", "+")
        # the prior without `source` (its kappa, kappa_gain nested: calibrated by leaving one
        # of the other sources out at a time), cached per corpus
        prior_path = args.work / f"prior_without_{tag}__{corpus}.json"
        if prior_path.exists():
            prior = CurvePrior.load(prior_path)
        else:
            t1 = time.perf_counter()
            log(f"prior without {source} ...")
            rest = [cv for cv in curves if cv.source != source]
            prior = estimate_prior(rest, provenance={"held_out": source})
            prior.save(prior_path)
            log(f"  {time.perf_counter() - t1:.0f} s: mean {np.round(prior.mean, 3)}, kappa "
                f"{prior.kappa:.4f}, kappa_gain {prior.kappa_gain:.3f}")
        priors[source] = prior
        mine = _digest(*[(cv.file, cv.compute.tobytes(), cv.reward.tobytes())
                         for cv in curves if cv.source == source])
        parts = [("after", f"after_{tag}__{corpus}.csv", prior)]
        if not args.no_before:  # today's fit: depends on the source's curves only
            parts.append(("before", f"before_{tag}__{mine}_bootstrap{args.bootstrap}.csv", None))
        for method, name, pr in parts:
            path = args.work / name
            if path.exists():
                rows = pd.read_csv(path)
            else:
                methods = ("after", "after, joint") if method == "after" else ("before",)
                rows = pd.DataFrame(forecast_source(curves, source, pr, config, methods, log))
                rows.to_csv(path, index=False)
            tables.append(rows)
    table = pd.concat(tables, ignore_index=True)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    fmt = {"float_format": lambda v: f"{v:.3f}"}
    n_src = table["source"].nunique()
    print(f"\n## {table['file'].nunique()} eval curves of {n_src} sources, leave one source "
          f"out ({time.perf_counter() - t0:.0f} s)")
    print(summary(table).to_string(index=False, **fmt))
    widths = oracle_widths(table)
    print(f"\nconstant-width oracle at 50 % (after): {widths[0.85]:.3f} covers 85 %, "
          f"{widths[0.95]:.3f} covers 95 % of the last evals")
    print("\nheld-out priors (interval calibration nested: leave one of the other sources out):")
    for source, prior in priors.items():
        cal = prior.provenance.get("estimate", {}).get("calibration", {})
        print(f"  without {source}: kappa {prior.kappa:.4f}, kappa_gain {prior.kappa_gain:.2f}, "
              f"from {cal.get('n_forecasts', '?')} forecasts of "
              f"{prior.provenance.get('estimate', {}).get('n_sources', '?')} sources, inner "
              f"coverage {cal.get('weighted_coverage', float('nan')):.3f}, inner median width "
              f"{cal.get('weighted_median_width', float('nan')):.3f}")
    for source, sub in table.groupby("source"):
        print(f"\n### held out: {source} ({sub['file'].nunique()} curves)")
        print(summary(sub).to_string(index=False, **fmt))


if __name__ == "__main__":
    main()
