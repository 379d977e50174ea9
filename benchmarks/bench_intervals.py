"""Do the forecast intervals mean what they say? Coverage and width on real and synthetic curves.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_intervals.py \
        [--curves benchmarks/public_curves] [--heldout DIR] [--synthetic-seeds 2] \
        [--bootstrap 200] [--forms sigmoid power_law]

Sets: every `*.csv` (columns step, value; one curve each) of `--curves` (the committed public
curves, sources in its sources.csv) and of `--heldout` (a directory outside the repository,
never committed); and the synthetic set: every row of the paper's Table 1
(`scalerl.fit.curves.synthetic`, R0 = 0.30), `--synthetic-seeds` draws each, a base point plus 30
evals to 6 x C_mid, pass rates drawn Binomial(800, p) / 800 (n known, so the eval noise is
binomial). Real curves: compute = step, the step-0 eval (if any) is R0, the final compute is
the last step, the eval noise is estimated from the points.

At 25 / 50 / 75 % of the final compute every curve is forecast from its points so far by
`scalerl.fit.forecast.predict.predict_final` twice: "today" = the intervals before calibration
(`bootstrap_method = residuals`, `calibrate_intervals = False`: percentiles of an independent
residual bootstrap of the fitted curve), "new" = the defaults (moving-block bootstrap, eval
noise, widening from the run's own backtest at the same horizon ratio, no interval where the
data cannot support one). Printed per set, form and fraction:

- n, and the share of forecasts the new method gives an interval for (interval_status ok);
- coverage of the nominal 95 % interval and its median width: today's interval against the
  last eval (one measurement, what the user observes) and against the mean of the last three
  evals (the definition of the issue that measured today's coverage); the new observed
  interval against the last eval; the new mean-curve interval against the noise-free final
  (synthetic) or the mean of the last three evals (real curves: a proxy with a third of the
  noise variance of one eval);
- the same coverage of today's interval restricted to the forecasts the new method supports
  (same forecasts, so the two are comparable);
- the median absolute error of the point forecast against the last eval, today vs new (the
  point forecast is unchanged; equal figures confirm it) and of the last observed value
  (persistence).

Deliberately left out: tuning anything on these curves (the intervals take no constant from
them) and the racing benchmark (benchmarks/bench_prediction.py).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalerl.fit.curves.sigmoid import FitConfig, sigmoid  # noqa: E402
from scalerl.fit.curves.synthetic import TABLE1, TABLE1_R0  # noqa: E402
from scalerl.fit.forecast.predict import FORMS, predict_final  # noqa: E402

FRACTIONS = (0.25, 0.5, 0.75)
N_SAMPLES = 800  # 200 prompts x 4 samples, the default eval


def read_curve(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """compute (= step) and value of one step,value CSV, sorted, duplicates averaged."""
    df = pd.read_csv(path)
    if not {"step", "value"} <= set(df.columns):
        raise ValueError(f"{path}: need columns step, value; got {list(df.columns)}")
    df = df[np.isfinite(df["step"]) & np.isfinite(df["value"])]
    df = df.groupby("step", as_index=False)["value"].mean().sort_values("step")
    return df["step"].to_numpy(float), df["value"].to_numpy(float)


def csv_curves(directory: Path, kind: str | None = "eval") -> list[dict]:
    """The curves of a directory; with a sources.csv that has a `kind` column, only those of
    `kind` (eval: held-out accuracy; train_reward curves are not accuracies)."""
    paths = sorted(p for p in directory.glob("*.csv") if p.name != "sources.csv")
    manifest = directory / "sources.csv"
    if kind and manifest.exists():
        sources = pd.read_csv(manifest)
        if {"file", "kind"} <= set(sources.columns):
            keep = set(sources.loc[sources["kind"] == kind, "file"])
            paths = [p for p in paths if p.name in keep]
    if not paths:
        raise SystemExit(f"no curve CSVs in {directory}")
    return [{"name": p.stem, "compute": c, "reward": y, "n_samples": None, "truth": None}
            for p in paths for c, y in [read_curve(p)]]


def sparse(curve: dict, n_evals: int) -> dict:
    """The curve thinned to about `n_evals` evals after the base: every k-th eval counted back
    from the last (so the final eval is kept), plus the compute-0 point."""
    c, y = curve["compute"], curve["reward"]
    base = c == 0
    k = max(1, int(np.ceil((~base).sum() / n_evals)))
    idx = np.flatnonzero(~base)[::-1][::k][::-1]
    keep = np.r_[np.flatnonzero(base), idx]
    return {**curve, "name": f"{curve['name']} (every {k})", "compute": c[keep],
            "reward": y[keep]}


def synthetic_curves(seeds: int) -> list[dict]:
    curves = []
    for row, (name, c_mid, b, a) in enumerate(TABLE1):
        for seed in range(seeds):
            rng = np.random.default_rng([seed, row, 29])
            c = np.r_[0.0, np.arange(1, 31) / 30 * 6.0 * c_mid]  # [31]
            truth = sigmoid(c, a, b, c_mid, TABLE1_R0)
            truth[0] = TABLE1_R0
            curves.append({"name": f"{name} s{seed}", "compute": c,
                           "reward": rng.binomial(N_SAMPLES, truth) / N_SAMPLES,
                           "n_samples": np.full(c.size, N_SAMPLES), "truth": float(truth[-1])})
    return curves


def _inside(lo, hi, value) -> float:
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return float("nan")
    return float(lo <= value <= hi)


def score(curves: list[dict], n_boot: int, forms) -> pd.DataFrame:
    today_cfg = FitConfig(bootstrap_n=n_boot, bootstrap_method="residuals",
                          calibrate_intervals=False)
    new_cfg = FitConfig(bootstrap_n=n_boot)
    rows = []
    for curve in curves:
        c, y, n = curve["compute"], curve["reward"], curve["n_samples"]
        final, last, last3 = float(c[-1]), float(y[-1]), float(y[-3:].mean())
        mean_target = curve["truth"] if curve["truth"] is not None else last3
        for frac in FRACTIONS:
            k = c <= frac * final * (1 + 1e-9)
            nk = None if n is None else n[k]
            today = predict_final(c[k], y[k], final, today_cfg, n_samples=nk, forms=forms,
                                  prior=None)
            new = predict_final(c[k], y[k], final, new_cfg, n_samples=nk, forms=forms,
                                prior=None)
            for t, p in zip(today, new, strict=True):
                rows.append({
                    "curve": curve["name"], "form": p.form, "fraction": frac,
                    "supported": p.interval_status == "ok", "status": p.interval_status,
                    "today_cov_last": _inside(t.predicted_final_lo, t.predicted_final_hi, last),
                    "today_cov_last3": _inside(t.predicted_final_lo, t.predicted_final_hi,
                                               last3),
                    "today_width": t.predicted_final_hi - t.predicted_final_lo,
                    "new_cov_obs": _inside(p.observed_final_lo, p.observed_final_hi, last),
                    "new_width_obs": p.observed_final_hi - p.observed_final_lo,
                    "new_cov_mean": _inside(p.predicted_final_lo, p.predicted_final_hi,
                                            mean_target),
                    "new_width_mean": p.predicted_final_hi - p.predicted_final_lo,
                    "err_today": abs(t.predicted_final - last),
                    "err_new": abs(p.predicted_final - last),
                    "err_last_value": abs(float(y[k][-1]) - last),
                    "backtest_n": p.backtest_n, "widening": p.interval_widening})
    return pd.DataFrame(rows)


def _pct(series: pd.Series) -> str:
    s = series.dropna()
    return f"{s.mean():.0%}" if len(s) else "n/a"


def _med(series: pd.Series) -> str:
    s = series.dropna()
    return f"{s.median():.3f}" if len(s) else "n/a"


def report(name: str, df: pd.DataFrame, mean_target: str) -> None:
    print(f"\n{name}: {df['curve'].nunique()} curves; nominal 95 %; coverage / median width")
    print("| form | at | n | new: interval given | today vs last eval | today vs mean of "
          "last 3 | today, where new given | new observed vs last eval | new mean curve vs "
          f"{mean_target} | med abs err today / new / last value |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (form, frac), sub in df.groupby(["form", "fraction"], sort=False):
        sup = sub[sub["supported"]]
        print(f"| {form} | {frac:.0%} | {len(sub)} | {sub['supported'].mean():.0%} | "
              f"{_pct(sub['today_cov_last'])} / {_med(sub['today_width'])} | "
              f"{_pct(sub['today_cov_last3'])} | "
              f"{_pct(sup['today_cov_last'])} / {_med(sup['today_width'])} | "
              f"{_pct(sup['new_cov_obs'])} / {_med(sup['new_width_obs'])} | "
              f"{_pct(sup['new_cov_mean'])} / {_med(sup['new_width_mean'])} | "
              f"{_med(sub['err_today'])} / {_med(sub['err_new'])} / "
              f"{_med(sub['err_last_value'])} |")
    flags = df[~df["supported"]].groupby(["form", "fraction"])["status"].value_counts()
    if len(flags):
        print("no interval: " + "; ".join(f"{form} {frac:.0%} {status} {count}"
                                          for (form, frac, status), count in flags.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curves", default=str(Path(__file__).parent / "public_curves"),
                        help="directory of committed public curve CSVs (step,value)")
    parser.add_argument("--heldout", help="directory of held-out curve CSVs (outside the repo)")
    parser.add_argument("--synthetic-seeds", type=int, default=2,
                        help="draws per Table-1 row (0: skip the synthetic set)")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--forms", nargs="+", choices=FORMS, default=list(FORMS))
    parser.add_argument("--sparse", type=int, default=0, help="also the public curves thinned "
                        "to this many evals (every k-th, the last kept; 0: skip)")
    parser.add_argument("--out", help="also write the per-forecast rows to this CSV")
    args = parser.parse_args()
    sets = []
    if args.curves and args.curves != "none":
        sets.append(("public curves", csv_curves(Path(args.curves)), "mean of last 3"))
    if args.synthetic_seeds > 0:
        sets.append(("synthetic (Table 1, Binomial(800))", synthetic_curves(args.synthetic_seeds),
                     "noise-free final"))
    if args.sparse and args.curves != "none":
        sets.append((f"public curves, every k-th eval to {args.sparse} evals",
                     [sparse(cv, args.sparse) for cv in csv_curves(Path(args.curves))],
                     "mean of last 3"))
    if args.heldout:
        sets.append(("held-out curves", csv_curves(Path(args.heldout)), "mean of last 3"))
    frames = []
    for name, curves, target in sets:
        t0 = time.perf_counter()
        df = score(curves, args.bootstrap, tuple(args.forms))
        report(name, df, target)
        print(f"({time.perf_counter() - t0:.0f} s)")
        frames.append(df.assign(set=name))
    if args.out:
        pd.concat(frames).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
