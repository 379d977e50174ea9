"""Speed and accuracy of the curve fitter (`scalerl.fit`).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fit.py
        time of one sigmoid fit of 100 points on the paper's grid (71 A x 100 C_mid values),
        of the power law, of a bootstrap with n=200, and of `fit_curve` with everything.
    .venv/bin/python benchmarks/bench_fit.py --table1-seeds 30 --budget-mult 3 6
        for every row of the paper's Table 1: over many noisy draws (sigma 0.01, 75 points,
        R0 = 0.30, cutoff 1.5k GPU-h, paper grid), the fraction with |A - A_true| <= 0.02 and
        with the prediction of the final value from half the compute within 0.03 of the true
        and of the observed final value.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from scalerl.fit.curves.bootstrap import bootstrap_intervals  # noqa: E402
from scalerl.fit.curves.curve import fit_curve  # noqa: E402
from scalerl.fit.curves.powerlaw import fit_power_law  # noqa: E402
from scalerl.fit.curves.sigmoid import FitConfig, fit_sigmoid, sigmoid  # noqa: E402
from scalerl.fit.curves.synthetic import TABLE1, table1_curve  # noqa: E402


def _best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), float(np.median(times))


def bench_speed(repeats: int) -> None:
    rng = np.random.default_rng(0)
    compute = np.linspace(400, 40_000, 100)  # [100] GPU-h, inside the paper's C_mid range
    reward = sigmoid(compute, 0.61, 1.92, 10_000, 0.30) + rng.normal(0, 0.01, 100)
    cfg = FitConfig.paper(cutoff=0.0)
    fit = fit_sigmoid(compute, reward, cfg, r0=0.30)
    print(f"points: 100, grid: {cfg.cmid_points} C_mid x "
          f"{round((cfg.a_max - cfg.a_min) / cfg.a_step) + 1} A, B scan {cfg.b_scan_points} "
          f"+ 4 Newton steps; fit A={fit.A:.4f} B={fit.B:.3f} C_mid={fit.C_mid:.0f}")
    for name, fn in (
        ("sigmoid fit (grid + polish)", lambda: fit_sigmoid(compute, reward, cfg, r0=0.30)),
        ("power-law fit", lambda: fit_power_law(compute, reward)),
        ("bootstrap n=200 (residuals)",
         lambda: bootstrap_intervals(compute, reward, fit, cfg.replace(bootstrap_n=200))),
        ("bootstrap n=200 (points)",
         lambda: bootstrap_intervals(compute, reward, fit,
                                     cfg.replace(bootstrap_n=200, bootstrap_method="points"))),
        ("fit_curve: all (+ extrapolation, bootstrap 200)",
         lambda: fit_curve(compute, reward, cfg.replace(r0=0.30))),
    ):
        best, median = _best_of(fn, repeats)
        print(f"{name:<48} best {best * 1000:8.1f} ms   median {median * 1000:8.1f} ms")


def bench_table1(seeds: int, mults: list[float]) -> None:
    cfg = FitConfig.paper()  # cutoff 1500 GPU-h, A 0.450..0.800, C_mid 100..40000 linear
    print(f"Table 1 recovery over {seeds} seeds: sigma 0.01, 75 points, R0 0.30 given, "
          "cutoff 1.5k GPU-h, the paper's grid (as tests/fit/test_table1.py)")
    for mult in mults:
        print(f"\ncompute up to {mult:g} x C_mid")
        print(f"{'row':<32} {'|dA|<=.02':>9} {'max|dA|':>8} {'ext<=.03 true':>13} "
              f"{'ext<=.03 obs':>12} {'max err true':>12}")
        for row, (name, *_rest) in enumerate(TABLE1):
            d_a, e_true, e_obs = [], [], []
            for seed in range(seeds):
                cur = table1_curve(row, seed, budget_mult=mult)
                c_cfg = cfg
                keep = cur.compute >= c_cfg.cutoff
                full = fit_sigmoid(cur.compute[keep], cur.reward[keep], c_cfg, r0=cur.R0)
                half = keep & (cur.compute <= 0.5 * cur.compute.max())
                part = fit_sigmoid(cur.compute[half], cur.reward[half], c_cfg, r0=cur.R0)
                pred = float(part.predict(cur.compute[-1:])[0])
                d_a.append(abs(full.A - cur.A))
                e_true.append(abs(pred - cur.truth[-1]))
                e_obs.append(abs(pred - cur.reward[-1]))
            d_a, e_true, e_obs = map(np.asarray, (d_a, e_true, e_obs))
            print(f"{name:<32} {np.mean(d_a <= 0.02):9.2f} {d_a.max():8.3f} "
                  f"{np.mean(e_true <= 0.03):13.2f} {np.mean(e_obs <= 0.03):12.2f} "
                  f"{e_true.max():12.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--table1-seeds", type=int, default=0,
                        help="also measure Table-1 recovery rates over this many seeds")
    parser.add_argument("--budget-mult", type=float, nargs="+", default=[6.0])
    args = parser.parse_args()
    bench_speed(args.repeats)
    if args.table1_seeds:
        bench_table1(args.table1_seeds, args.budget_mult)


if __name__ == "__main__":
    main()
