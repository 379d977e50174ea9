"""Fit one compute-performance curve end to end: the record behind `fit.json`.

`fit_curve(compute, reward, config)`:
1. validates the points (finite, compute >= 0, at least 4 to fit) and sorts them by compute;
2. sets R0: `config.r0` if given; else the mean reward of the compute-0 points (the base
   model, chunk 0 of an eval sweep); else the reward of the first point (which stays in the
   fit). Compute-0 points are never fitted (the sigmoid equals R0 there by construction);
3. excludes points below the cutoff (max of `cutoff` and `cutoff_fraction` x max compute);
4. fits the sigmoid (`scalerl.fit.curves.sigmoid`), the power law beside it
   (`scalerl.fit.curves.powerlaw`), bootstrap intervals (`scalerl.fit.curves.bootstrap`) and
   the extrapolation check: a second fit on compute <= `extrapolate_fraction` x the maximum,
   scored on the held-out later points;
5. returns a `CurveFit` whose `to_dict()` is the content of `fit.json`, points included, so a
   report can redraw the curve without the input data.

Weights: with `FitConfig.weighting = "binomial"` every step above is weighted least squares
with w = 1 / se^2 (`scalerl.fit.curves.noise`), which needs `n_samples`, the graded samples
behind each point; with "noise", w = 1 / s^2 from the curve's own local noise (no n needed).
Collapse: a curve that rose and then fell well below its peak (`scalerl.fit.curves.collapse`,
`FitConfig.collapse_drop`) gets `status = "collapsed"` with its peak
and is fitted only up to the peak (later points: status "after_peak"); with fewer than 4
points up to the peak it raises `CollapseError`. Other curves have `status = "ok"`.

The budget planner (`SigmoidFit.compute_for_fraction`) is stored for 50/75/90/95 % of the gain.
Deliberately left out: reading files and grouping (`scalerl.fit.readers.inputs`) and plotting.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from scalerl import __version__
from scalerl.fit.curves.bootstrap import bootstrap_intervals
from scalerl.fit.curves.collapse import detect_collapse
from scalerl.fit.curves.noise import binomial_weights, local_noise_weights
from scalerl.fit.curves.powerlaw import PowerLawFit, fit_power_law
from scalerl.fit.curves.sigmoid import (
    MIN_POINTS,
    FitConfig,
    FitError,
    SigmoidFit,
    check_points,
    fit_sigmoid,
)

__all__ = ["CurveFit", "Selection", "fit_curve", "select_points", "extrapolation_check",
           "CollapseError", "point_weights"]

BUDGET_FRACTIONS = (0.5, 0.75, 0.9, 0.95)


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which points a fit uses, and where R0 came from."""

    compute: np.ndarray  # [N] all points, sorted by compute
    reward: np.ndarray  # [N]
    status: tuple[str, ...]  # per point: "used", "cutoff" (below the cutoff), "base" (C = 0)
    #                          or "after_peak" (a collapsed curve's points after its peak)
    r0: float
    r0_source: str
    cutoff: float

    @property
    def used(self) -> np.ndarray:
        return np.array([s == "used" for s in self.status], dtype=bool)


def select_points(compute, reward, config: FitConfig) -> Selection:
    c, y = check_points(compute, reward)
    if c.size == 0:
        raise FitError("no points to fit")
    if not (c > 0).any():
        raise FitError("all compute values are 0; the fit needs points after training started")
    cutoff = max(config.cutoff, config.cutoff_fraction * float(c.max()))
    base = c == 0
    if config.r0 is not None:
        r0, source = float(config.r0), "given"
    elif base.any():
        r0, source = float(y[base].mean()), "compute-0 point"
    else:
        r0, source = float(y[0]), "first point"
    status = tuple("base" if ci == 0 else ("cutoff" if ci < cutoff else "used") for ci in c)
    n_used = status.count("used")
    if n_used < MIN_POINTS:
        raise FitError(f"{n_used} point(s) left to fit after the cutoff {cutoff:.4g} (of {c.size}"
                       f"); the sigmoid needs at least {MIN_POINTS}: lower --cutoff or evaluate "
                       "more often")
    return Selection(c, y, status, r0, source, cutoff)


class CollapseError(FitError):
    """The curve collapsed and too few points precede its peak to fit; `.collapse` has it."""

    def __init__(self, message: str, collapse: dict):
        super().__init__(message)
        self.collapse = collapse


def point_weights(compute, reward, n_samples, config: FitConfig) -> np.ndarray | None:
    """The fit weights of `config.weighting` for points in the order of `compute` ([N]), or
    None for plain least squares."""
    if config.weighting == "none":
        return None
    if config.weighting == "noise":
        return local_noise_weights(reward)
    if n_samples is None or not np.all(np.isfinite(np.asarray(n_samples, float))):
        raise FitError("weighting = binomial needs the number of graded samples behind each "
                       "point (a per-sample eval Parquet with a 0/1 `correct` column); use "
                       "--weighting none for point CSVs or non-binary rewards")
    return binomial_weights(reward, n_samples)


def extrapolation_check(compute, reward, r0: float, config: FitConfig, weights=None) -> dict:
    """Fit on compute <= fraction x max, predict the later points; errors of that prediction.

    `compute`, `reward`: the used points (positive compute, above the cutoff), sorted.
    """
    frac = config.extrapolate_fraction
    c, y = np.asarray(compute, float), np.asarray(reward, float)
    out = {"fraction": frac, "max_abs_error": None, "mean_abs_error": None,
           "predicted_final": None, "observed_final": float(y[-1]), "final_compute": float(c[-1])}
    early = c <= frac * c.max()
    n_fit, n_held = int(early.sum()), int((~early).sum())
    out.update(n_fit=n_fit, n_heldout=n_held)
    if n_fit < MIN_POINTS or n_held < 1:
        out["skipped"] = (f"{n_fit} point(s) at compute <= {frac:g} x max and {n_held} after; "
                          f"need >= {MIN_POINTS} and >= 1")
        return out
    part = fit_sigmoid(c[early], y[early], config, r0=r0,
                       weights=None if weights is None else np.asarray(weights)[early])
    pred = part.predict(c[~early])  # [n_held]
    err = np.abs(pred - y[~early])
    out.update(max_abs_error=float(err.max()), mean_abs_error=float(err.mean()),
               predicted_final=float(pred[-1]), A=part.A, B=part.B, C_mid=part.C_mid,
               converged=part.converged, warnings=list(part.warnings))
    return out


@dataclasses.dataclass(frozen=True)
class CurveFit:
    selection: Selection
    sigmoid: SigmoidFit
    power_law: PowerLawFit | None
    intervals: dict | None
    extrapolation: dict | None
    config: FitConfig
    warnings: tuple[str, ...]
    status: str = "ok"  # "ok" or "collapsed" (fitted up to the peak only)
    collapse: dict | None = None  # scalerl.fit.curves.collapse.detect_collapse's record

    @property
    def converged(self) -> bool:
        return self.sigmoid.converged

    def to_dict(self, **extra) -> dict:
        """The `fit.json` record; `extra` (compute_col, reward_col, group, meta, ...) is merged."""
        s, sel = self.sigmoid, self.selection
        used = sel.used
        budget = {f"C_{int(f * 100)}": (float(s.compute_for_fraction(f)) if s.A > s.R0 else None)
                  for f in BUDGET_FRACTIONS}
        record = {
            "A": s.A, "B": s.B, "C_mid": s.C_mid, "R0": s.R0, "r0_source": sel.r0_source,
            "r2": s.r2, "sse": s.sse, "n_points": s.n_points,
            "n_excluded": int((~used).sum()), "cutoff": sel.cutoff,
            "converged": self.converged, "warnings": list(self.warnings),
            "status": self.status, "collapse": self.collapse,
            "weighting": self.config.weighting,
            "intervals": self.intervals,
            "power_law": self.power_law.to_dict() if self.power_law else None,
            "extrapolation": self.extrapolation,
            "budget": budget,
            "grid": {"a_range": list(s.a_range), "cmid_range": list(s.cmid_range),
                     "best": s.grid_best},
            "points": {"compute": sel.compute.tolist(), "reward": sel.reward.tolist(),
                       "status": list(sel.status)},
            "config": self.config.to_dict(),
            "version": __version__,
            "group": {}, "meta": {},
        }
        record.update(extra)
        return _finite_or_none(record)


def _finite_or_none(obj):
    """NaN/inf -> None so fit.json is strict JSON (e.g. R² of a constant curve)."""
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite_or_none(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def fit_curve(compute, reward, config: FitConfig | None = None, *,
              n_samples=None) -> CurveFit:
    """Sigmoid + power law + bootstrap intervals + extrapolation check for one curve.

    `n_samples` [N]: graded samples behind each point (needed by binomial weighting)."""
    config = config or FitConfig()
    sel = select_points(compute, reward, config)
    order = np.argsort(np.asarray(compute, float).ravel(), kind="stable")
    n_sorted = None if n_samples is None else np.asarray(n_samples, float).ravel()[order]
    used = sel.used
    c, y = sel.compute[used], sel.reward[used]
    n_used = None if n_sorted is None else n_sorted[used]
    status, collapse = "ok", None
    if config.collapse_drop is not None:
        collapse = detect_collapse(c, y, sel.r0, config.collapse_drop)
    if collapse is not None:
        status, keep = "collapsed", collapse["peak_index"] + 1
        text = (f"the run collapsed: reward peaked at {collapse['peak_reward']:.4g} (compute "
                f"{collapse['peak_compute']:.4g}) and fell to {collapse['final_reward']:.4g}, "
                f"{collapse['drop_fraction']:.0%} of the gain")
        if keep < MIN_POINTS:
            raise CollapseError(f"{text}; only {keep} point(s) up to the peak, too few to fit",
                                collapse)
        after = set(np.flatnonzero(used)[keep:].tolist())  # indices into the sorted points
        sel = dataclasses.replace(sel, status=tuple(
            "after_peak" if i in after else s for i, s in enumerate(sel.status)))
        c, y = c[:keep], y[:keep]
        n_used = None if n_used is None else n_used[:keep]
    weights = point_weights(c, y, n_used, config)
    sig = fit_sigmoid(c, y, config, r0=sel.r0, weights=weights)
    warnings = list(sig.warnings)
    if collapse is not None:
        warnings.insert(0, f"{text}; fitted on the {len(c)} point(s) up to the peak only")
    if sel.r0_source == "first point":
        warnings.append(f"R0 = {sel.r0:.4g} taken from the first point (compute {sel.compute[0]:.4g}"
                        "); pass the base model's reward (--r0 or a compute-0 point) if known")
    power = None
    if config.power_law:
        power = fit_power_law(c, y, weights=weights)
    intervals = None
    if config.bootstrap_n > 0:
        intervals = bootstrap_intervals(c, y, sig, config, weights=weights)
        warnings.extend(intervals["warnings"])
    extrap = None
    if config.extrapolate_fraction is not None:
        extrap = extrapolation_check(c, y, sel.r0, config, weights=weights)
        if "skipped" in extrap:
            warnings.append(f"extrapolation check skipped: {extrap['skipped']}")
    return CurveFit(sel, sig, power, intervals, extrap, config, tuple(warnings), status,
                    collapse)
