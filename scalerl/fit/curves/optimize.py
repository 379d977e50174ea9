"""The numerical core of the sigmoid fit: the vectorised grid search and the bounded polish.

`grid_search` implements the paper's grid (A x C_mid, B by least squares at every grid point)
without a per-point optimiser call; `polish` refines (A, B, C_mid) jointly with
`scipy.optimize.least_squares` inside the grid's ranges, working on ln C_mid so compute in
GPU-hours, steps or FLOPs is equally well conditioned. The model and its inputs are
documented in `scalerl.fit.curves.sigmoid`.

Weights (optional, `weights` [N]): both minimise sum_j w_j r_j^2 instead of sum_j r_j^2
(weighted least squares, e.g. w = 1 / se_j^2 from `scalerl.fit.curves.noise`); None is unweighted.

Deliberately left out: multi-start polishing (the grid supplies the start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

if TYPE_CHECKING:
    from scalerl.fit.curves.sigmoid import FitConfig

__all__ = ["grid_search", "polish", "N_REFINE"]

_CHUNK = 2_000_000  # elements per temporary array, bounds memory for big grids
N_REFINE = 512  # grid points whose B is refined by Newton (lowest estimated SSE first)


def _sse_newton(b, g, x, yc, w):
    """SSE and the Newton step for B at a set of grid points.

    b: [M]; g: [M] (= A - R0); x: [M, N] (= ln C_mid - ln C); yc: [N] (= y - R0); w: [N].
    With s = expit(-b x): residual r = yc - g s, J = df/db = -g x s (1 - s),
    H = d2f/db2 = g x^2 s (1 - s)(1 - 2 s); SSE' = -2 sum r J, SSE'' = 2 sum (J^2 - r H).
    The step is -SSE'/SSE'' (Gauss-Newton's -SSE'/(2 sum J^2) where SSE'' <= 0).
    """
    s = expit(-b[:, None] * x)  # [M, N]
    r = yc - g[:, None] * s  # [M, N]
    ds = s * (1.0 - s)  # [M, N]
    jac = -g[:, None] * x * ds  # [M, N]
    hess = g[:, None] * x * x * ds * (1.0 - 2.0 * s)  # [M, N]
    grad = -(w * r * jac).sum(-1)  # [M] SSE' / 2
    curv = (w * (jac * jac - r * hess)).sum(-1)  # [M] SSE'' / 2
    curv = np.where(curv > 0, curv, (w * jac * jac).sum(-1))
    return (w * r * r).sum(-1), -grad / np.maximum(curv, 1e-300)


def grid_search(log_c, y, r0, a_grid, cmid_grid, config: FitConfig, newton_steps: int = 8,
                weights=None):
    """Best (A, C_mid) on the grid with B fitted by least squares at each point.

    1. Scan: for K log-spaced B values, s = expit(-B (ln C_mid - ln C)) depends on (B, C_mid)
       only, so SSE(A, C_mid, B_k) = sum yc^2 - 2 g sum(yc s) + g^2 sum(s^2), g = A - R0, for
       the whole [nA, K, nC] grid from two [K, nC] sums.
    2. Per (A, C_mid): the best B_k, a parabola through its neighbours in ln B estimates the
       1-D minimum (B and SSE).
    3. The N_REFINE grid points with the lowest estimated SSE get safeguarded Newton steps on B
       (inside the scan bracket, a step is kept only if it lowers the SSE) to the exact
       least-squares B; the others are within a fraction of a scan step of their minimum and
       far from the best SSE, so they cannot win.
    Returns (A, B, C_mid, sse) of the grid point with the smallest SSE.
    """
    x = np.log(cmid_grid)[:, None] - log_c[None, :]  # [nC, N]
    yc = y - r0  # [N]
    w = np.ones_like(yc) if weights is None else np.asarray(weights, float)  # [N]
    yy = float(yc @ (w * yc))
    g = a_grid - r0  # [nA]
    log_b = np.linspace(np.log(config.b_min), np.log(config.b_max), config.b_scan_points)  # [K]
    h = log_b[1] - log_b[0]
    n_c, n = x.shape
    n_k = log_b.size
    s1 = np.empty((n_k, n_c))  # [K, nC]: sum_j yc_j s_j
    s2 = np.empty((n_k, n_c))  # [K, nC]: sum_j s_j^2
    step = max(1, _CHUNK // (n_c * n))
    for k0 in range(0, n_k, step):
        s = expit(-np.exp(log_b[k0:k0 + step])[:, None, None] * x[None])  # [k, nC, N]
        s1[k0:k0 + step] = s @ (w * yc)
        s2[k0:k0 + step] = (s * s) @ w
    sse_scan = yy - 2 * g[:, None, None] * s1[None] + (g * g)[:, None, None] * s2[None]
    # sse_scan: [nA, K, nC]
    k_best = sse_scan.argmin(axis=1)  # [nA, nC]
    k_in = np.clip(k_best, 1, n_k - 2)  # parabola centre (edges: no interpolation)
    take = lambda k: np.take_along_axis(sse_scan, k[:, None, :], axis=1)[:, 0, :]  # noqa: E731
    s_m, s_0, s_p = take(k_in - 1), take(k_in), take(k_in + 1)  # [nA, nC] each
    denom = s_m - 2 * s_0 + s_p
    interior = (k_best == k_in) & (denom > 0)
    offset = np.where(interior, 0.5 * (s_m - s_p) / np.where(interior, denom, 1.0), 0.0)
    offset = np.clip(offset, -0.5, 0.5)
    est_sse = np.where(interior, s_0 - 0.25 * (s_m - s_p) * offset, take(k_best))  # [nA, nC]
    log_b0 = log_b[k_best] + offset * h  # [nA, nC]
    # Newton refinement of the most promising grid points.
    flat = np.argsort(est_sse, axis=None)[:N_REFINE]  # [M]
    ia, ic = np.unravel_index(flat, est_sse.shape)  # [M], [M]
    lo_b = np.exp(log_b[np.maximum(k_best[ia, ic] - 1, 0)])  # bracket of the 1-D minimum
    hi_b = np.exp(log_b[np.minimum(k_best[ia, ic] + 1, n_k - 1)])
    gm, xm = g[ia], x[ic]  # [M], [M, N]
    b = np.exp(log_b0[ia, ic])  # [M]
    sse, step_b = _sse_newton(b, gm, xm, yc, w)
    scale = np.ones_like(b)
    for _ in range(newton_steps):
        trial = np.clip(b + scale * step_b, lo_b, hi_b)
        sse_trial, step_trial = _sse_newton(trial, gm, xm, yc, w)
        better = sse_trial < sse
        b = np.where(better, trial, b)
        sse = np.where(better, sse_trial, sse)
        step_b = np.where(better, step_trial, step_b)
        scale = np.where(better, 1.0, scale * 0.5)
    best = int(np.argmin(sse))
    return float(a_grid[ia[best]]), float(b[best]), float(cmid_grid[ic[best]]), float(sse[best])


# -- polish --------------------------------------------------------------------------------

def _residuals(theta, log_c, y, r0, fixed_a, sqrt_w):
    a, b, log_cmid = (fixed_a, *theta) if fixed_a is not None else theta
    return sqrt_w * (r0 + (a - r0) * expit(-b * (log_cmid - log_c)) - y)


def _jacobian(theta, log_c, y, r0, fixed_a, sqrt_w):
    a, b, log_cmid = (fixed_a, *theta) if fixed_a is not None else theta
    x = log_cmid - log_c
    s = expit(-b * x)
    ds = s * (1.0 - s)
    cols = [-(a - r0) * x * ds, -(a - r0) * b * ds]  # d/dB, d/d ln C_mid
    if fixed_a is None:
        cols.insert(0, s)  # d/dA
    return sqrt_w[:, None] * np.stack(cols, axis=1)


def polish(log_c, y, r0, start, bounds, fixed_a=None, weights=None):
    """Bounded least squares on (A, B, ln C_mid) from `start` = (A, B, C_mid).

    `res.fun` holds the weighted residuals sqrt(w_j) r_j (plain residuals without weights)."""
    sqrt_w = np.ones(np.shape(y)) if weights is None else np.sqrt(np.asarray(weights, float))
    a, b, c_mid = start
    lo = [bounds[0][0], bounds[1][0], np.log(bounds[2][0])]
    hi = [bounds[0][1], bounds[1][1], np.log(bounds[2][1])]
    x0 = np.clip([a, b, np.log(c_mid)], lo, hi)
    if fixed_a is not None:
        lo, hi, x0 = lo[1:], hi[1:], x0[1:]
    res = least_squares(_residuals, x0, jac=_jacobian, bounds=(lo, hi), method="trf",
                        x_scale="jac", args=(log_c, y, r0, fixed_a, sqrt_w), xtol=1e-12, ftol=1e-12,
                        gtol=1e-12, max_nfev=500)
    theta = res.x if fixed_a is None else np.concatenate([[fixed_a], res.x])
    return float(theta[0]), float(theta[1]), float(np.exp(theta[2])), res
