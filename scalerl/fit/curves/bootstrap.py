"""Bootstrap intervals for the sigmoid's A, B and C_mid.

Three resampling schemes (`FitConfig.bootstrap_method`):
- `blocks` (default): moving-block residual bootstrap. y*_j = f(C_j) + e*_j where e* is the
  centred residual series cut into overlapping blocks of `block_length` consecutive points,
  drawn with replacement and laid end to end. Real curves drift, plateau and bump, so their
  residuals are correlated; blocks keep that correlation in every replicate (a run of
  positive residuals stays a run), independent draws would average it away and give intervals
  that are too narrow. With uncorrelated residuals the block length is 1 and this is the
  residual scheme.
- `residuals`: y*_j = f(C_j) + e*_j with e* drawn one by one with replacement from the
  centred residuals (independent residuals assumed; the scheme before blocks).
- `points`: (C_j, y_j) pairs drawn with replacement; makes no assumption of equal noise.

Block length (`block_length`): the lag-1 autocorrelation rho of the residuals sets it by the
AR(1) rule for the moving-block bootstrap (Politis & White 2004), L = (2 rho / (1 - rho^2))^(2/3)
N^(1/3), rounded, 1 when rho <= 0, at most N // 2.

Each replicate is refitted by the bounded least-squares polish started from the point
estimate, inside the same ranges as the point fit (a full grid search per replicate would
cost ~100x more and lands in the same basin for curves the point fit resolves). Intervals are
percentile intervals at `FitConfig.confidence`. Seeded by `FitConfig.bootstrap_seed`. The
fitted replicates are kept (`draws`: [n_ok, 3] rows of A, B, C_mid) so a plot can draw the
curve's pointwise band (`scalerl.fit.report.panels`).

With weights w_j = 1 / se_j^2 (`FitConfig.weighting = "binomial"`) the residual scheme
resamples standardised residuals (y_j - f_j) / se_j and scales each back by its own se_j; the
point scheme carries each point's weight with it; every replicate is refitted weighted.
`keep_draws=True` returns the replicates' (A, B, C_mid) too, for intervals of derived
quantities (the predicted final reward of `scalerl.fit.forecast.predict`).

Deliberately left out: BCa corrections and resampling R0 (it is treated as known).
"""

from __future__ import annotations

import numpy as np

from scalerl.fit.curves.optimize import polish
from scalerl.fit.curves.sigmoid import FitConfig, SigmoidFit, sigmoid

__all__ = ["bootstrap_intervals", "block_length", "resample_indices"]

BOOTSTRAP_METHODS = ("blocks", "residuals", "points")


def block_length(resid) -> int:
    """Moving-block length for the residual series `resid` [N] (see the module docstring)."""
    r = np.asarray(resid, dtype=float)
    r = r - r.mean()
    n = r.size
    denom = float(r @ r)
    if n < 4 or denom <= 0:
        return 1
    rho = float(r[1:] @ r[:-1]) / denom  # lag-1 autocorrelation
    if rho <= 0:
        return 1
    rho = min(rho, 0.95)
    length = (2.0 * rho / (1.0 - rho * rho)) ** (2.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(1, round(length)), n // 2))


def resample_indices(n_pool: int, size: int, method: str, length: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Indices [size] into a pool of `n_pool` residuals for one replicate: blocks of `length`
    consecutive indices laid end to end (method "blocks"), else independent draws."""
    if method != "blocks" or length <= 1:
        return rng.integers(0, n_pool, size=size)
    starts = rng.integers(0, n_pool - length + 1, size=-(-size // length))  # [ceil(size / L)]
    return (starts[:, None] + np.arange(length)[None, :]).ravel()[:size]  # [size]


def bootstrap_intervals(compute, reward, fit: SigmoidFit, config: FitConfig,
                        *, fixed_a: float | None = None, weights=None,
                        keep_draws: bool = False, residual_pool=None) -> dict:
    """Percentile intervals {"A": [lo, hi], "B": [...], "C_mid": [...]} plus bookkeeping.

    `compute`, `reward`: the points the fit used (positive compute, above the cutoff, sorted
    by compute); `weights` [N]: the fit's weights, if any. `keep_draws`: also return
    "draws", the [n_ok, 3] array of replicate (A, B, C_mid). `residual_pool` [M]: centred
    standardised residuals to resample instead of the fit's own (a prefix of a run
    bootstrapped with the whole run's residuals, `scalerl.fit.forecast.intervals`); the scheme
    is then blocks or residuals, never points.
    """
    c = np.asarray(compute, dtype=float)
    y = np.asarray(reward, dtype=float)
    n_boot = config.bootstrap_n
    if n_boot <= 0:
        raise ValueError("bootstrap_n must be positive to compute intervals")
    rng = np.random.default_rng(config.bootstrap_seed)
    log_c = np.log(c)
    fitted = sigmoid(c, fit.A, fit.B, fit.C_mid, fit.R0)  # [N]
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)  # [N]
    sqrt_w = np.sqrt(w)  # [N] = 1 / se_j up to a common factor
    resid = (y - fitted) * sqrt_w  # [N] standardised residuals
    resid = resid - resid.mean()  # centred, so replicates are unbiased around the fit
    method = config.bootstrap_method
    if residual_pool is not None:
        resid = np.asarray(residual_pool, dtype=float)
        method = "residuals" if method == "points" else method
    length = block_length(resid) if method == "blocks" else 1
    bounds = (fit.a_range, (config.b_min, config.b_max), fit.cmid_range)
    start = (fit.A, fit.B, fit.C_mid)
    draws = np.empty((n_boot, 3))  # [n_boot, (A, B, C_mid)]
    n_ok = 0
    for _ in range(n_boot):
        idx = resample_indices(resid.size, c.size, method, length, rng)  # [N]
        if method != "points":
            lc, yb, wb = log_c, fitted + resid[idx] / sqrt_w, w
        else:
            if np.unique(c[idx]).size < 3:  # a replicate must still span the curve
                continue
            lc, yb, wb = log_c[idx], y[idx], w[idx]
        a, b, c_mid, res = polish(lc, yb, fit.R0, start, bounds, fixed_a=fixed_a,
                                  weights=None if weights is None else wb)
        if res.status <= 0 or not np.isfinite([a, b, c_mid]).all():
            continue
        draws[n_ok] = (a, b, c_mid)
        n_ok += 1
    draws = draws[:n_ok]
    alpha = (1.0 - config.confidence) / 2.0
    out: dict = {"method": method, "block_length": length, "n": n_boot,
                 "n_ok": n_ok,
                 "confidence": config.confidence, "seed": config.bootstrap_seed}
    warnings = []
    if n_ok < max(10, n_boot // 2):
        warnings.append(f"only {n_ok} of {n_boot} bootstrap replicates could be fitted; the "
                        "intervals are unreliable")
    for k, name in enumerate(("A", "B", "C_mid")):
        if n_ok == 0:
            out[name] = [float("nan"), float("nan")]
        else:
            lo, hi = np.quantile(draws[:, k], [alpha, 1.0 - alpha])
            out[name] = [float(lo), float(hi)]
    a_lo, a_hi = fit.a_range
    if n_ok and fixed_a is None and (np.mean(draws[:, 0] >= a_hi - 1e-6 * (a_hi - a_lo)) > alpha):
        warnings.append(f"more than {alpha:.1%} of the bootstrap A values sit on the upper end "
                        f"{a_hi:.4g} of the A range: the upper bound of the A interval is "
                        "limited by the range, not the data")
    out["draws"] = draws.tolist()  # [n_ok, (A, B, C_mid)]
    out["warnings"] = warnings
    if keep_draws:
        out["draws"] = draws
    return out
