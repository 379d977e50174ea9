"""Accuracy of early predictions (`scalerl.fit.forecast.predict`) and of racing
(`scalerl.fit.forecast.racing`).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_prediction.py
    (options: --pred-seeds 4 --race-seeds 100 --bootstrap 30 --checkpoints 0.3 0.6
    --prior shipped; --pred-seeds 0 skips part 1, --race-seeds 0 part 2; --prior none: the
    plain least-squares sigmoid, --prior PATH: a rebuilt curve prior)

1. Prediction error. Held-out synthetic runs with known (A, B, C_mid): every row of the
   paper's Table 1 (`scalerl.fit.curves.synthetic`, R0 = 0.30), `--pred-seeds` draws each, 30
   evals up to 6 x C_mid plus the base model, every pass rate drawn Binomial(800, p) / 800 (the
   default eval: 200 prompts x 4 samples). At 25/50/75 % of the compute each run is fitted on
   its points so far and the final pass rate predicted with the sigmoid, the sigmoid with
   binomial weights, and the power law. Printed per form and fraction: median and 90th
   percentile of |predicted - true final| (true = the noise-free curve) and of |predicted -
   observed final| (one noisy measurement), the share of forecasts with an interval
   (`interval_status` ok, `scalerl.fit.forecast.intervals`), the coverage of the true final by
   the 95 % mean-curve interval and of the observed final by the 95 % observed interval with their
   median widths, and the share of fits that had reached C_mid. The eval noise is binomial
   (n = 800 passed to `predict_final`).
2. Racing. `--race-seeds` sweeps of 8 runs, each with A ~ U(0.50, 0.70), B ~ U(1.2, 2.5),
   C_mid log-uniform in [1500, 6000], one budget of 20000 for all (3.3-13 x C_mid), 20 evals
   per run (binomial noise as above). At each checkpoint fraction the runs still going are
   predicted (sigmoid A, its calibrated interval) and `race(margin=0.02, min_fraction=0.3)`
   decides (a run without an interval yet is kept); a stopped run stays stopped (its last
   prediction stays in the pool). Printed: the share of sweeps whose
   best run (largest true A) is never stopped (target >= 95 %), the share of runs stopped,
   of those the share whose true A was within the margin of the best's, and the compute
   saved (unspent compute of stopped runs / the sweep's planned compute).

Deliberately left out: real training curves (the workflow's `scalerl report` backtests
finished runs with `scalerl.fit.forecast.backtest`).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalerl.fit.curves.noise import noise_floor  # noqa: E402
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid  # noqa: E402
from scalerl.fit.curves.synthetic import TABLE1, TABLE1_R0  # noqa: E402
from scalerl.fit.forecast.predict import predict_final, prediction_rows  # noqa: E402
from scalerl.fit.forecast.prior import CurvePrior, shipped_prior  # noqa: E402
from scalerl.fit.forecast.racing import race  # noqa: E402

N_SAMPLES = 800  # 200 prompts x 4 samples
FRACTIONS = (0.25, 0.5, 0.75)


def binomial_points(a, b, c_mid, final, n_points, rng):
    c = np.r_[0.0, np.arange(1, n_points + 1) / n_points * final]  # [n_points + 1]
    truth = sigmoid(c, a, b, c_mid, TABLE1_R0)
    truth[0] = TABLE1_R0
    return c, rng.binomial(N_SAMPLES, truth) / N_SAMPLES, truth


def bench_prediction(seeds: int, n_boot: int, prior="shipped") -> None:
    records = []
    plain = FitConfig(bootstrap_n=n_boot)
    weighted = plain.replace(weighting="binomial")
    for row, (_, c_mid, b, a) in enumerate(TABLE1):
        for seed in range(seeds):
            rng = np.random.default_rng([seed, row, 7])
            c, y, truth = binomial_points(a, b, c_mid, 6.0 * c_mid, 30, rng)
            for frac in FRACTIONS:
                k = c <= frac * c[-1] + 1e-9
                n = np.full(int(k.sum()), N_SAMPLES)
                preds = predict_final(c[k], y[k], c[-1], plain, n_samples=n, prior=prior)
                (wp,) = predict_final(c[k], y[k], c[-1], weighted, n_samples=n,
                                      forms=("sigmoid",), prior=prior)
                for p, form in ((preds[0], "sigmoid"), (wp, "sigmoid+binomial"),
                                (preds[1], "power_law")):
                    given = p.interval_status == "ok"
                    records.append({
                        "form": form, "fraction": frac, "err_true": p.predicted_final - truth[-1],
                        "err_obs": p.predicted_final - y[-1], "given": given,
                        "covered": (p.predicted_final_lo <= truth[-1] <= p.predicted_final_hi)
                        if given else np.nan,
                        "covered_obs": (p.observed_final_lo <= y[-1] <= p.observed_final_hi)
                        if given else np.nan,
                        "width": p.predicted_final_hi - p.predicted_final_lo,
                        "width_obs": p.observed_final_hi - p.observed_final_lo,
                        "reached": p.reached_c_mid})
    df = pd.DataFrame(records)
    print(f"\n1. prediction of the final pass rate: {len(TABLE1)} Table-1 runs x {seeds} draws, "
          f"30 evals to 6 x C_mid, Binomial({N_SAMPLES}) noise, bootstrap {n_boot}")
    print(f"{'form':<18}{'frac':>6}{'med |e| true':>14}{'p90 true':>10}{'med |e| obs':>13}"
          f"{'p90 obs':>9}{'interval':>10}{'cov. true / width':>19}{'cov. obs / width':>18}"
          f"{'reached C_mid':>15}")
    for (form, frac), sub in df.groupby(["form", "fraction"], sort=False):
        et, eo = sub["err_true"].abs(), sub["err_obs"].abs()
        g = sub[sub["given"]]
        cov = (f"{g['covered'].mean():.0%} / {g['width'].median():.3f}",
               f"{g['covered_obs'].mean():.0%} / {g['width_obs'].median():.3f}") \
            if len(g) else ("n/a", "n/a")
        print(f"{form:<18}{frac:>6.2f}{et.median():>14.4f}{et.quantile(0.9):>10.4f}"
              f"{eo.median():>13.4f}{eo.quantile(0.9):>9.4f}{sub['given'].mean():>10.0%}"
              f"{cov[0]:>19}{cov[1]:>18}{sub['reached'].mean():>15.0%}")
    print("sigmoid, median |e| true by reached_c_mid (flag False: A weakly determined):")
    sig = df[df["form"] == "sigmoid"]
    for (frac, reached), sub in sig.groupby(["fraction", "reached"]):
        print(f"  at {frac:.2f}, reached_c_mid={reached!s:<5}: n={len(sub):>3}, median |e| "
              f"{sub['err_true'].abs().median():.4f}, max {sub['err_true'].abs().max():.4f}")
    print("noise floor: " + noise_floor(0.6, N_SAMPLES).statement())


def one_sweep(seed: int, checkpoints, n_boot: int, margin: float, min_fraction: float,
              prior="shipped"):
    rng = np.random.default_rng([seed, 2026])
    final, n_runs = 20_000.0, 8
    a = rng.uniform(0.50, 0.70, n_runs)
    b = rng.uniform(1.2, 2.5, n_runs)
    c_mid = np.exp(rng.uniform(np.log(1500), np.log(6000), n_runs))
    curves = [binomial_points(a[i], b[i], c_mid[i], final, 20, rng) for i in range(n_runs)]
    cfg = FitConfig(bootstrap_n=n_boot)
    stopped: dict[str, float] = {}
    latest: dict[str, list[dict]] = {}
    for chunk, frac in enumerate(checkpoints):
        for i, (c, y, _) in enumerate(curves):
            name = f"run{i}"
            if name in stopped:
                continue
            k = c <= frac * final + 1e-9
            preds = predict_final(c[k], y[k], final, cfg, forms=("sigmoid",),
                                  n_samples=np.full(int(k.sum()), N_SAMPLES), prior=prior)
            latest[name] = prediction_rows(name, "math", chunk, float(c[k][-1]), final, preds)
        df = pd.DataFrame([r for rows in latest.values() for r in rows])
        result = race(df, task="math", margin=margin, min_fraction=min_fraction)
        for d in result["decisions"]:
            if d["decision"] == "stop" and d["run"] not in stopped:
                stopped[d["run"]] = d["compute_fraction"]
    best = f"run{int(np.argmax(a))}"
    near = {f"run{i}" for i in range(n_runs) if a.max() - a[i] <= margin}
    saved = sum(1.0 - f for f in stopped.values()) / n_runs
    return best not in stopped, len(stopped), len(set(stopped) & near), saved


def bench_racing(seeds: int, checkpoints, n_boot: int, margin=0.02, min_fraction=0.3,
                 prior="shipped") -> None:
    kept, n_stopped, n_near, saved = [], 0, 0, []
    for seed in range(seeds):
        ok, stops, near, save = one_sweep(seed, checkpoints, n_boot, margin, min_fraction,
                                          prior)
        kept.append(ok)
        n_stopped += stops
        n_near += near
        saved.append(save)
    print(f"\n2. racing: {seeds} sweeps x 8 runs, checkpoints {list(checkpoints)}, margin "
          f"{margin}, min_fraction {min_fraction}, bootstrap {n_boot}")
    print(f"best run never stopped: {np.mean(kept):.1%} of sweeps (target >= 95 %)")
    print(f"runs stopped: {n_stopped / (8 * seeds):.1%}; of them within the margin of the "
          f"best's A: {n_near / max(n_stopped, 1):.1%}")
    print(f"compute saved: mean {np.mean(saved):.1%}, median {np.median(saved):.1%} of the "
          "sweep's planned compute")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pred-seeds", type=int, default=4)
    parser.add_argument("--race-seeds", type=int, default=100)
    parser.add_argument("--bootstrap", type=int, default=30)
    parser.add_argument("--checkpoints", type=float, nargs="+", default=[0.3, 0.6])
    parser.add_argument("--prior", default="shipped", help="curve prior of the sigmoid: "
                        "shipped (predict_final's default), none, or a prior file")
    args = parser.parse_args()
    prior = None if args.prior == "none" else \
        "shipped" if args.prior == "shipped" else CurvePrior.load(args.prior)
    print(f"curve prior: {args.prior}"
          + (f" ({(shipped_prior() if prior == 'shipped' else prior).summary()})"
             if prior is not None else ""))
    t0 = time.perf_counter()
    if args.pred_seeds > 0:
        bench_prediction(args.pred_seeds, args.bootstrap, prior)
    t1 = time.perf_counter()
    if args.race_seeds > 0:
        bench_racing(args.race_seeds, args.checkpoints, args.bootstrap, prior=prior)
    print(f"\ntime: predictions {t1 - t0:.0f} s, racing {time.perf_counter() - t1:.0f} s")


if __name__ == "__main__":
    main()
