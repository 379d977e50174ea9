"""The power law R = A - D / C^B, fitted beside the sigmoid for comparison (paper A.4).

For C >> C_mid the sigmoid behaves like A - D / C^B with D = (A - R0) C_mid^B, the form used
for pre-training scaling laws. The paper shows that fitted on the whole run it overshoots the
asymptote (A = 1.0 where the sigmoid gives 0.645) and only recovers it from the late part of
the run; the report prints both so the difference is visible.

Procedure: for fixed B the model is linear in (A, D), so B is scanned on a log grid with A, D
solved in closed form (variable projection, with D >= 0 and A <= a_max enforced), and the best
triple is polished with bounded least squares on (A, ln D', B). Compute is divided by its
geometric mean c_ref inside the fit (D' = D / c_ref^B) so FLOP-scale compute stays well
conditioned; `D` is reported in the caller's compute units.

`weights` [N] (optional): weighted least squares, sum_j w_j r_j^2 (the binomial weights of
`scalerl.fit.curves.noise`); `sse` and `r2` are then weighted.

Deliberately left out: an offset C_0 (R = A - D / (C + C_0)^B).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.optimize import least_squares

__all__ = ["PowerLawFit", "fit_power_law", "power_law"]


@dataclasses.dataclass(frozen=True)
class PowerLawFit:
    A: float
    D: float
    B: float
    sse: float
    r2: float
    converged: bool
    warnings: tuple[str, ...]

    def predict(self, compute) -> np.ndarray:
        return power_law(compute, self.A, self.D, self.B)

    def to_dict(self) -> dict:
        return {"A": self.A, "D": self.D, "B": self.B, "sse": self.sse, "r2": self.r2,
                "converged": self.converged, "warnings": list(self.warnings)}


def power_law(compute, a: float, d: float, b: float) -> np.ndarray:
    """R = A - D / C^B, computed as A - exp(ln D - B ln C) to survive FLOP-scale compute."""
    c = np.asarray(compute, dtype=float)
    if d <= 0:
        return np.full_like(c, a)
    return a - np.exp(np.log(d) - b * np.log(c))


def _linear_ad(u, y, a_max, w):
    """Weighted least-squares (A, D) for y = A - D u at every B: u [K, N], y, w [N] -> A, D,
    sse [K]."""
    n = w.sum()
    su, suu = u @ w, (u * u) @ w  # [K]
    sy, suy = w @ y, u @ (w * y)  # [], [K]
    det = n * suu - su * su
    a = (suu * sy - su * suy) / det
    d = (su * sy - n * suy) / det  # y = a - d u  => slope -d
    flat = d < 0  # decreasing curve: best monotone fit is a constant
    a = np.where(flat, sy / n, a)
    d = np.where(flat, 0.0, d)
    capped = a > a_max  # asymptote above the allowed maximum: fix A, refit D >= 0
    d = np.where(capped, np.maximum((a_max * su - suy) / suu, 0.0), d)
    a = np.where(capped, a_max, a)
    resid = y - a[:, None] + d[:, None] * u  # [K, N]
    return a, d, (resid * resid) @ w


def fit_power_law(compute, reward, *, a_max: float | None = None, b_min: float = 1e-3,
                  b_max: float = 10.0, b_scan_points: int = 400, weights=None) -> PowerLawFit:
    """Fit R = A - D / C^B to points with positive compute.

    a_max: upper bound of A (default 1.0 when all rewards are <= 1, i.e. pass rates).
    """
    c = np.asarray(compute, dtype=float)
    y = np.asarray(reward, dtype=float)
    if c.size < 3 or (c <= 0).any() or not np.isfinite(c).all() or not np.isfinite(y).all():
        raise ValueError("the power law needs >= 3 points with finite reward and positive compute")
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)  # [N]
    if w.shape != y.shape or not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(f"weights must be {y.size} positive finite values, one per point")
    sqrt_w = np.sqrt(w)
    if a_max is None:
        a_max = 1.0 if y.max() <= 1.0 else float("inf")
    log_c = np.log(c)
    log_ref = float(log_c.mean())
    lx = log_c - log_ref  # ln(C / c_ref)
    bs = np.geomspace(b_min, b_max, b_scan_points)  # [K]
    u = np.exp(-bs[:, None] * lx[None])  # [K, N] = (C / c_ref)^-B
    a_k, d_k, sse_k = _linear_ad(u, y, a_max, w)
    k = int(np.argmin(sse_k))
    warnings: list[str] = []
    sst = float(w @ (y - w @ y / w.sum()) ** 2)
    sst = sst if sst > 1e-20 * max(1.0, float(w @ (y * y))) else 0.0  # constant data: no R²
    if d_k[k] <= 0:
        warnings.append("the reward does not increase with compute: the power law is a constant")
        sse = float(sse_k[k])
        return PowerLawFit(A=float(a_k[k]), D=0.0, B=float(bs[k]), sse=sse,
                           r2=1 - sse / sst if sst > 0 else float("nan"), converged=False,
                           warnings=tuple(warnings))

    def resid(theta):
        a, log_d, b = theta
        return sqrt_w * (a - np.exp(log_d - b * lx) - y)

    def jac(theta):
        a, log_d, b = theta
        t = np.exp(log_d - b * lx)
        return sqrt_w[:, None] * np.stack([np.ones_like(lx), -t, t * lx], axis=1)

    lo = [-np.inf, -np.inf, b_min]
    hi = [a_max if np.isfinite(a_max) else np.inf, np.inf, b_max]
    x0 = np.clip([a_k[k], np.log(d_k[k]), bs[k]], lo, hi)
    res = least_squares(resid, x0, jac=jac, bounds=(lo, hi), method="trf", x_scale="jac",
                        xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=500)
    a, log_d, b = (float(v) for v in res.x)
    sse = float(np.sum(res.fun ** 2))
    if sse > sse_k[k]:
        a, log_d, b, sse = float(a_k[k]), float(np.log(d_k[k])), float(bs[k]), float(sse_k[k])
    if np.isfinite(a_max) and a >= a_max - 1e-9:
        warnings.append(f"power-law A = {a:.4g} sits on its upper bound {a_max:.4g} (the paper "
                        "sees this when the power law is fitted before saturation)")
    for bound in (b_min, b_max):
        if abs(b - bound) <= 1e-9 * max(1.0, bound):
            warnings.append(f"power-law B = {b:.4g} sits on its bound {bound:.4g}")
    d = float(np.exp(log_d + b * log_ref))  # D' c_ref^B: back to the caller's compute units
    return PowerLawFit(A=a, D=d, B=b, sse=sse, r2=1 - sse / sst if sst > 0 else float("nan"),
                       converged=bool(res.status > 0), warnings=tuple(warnings))
