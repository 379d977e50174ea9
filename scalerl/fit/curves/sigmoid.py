"""The sigmoidal compute-performance curve of ScaleRL and the paper's fitting procedure.

Model (Khatri et al. 2025, Eq. 1):

    R_C = R0 + (A - R0) / (1 + (C_mid / C)^B)

A is the asymptotic reward, B > 0 the scaling exponent (efficiency), C_mid the compute at
which half of the gain A - R0 is reached, R0 the reward at zero RL compute (base model).

Procedure (paper §2.1, made fast and robust): points with compute below the cutoff are
dropped; a grid over A and C_mid is searched and, at every grid point, B is fitted by least
squares; the grid point with the smallest sum of squared errors (SSE) wins; then A, B and
C_mid are polished together with bounded least squares (`scipy.optimize.least_squares`) so A is
not limited to the grid step. The per-grid-point B fit is vectorised: the sigmoid depends on
(B, C_mid) only, so the SSE of every (A, C_mid, B) is computed from two sums per (C_mid, B)
over a fine log-spaced B scan, and the most promising grid points are refined by safeguarded
Newton steps on B, all at once (no 7,100 `curve_fit` calls; see `scalerl.fit.curves.optimize`).

Ranges (see `FitConfig`): the paper's A grid {0.450, 0.455, ..., 0.800} is used when the data
look like the paper's (pass rates whose smoothed peak lies in [0.45, 0.75]; smoothed over the
curve's noise window, `scalerl.fit.curves.noise.smoothing_window`); otherwise A spans
[max(R0 + step, peak - 0.05), 1] (the lower end sits below the peak because the peak of a noisy,
saturated curve overshoots its asymptote). A reward on a wider scale than [0, 1] (a sum of
reward functions, a score) gets a coarser A step, at most `MAX_A_VALUES` grid values (the
polish refines A anyway). C_mid spans [smallest fitted compute, 4 x largest]
with 100 values, log-spaced when that range covers two or more decades (compute in FLOPs,
steps from 1), linear otherwise (the paper's choice for GPU-hours).

Weighting (`FitConfig.weighting`): "none" (the paper's plain least squares); "binomial":
each point's squared residual is weighted by 1 / se_j^2, se_j = sqrt(p_j (1 - p_j) / n_j) its
binomial standard error (`scalerl.fit.curves.noise`), so points measured on more samples, or nearer
0 or 1, count more; "noise": 1 / s_j^2 with s_j the curve's own local noise
(`scalerl.fit.curves.noise.local_noise_weights`), for logs that do not record n.
`fit_sigmoid(..., weights=w)` takes the weights themselves; `sse` and `r2` are then the
weighted ones.

Deliberately left out: fitting R0 (it is given or read from the first point, as in the
paper) and priors on the parameters.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.special import expit

from scalerl.config import Config, ConfigError, field_
from scalerl.fit.curves.noise import running_mean, smoothing_window
from scalerl.fit.curves.optimize import grid_search, polish

__all__ = [
    "FitConfig",
    "FitError",
    "SigmoidFit",
    "sigmoid",
    "compute_for_fraction",
    "fit_sigmoid",
    "a_grid_for",
    "cmid_grid_for",
    "MIN_POINTS",
    "WEIGHTINGS",
]

MIN_POINTS = 4  # fewer points than this cannot constrain three parameters plus noise
PAPER_A_RANGE = (0.450, 0.800)
PAPER_A_STEP = 0.005
WEIGHTINGS = ("none", "binomial", "noise")
MAX_A_VALUES = 201  # A grid size cap: [0, 1] at the paper's step; wider scales get a coarser step


class FitError(ValueError):
    """The data cannot be fitted (too few points, NaN, bad compute); the message says why."""


@dataclasses.dataclass(frozen=True)
class FitConfig(Config):
    """Everything the fit of one curve can be told; defaults follow the paper where they apply."""

    a_min: float | None = field_(None, "lowest asymptote A on the grid; None: automatic (paper "
                                 "0.450 for paper-like data, else peak - 0.05)")
    a_max: float | None = field_(None, "highest A on the grid; None: automatic (paper 0.800, "
                                 "else 1.0)")
    a_step: float = field_(PAPER_A_STEP, "A grid step (paper: 0.005)", gt=0, le=0.1)
    cmid_min: float | None = field_(None, "lowest C_mid on the grid (compute units); None: the "
                                    "smallest fitted compute", gt=0)
    cmid_max: float | None = field_(None, "highest C_mid on the grid; None: 4 x the largest "
                                    "fitted compute", gt=0)
    cmid_points: int = field_(100, "number of C_mid grid values (paper: 100)", ge=2, le=10_000)
    cmid_spacing: str = field_("auto", "C_mid grid spacing; auto: log when cmid_max/cmid_min >= "
                               "100, else linear (paper)", choices=("auto", "linear", "log"))
    b_min: float = field_(0.05, "lower bound of the exponent B", gt=0)
    b_max: float = field_(20.0, "upper bound of the exponent B", gt=0)
    b_scan_points: int = field_(256, "log-spaced B values scanned per grid point before the "
                                "Newton refinement", ge=8, le=10_000)
    cutoff: float = field_(0.0, "points with compute below this are excluded (paper: 1500 "
                           "GPU-hours, the early near-linear regime)", ge=0)
    cutoff_fraction: float = field_(0.0, "also exclude compute below this fraction of the "
                                    "largest compute (unit-free cutoff)", ge=0, lt=1)
    r0: float | None = field_(None, "reward of the base model; None: the first point's reward "
                              "(a compute-0 point is the base model and is not fitted)")
    bootstrap_n: int = field_(200, "bootstrap replicates for the intervals (0: none)", ge=0)
    bootstrap_method: str = field_("blocks", "resample the residuals in moving blocks "
                                   "(correlated residuals, the default), one by one "
                                   "(residuals), or resample the points",
                                   choices=("blocks", "residuals", "points"))
    bootstrap_seed: int = field_(0, "seed of the bootstrap generator", ge=0)
    confidence: float = field_(0.95, "nominal coverage of every interval (bootstrap "
                               "percentiles, forecast intervals): 0.95 by default",
                               gt=0, lt=1)
    calibrate_intervals: bool = field_(True, "forecasts: widen the intervals by the run's own "
                                       "forecast errors on its earlier prefixes at the same "
                                       "horizon ratio and add the eval noise of one "
                                       "measurement (scalerl.fit.forecast.intervals); False: "
                                       "bootstrap percentiles of the fitted curve only")
    extrapolate_fraction: float | None = field_(0.5, "extrapolation check: fit on compute <= "
                                                "this fraction of the maximum, predict the rest; "
                                                "None: skip", gt=0, lt=1)
    power_law: bool = field_(True, "also fit the power law R = A - D / C^B (paper A.4)")
    weighting: str = field_("none", "weights of the points: none (plain least squares, the "
                            "paper's), binomial (1 / se^2, se = sqrt(p (1 - p) / n), n = "
                            "samples behind the point; needs per-sample evals) or noise (1 / "
                            "s^2, s the curve's local noise sd, for logs without n)",
                            choices=WEIGHTINGS)
    collapse_drop: float | None = field_(0.25, "a curve whose final (3-point mean) reward "
                                         "lies below its peak by this fraction of the gain "
                                         "peak - R0 is reported as collapsed, fitted only up "
                                         "to the peak; None: never", gt=0, le=1)

    def validate(self) -> None:
        super().validate()
        if self.a_min is not None and self.a_max is not None and self.a_min >= self.a_max:
            raise ConfigError(f"a_min = {self.a_min} must be < a_max = {self.a_max}")
        if self.cmid_min is not None and self.cmid_max is not None \
                and self.cmid_min >= self.cmid_max:
            raise ConfigError(f"cmid_min = {self.cmid_min} must be < cmid_max = {self.cmid_max}")
        if self.b_min >= self.b_max:
            raise ConfigError(f"b_min = {self.b_min} must be < b_max = {self.b_max}")

    @classmethod
    def paper(cls, **changes) -> FitConfig:
        """The paper's exact grid: A 0.450..0.800 by 0.005, C_mid 100 linear values in
        [100, 40000] GPU-hours, cutoff 1500 GPU-hours."""
        base = dict(a_min=PAPER_A_RANGE[0], a_max=PAPER_A_RANGE[1], a_step=PAPER_A_STEP,
                    cmid_min=100.0, cmid_max=40_000.0, cmid_points=100, cmid_spacing="linear",
                    cutoff=1500.0)
        base.update(changes)
        return cls.from_dict(base)


def sigmoid(compute, a: float, b: float, c_mid: float, r0: float) -> np.ndarray:
    """R_C = R0 + (A - R0) / (1 + (C_mid / C)^B), computed stably in log space."""
    c = np.asarray(compute, dtype=float)
    with np.errstate(divide="ignore"):
        log_ratio = np.log(c_mid) - np.log(c)  # -inf..inf; C = 0 gives +inf -> R0
    return r0 + (a - r0) * expit(-b * log_ratio)


def compute_for_fraction(fraction, b: float, c_mid: float) -> np.ndarray:
    """Budget planner: compute at which a run gains `fraction` of A - R0.

    Inverse of the sigmoid: f = 1 / (1 + (C_mid/C)^B)  <=>  C = C_mid * (f / (1 - f))^(1/B).
    f = 0.5 gives C_mid; f must lie in (0, 1) (the asymptote itself is never reached).
    """
    f = np.asarray(fraction, dtype=float)
    if np.any((f <= 0) | (f >= 1)) or np.any(~np.isfinite(f)):
        raise ValueError(f"fraction must lie strictly between 0 and 1, got {fraction!r}")
    return c_mid * (f / (1.0 - f)) ** (1.0 / b)


@dataclasses.dataclass(frozen=True)
class SigmoidFit:
    """A fitted sigmoid plus how it was obtained and what to distrust about it."""

    A: float
    B: float
    C_mid: float
    R0: float
    sse: float
    r2: float
    n_points: int
    converged: bool
    warnings: tuple[str, ...]
    a_range: tuple[float, float]
    cmid_range: tuple[float, float]
    grid_best: dict  # {"A", "B", "C_mid", "sse"} before the polish

    def predict(self, compute) -> np.ndarray:
        return sigmoid(compute, self.A, self.B, self.C_mid, self.R0)

    def compute_for_fraction(self, fraction) -> np.ndarray:
        """Compute at which the run reaches R0 + fraction * (A - R0)."""
        return compute_for_fraction(fraction, self.B, self.C_mid)

    def compute_for_reward(self, reward) -> np.ndarray:
        """Compute at which the fitted curve reaches `reward` (strictly between R0 and A)."""
        return self.compute_for_fraction((np.asarray(reward, float) - self.R0) / (self.A - self.R0))


# -- ranges --------------------------------------------------------------------------------

def smoothed_peak(reward: np.ndarray) -> float:
    """Max of a running mean over the curve's noise window (`scalerl.fit.curves.noise`: 3 points on
    a clean eval curve, more on a noisy log; the raw max overshoots by the noise)."""
    r = np.asarray(reward, float)
    if r.size < 3:
        return float(r.max())
    return float(running_mean(r, smoothing_window(r)).max())


def a_grid_for(reward: np.ndarray, r0: float, config: FitConfig) -> np.ndarray:
    """The A grid: explicit bounds, else the paper's range for paper-like data, else automatic."""
    peak = smoothed_peak(reward)
    paper_like = 0.0 <= float(np.min(reward)) and float(np.max(reward)) <= 1.0 \
        and PAPER_A_RANGE[0] <= peak <= PAPER_A_RANGE[1] - 0.05 and r0 < PAPER_A_RANGE[0]
    if paper_like:
        lo, hi = PAPER_A_RANGE
    else:
        lo = max(r0 + config.a_step, peak - 0.05)
        hi = 1.0 if float(np.max(reward)) <= 1.0 else peak + max(peak - r0, config.a_step)
    lo = config.a_min if config.a_min is not None else lo
    hi = config.a_max if config.a_max is not None else hi
    if hi <= lo:
        raise FitError(f"the A range [{lo:.4g}, {hi:.4g}] is empty (R0 = {r0:.4g}, peak "
                       f"reward {peak:.4g}); give a_min/a_max explicitly")
    step = max(config.a_step, (hi - lo) / (MAX_A_VALUES - 1))  # rewards on a wide scale
    n = int(np.floor((hi - lo) / step + 1e-9)) + 1
    grid = lo + step * np.arange(n)
    return grid if grid[-1] >= hi - 1e-12 else np.append(grid, hi)


def cmid_grid_for(compute: np.ndarray, config: FitConfig) -> np.ndarray:
    lo = config.cmid_min if config.cmid_min is not None else float(np.min(compute))
    hi = config.cmid_max if config.cmid_max is not None else 4.0 * float(np.max(compute))
    if hi <= lo:
        raise FitError(f"the C_mid range [{lo:.4g}, {hi:.4g}] is empty; set cmid_min/cmid_max")
    spacing = config.cmid_spacing
    if spacing == "auto":
        spacing = "log" if hi / lo >= 100 else "linear"
    if spacing == "log":
        return np.geomspace(lo, hi, config.cmid_points)
    return np.linspace(lo, hi, config.cmid_points)


def _at_bound(value, lo, hi, rel=1e-4):
    span = hi - lo
    return value <= lo + rel * span, value >= hi - rel * span


# -- the fit -------------------------------------------------------------------------------

def check_points(compute, reward) -> tuple[np.ndarray, np.ndarray]:
    """Validate one curve's arrays: same length, finite, compute >= 0; sorted by compute."""
    c = np.asarray(compute, dtype=float).ravel()
    r = np.asarray(reward, dtype=float).ravel()
    if c.shape != r.shape:
        raise FitError(f"compute has {c.size} values but reward has {r.size}")
    bad_c, bad_r = ~np.isfinite(c), ~np.isfinite(r)
    if bad_c.any() or bad_r.any():
        raise FitError(f"non-finite values: {int(bad_c.sum())} in compute, {int(bad_r.sum())} in "
                       "reward (NaN/inf); drop or repair those evaluations before fitting")
    if (c < 0).any():
        raise FitError(f"compute must be >= 0 (0 = the base model); found {int((c < 0).sum())} "
                       f"negative value(s), e.g. {c[c < 0][0]:.4g}")
    order = np.argsort(c, kind="stable")
    return c[order], r[order]


def fit_sigmoid(compute, reward, config: FitConfig | None = None, *, r0: float | None = None,
                fixed_a: float | None = None, weights=None) -> SigmoidFit:
    """Fit the sigmoid to points that are already selected (positive compute, above cutoff).

    `r0` overrides `config.r0`; one of them must be given (`scalerl.fit.curves.curve.fit_curve`
    takes R0 from the first point). `fixed_a` fixes the asymptote and fits only B and C_mid.
    `weights` [N] (positive, in the order of `compute`): weighted least squares.
    """
    config = config or FitConfig()
    c, y = check_points(compute, reward)
    w = None
    if weights is not None:
        w = np.asarray(weights, dtype=float).ravel()
        if w.shape != np.shape(compute) or not np.isfinite(w).all() or (w <= 0).any():
            raise FitError(f"weights must be {c.size} positive finite values, one per point")
        w = w[np.argsort(np.asarray(compute, float).ravel(), kind="stable")]
    r0 = config.r0 if r0 is None else r0
    if r0 is None or not np.isfinite(r0):
        raise FitError("R0 is needed: give r0 (base-model reward) or use fit_curve")
    if (c <= 0).any():
        raise FitError("fit_sigmoid needs positive compute; a compute-0 point is the base "
                       "model: pass its reward as r0 instead")
    if c.size < MIN_POINTS:
        raise FitError(f"only {c.size} point(s) to fit; the sigmoid needs at least {MIN_POINTS} "
                       "(lower the cutoff or evaluate more often)")
    if np.unique(c).size < 3:
        raise FitError("the points have fewer than 3 distinct compute values")
    log_c = np.log(c)
    a_grid = np.array([fixed_a], float) if fixed_a is not None else a_grid_for(y, r0, config)
    cmid_grid = cmid_grid_for(c, config)
    a_range = (float(a_grid[0]), float(a_grid[-1]))
    cmid_range = (float(cmid_grid[0]), float(cmid_grid[-1]))
    ga, gb, gc, gsse = grid_search(log_c, y, r0, a_grid, cmid_grid, config, weights=w)
    bounds = (a_range, (config.b_min, config.b_max), cmid_range)
    a, b, c_mid, res = polish(log_c, y, r0, (ga, gb, gc), bounds, fixed_a=fixed_a, weights=w)
    sse = float(np.sum(res.fun ** 2))
    if sse > gsse:  # the polish never makes it worse than the grid
        a, b, c_mid, sse = ga, gb, gc, gsse
    wr = np.ones_like(y) if w is None else w
    y_bar = float(wr @ y / wr.sum())
    sst = float(wr @ (y - y_bar) ** 2)
    r2 = 1.0 - sse / sst if sst > 1e-20 * max(1.0, float(wr @ (y * y))) else float("nan")
    warnings = list(_diagnose(c, y, r0, a, b, c_mid, bounds, fixed_a))
    converged = bool(res.status > 0) and not warnings
    if res.status <= 0:
        warnings.append(f"least-squares polish did not converge: {res.message}")
    return SigmoidFit(A=a, B=b, C_mid=c_mid, R0=float(r0), sse=sse, r2=r2, n_points=int(c.size),
                      converged=converged, warnings=tuple(warnings), a_range=a_range,
                      cmid_range=cmid_range,
                      grid_best={"A": ga, "B": gb, "C_mid": gc, "sse": gsse})


def _diagnose(c, y, r0, a, b, c_mid, bounds, fixed_a):
    """Warnings that make a fit untrustworthy (each one sets converged = False)."""
    # Is the reward increasing at all? Least-squares slope on log compute and its t-statistic.
    lx = np.log(c) - np.log(c).mean()
    slope = float(lx @ (y - y.mean()) / (lx @ lx))
    resid = y - y.mean() - slope * lx
    dof = max(c.size - 2, 1)
    se = float(np.sqrt(resid @ resid / dof / (lx @ lx))) if lx @ lx > 0 else float("inf")
    if slope <= 0 or (se > 0 and slope / se < 2.0):
        kind = "decreasing" if slope < 0 and (se == 0 or slope / se <= -2.0) else "flat"
        yield (f"the reward is {kind} in log compute (slope {slope:.3g} +- {se:.2g}); the "
               "sigmoid's A, B and C_mid are not determined by these points")
    if a <= r0:
        yield f"A = {a:.4g} is not above R0 = {r0:.4g}: no gain to model"
    names = ("A", "B", "C_mid")
    for idx, (value, (lo, hi)) in enumerate(zip((a, b, c_mid), bounds)):
        if idx == 0 and fixed_a is not None:
            continue
        low, high = _at_bound(value, lo, hi)
        if low or high:
            edge = "lower" if low else "upper"
            hint = {"A": "widen a_min/a_max", "B": "widen b_min/b_max",
                    "C_mid": "widen cmid_min/cmid_max (upper: the run has not reached its "
                             "midpoint, so A is weakly determined)"}[names[idx]]
            yield f"{names[idx]} = {value:.4g} sits on the {edge} end of its range; {hint}"
