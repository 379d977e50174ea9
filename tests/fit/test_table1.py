"""Recovery of the paper's Table 1 curves (App. A.13) from noisy synthetic evaluations.

Setting (see scalerl/fit/curves/synthetic.py): 75 evaluations equally spaced in steps (every 100
steps), compute linear in steps up to 6 x C_mid (the smallest multiple the paper's budgets
reach: 16k GPU-h / 2542 = 6.3; Section 5 goes to 9-12x), Gaussian noise sigma = 0.01, R0 =
0.30 given (the paper does not print R0), the paper's grid and its 1.5k GPU-h cutoff. One
pre-committed seed (0) per row. Rates over 30 seeds, and at 3 x C_mid, are printed by
`benchmarks/bench_fit.py --table1-seeds 30 --budget-mult 3 6`.
"""

import numpy as np
import pytest

from scalerl.fit.curves.curve import fit_curve
from scalerl.fit.curves.sigmoid import FitConfig
from scalerl.fit.curves.synthetic import TABLE1, TABLE1_R0, table1_curve

CONFIG = FitConfig.paper(r0=TABLE1_R0, bootstrap_n=0, power_law=False)


@pytest.mark.parametrize("row", range(9), ids=[r[0] for r in TABLE1[:9]])
def test_table1_row_recovered_and_extrapolated(row):
    cur = table1_curve(row, seed=0)
    fit = fit_curve(cur.compute, cur.reward, CONFIG)
    s = fit.sigmoid
    assert fit.converged, s.warnings
    assert fit.selection.cutoff == 1500.0 and s.n_points == int((cur.compute >= 1500).sum())
    assert abs(s.A - cur.A) <= 0.02
    assert abs(s.B / cur.B - 1) <= 0.2  # 30-seed max: 17 %
    assert abs(s.C_mid / cur.C_mid - 1) <= 0.1  # 30-seed max: 6.5 %
    ex = fit.extrapolation
    assert ex["fraction"] == 0.5 and ex["n_heldout"] >= 30
    assert abs(ex["predicted_final"] - cur.truth[-1]) <= 0.03  # the noise-free final value
    assert abs(ex["predicted_final"] - ex["observed_final"]) <= 0.03  # the noisy last point
    assert ex["max_abs_error"] < 0.05


def test_table1_code_curve_reports_its_uncertainty():
    # Row "math+code, code curve" (C_mid 1675, B 1.09, A 0.615) does NOT meet |dA| <= 0.02
    # reliably: with B ~ 1 the curve is still 5 % of the gain below A at 6 x C_mid, and the
    # 1.5k cutoff (0.9 x C_mid) removes the lower half. Over 30 seeds 93 % meet the bound; the
    # pre-committed seed 0 gives dA = -0.022. What must hold instead: the 95 % bootstrap
    # interval contains the true A (here [0.580, 0.616] around 0.615) and is wider than the
    # paper's 0.02 margin, so the fit does not claim a precision it lacks.
    cur = table1_curve(9, seed=0)
    fit = fit_curve(cur.compute, cur.reward, CONFIG.replace(bootstrap_n=200))
    lo, hi = fit.intervals["A"]
    assert lo <= cur.A <= hi
    assert hi - lo > 0.02
    assert abs(fit.sigmoid.A - cur.A) <= 0.03
    assert abs(fit.extrapolation["predicted_final"] - cur.truth[-1]) <= 0.03


def test_table1_noise_free_rows_are_exact():
    # Without noise every row (code curve included) is recovered to the optimiser's precision.
    for row in range(len(TABLE1)):
        cur = table1_curve(row, noise=0.0)
        fit = fit_curve(cur.compute, cur.reward, CONFIG.replace(extrapolate_fraction=None))
        got = (fit.sigmoid.A, fit.sigmoid.B, fit.sigmoid.C_mid)
        assert got == pytest.approx((cur.A, cur.B, cur.C_mid), rel=1e-5), TABLE1[row][0]
        assert np.all(fit.selection.compute == cur.compute)
