"""Forecast across scale on public families of runs that differ only in model size, and on
seeded synthetic families: the predicted final of the largest size from the smaller ones.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_across_sizes.py
    (options: --curves DIR (default benchmarks/public_curves/sizes), --drop MODEL... (leave
    these runs out, e.g. one whose recipe is in doubt), --bootstrap N (per-run bootstrap
    replicates, default 200; 0: equal weights), --synthetic N (also N seeded synthetic
    families, `scalerl.fit.curves.synthetic.size_family`), --no-r0 (do not give the target's base
    score))

Public families: `sources.csv` of the curve set (`family`, `params`, `model`, `file`); each
curve a `step,value` CSV, compute = step (every run of a family has the same prompts per
step). For every size with at least two smaller ones (the largest is the leave-largest-out
row the issue asks for; the others are the same test one size down), `predict_across` gets the
smaller runs, the target's size, its last step as the final compute and, unless --no-r0, its
step-0 value as target_r0 (the base model's eval, measured before any training). Printed: the
prediction and its observed-final interval, the observed last value, the error, whether the
interval covers it, the predicted A and its interval, and the naive forecasts' errors: "same
as the largest smaller model" (its last value) and its smoothed last value (mean of its last
three evals). A refusal prints its reason.

Synthetic: `size_family(seed)` for seeds 0..N-1 (five sizes 0.5B-14B, size-to-size scatter
of A, C_mid and B, binomial evals of 1000 samples); the 14B run predicted from the other
four. Printed: coverage of its observed final and of its true A by the 95 % intervals, the
median interval width, the mean absolute error against the naive forecast's.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalerl.fit import FitConfig, predict_across  # noqa: E402
from scalerl.fit.curves.synthetic import size_family  # noqa: E402

HERE = Path(__file__).resolve().parent


def read_family(folder: Path, family: str, sources: pd.DataFrame, drop) -> list[dict]:
    rows = sources[(sources["family"] == family) & ~sources["model"].isin(drop)]
    out = []
    for _, row in rows.sort_values("params").iterrows():
        curve = pd.read_csv(folder / row["file"])
        out.append({"model": row["model"], "params": float(row["params"]),
                    "step": curve["step"].to_numpy(float),
                    "value": curve["value"].to_numpy(float)})
    return out


def public_rows(runs: list[dict], family: str, config: FitConfig, give_r0: bool) -> list[dict]:
    rows = []
    for t in range(2, len(runs)):
        target, smaller = runs[t], runs[:t]
        p = predict_across([(r["params"], r["step"], r["value"]) for r in smaller],
                           target["params"], float(target["step"][-1]),
                           target_r0=float(target["value"][0]) if give_r0 else None,
                           config=config)
        observed = float(target["value"][-1])
        last = smaller[-1]["value"]
        row = {"family": family, "target": target["model"],
               "from": "+".join(r["model"].split("-")[1] for r in smaller), "status": p.status,
               "observed": observed, "naive_err": last[-1] - observed,
               "smoothed_err": float(last[-3:].mean()) - observed}
        if p.status == "ok":
            row.update(predicted=p.predicted_final, lo=p.observed_final_lo,
                       hi=p.observed_final_hi, err=p.predicted_final - observed,
                       covered=p.observed_final_lo <= observed <= p.observed_final_hi,
                       A=p.A, A_lo=p.A_lo, A_hi=p.A_hi)
        else:
            row["why"] = p.warnings[0]
        rows.append(row)
    return rows


def print_public(rows: list[dict]) -> None:
    print("| family | target | from | predicted [95 % observed] | observed | error | covered "
          "| A [95 %] | naive error | smoothed naive error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        head = f"| {r['family']} | {r['target']} | {r['from']} |"
        tail = f" {r['observed']:.3f} |"
        naive = f" {r['naive_err']:+.3f} | {r['smoothed_err']:+.3f} |"
        if r["status"] != "ok":
            print(f"{head} refused ({r['status']}: {r['why']}) |{tail} – | – | – |{naive}")
            continue
        print(f"{head} {r['predicted']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] |{tail} "
              f"{r['err']:+.3f} | {'yes' if r['covered'] else 'no'} | {r['A']:.3f} "
              f"[{r['A_lo']:.3f}, {r['A_hi']:.3f}] |{naive}")


def synthetic(n: int, config: FitConfig, give_r0: bool) -> None:
    hits = hits_a = 0
    width, err, naive = [], [], []
    for seed in range(n):
        fam = size_family(seed)
        p = predict_across(fam.runs(4), fam.sizes[4], float(fam.compute[-1]),
                           target_r0=float(fam.R0[4]) if give_r0 else None, config=config)
        if p.status != "ok":
            print(f"seed {seed}: {p.status}: {p.warnings[0]}")
            continue
        observed = fam.reward[4, -1]
        hits += p.observed_final_lo <= observed <= p.observed_final_hi
        hits_a += p.A_lo <= fam.A[4] <= p.A_hi
        width.append(p.observed_final_hi - p.observed_final_lo)
        err.append(abs(p.predicted_final - observed))
        naive.append(abs(fam.reward[3, -1] - observed))
    k = len(err)
    print(f"synthetic: {k} of {n} families forecast; coverage of the observed final "
          f"{hits / k:.3f}, of A {hits_a / k:.3f} (nominal {config.confidence}); median "
          f"observed-interval width {np.median(width):.3f}; mean |error| {np.mean(err):.4f} "
          f"vs naive {np.mean(naive):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--curves", type=Path, default=HERE / "public_curves" / "sizes")
    ap.add_argument("--drop", nargs="*", default=[])
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--synthetic", type=int, default=0)
    ap.add_argument("--no-r0", action="store_true")
    args = ap.parse_args()
    config = FitConfig(bootstrap_n=args.bootstrap)
    t0 = time.time()
    sources = pd.read_csv(args.curves / "sources.csv")
    rows = []
    for family in dict.fromkeys(sources["family"]):
        rows += public_rows(read_family(args.curves, family, sources, args.drop), family,
                            config, not args.no_r0)
    print_public(rows)
    if args.synthetic:
        synthetic(args.synthetic, config, not args.no_r0)
    print(f"({time.time() - t0:.0f} s, bootstrap {args.bootstrap}, target_r0 "
          f"{'not given' if args.no_r0 else 'given'})")


if __name__ == "__main__":
    main()
