"""Compare the efficiency of runs that share a ceiling: the fixed-A refit of paper §2.1.

Fitted asymptotes vary by about +-0.015 between identical ScaleRL runs, so the paper treats A
values within 0.02 as equal. To compare the exponent B of such runs (e.g. leave-one-out
variants, CISPO B = 2.01 vs DAPO B = 1.77) it averages their A, refits every curve with A fixed
to that average, and compares the refitted B (and C_mid).

`refit_common_a(curves, config)` does exactly that: fit every curve freely (same point
selection as `fit_curve`: R0, cutoff), average A, check the spread max(A) - min(A) against the
margin, then refit B and C_mid with A fixed (grid over C_mid, B by least squares, bounded
polish). Runs whose A differ by more than the margin are still refitted, but the result is
marked `comparable = False` with a warning: their B values then describe different curves.

Deliberately left out: weighting runs by their number of points when averaging A.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from scalerl.fit.curves.curve import select_points
from scalerl.fit.curves.sigmoid import FitConfig, SigmoidFit, fit_sigmoid

__all__ = ["Curve", "CommonAFit", "refit_common_a", "A_MARGIN"]

A_MARGIN = 0.02  # paper §2.1: A of three identical runs varied by at most +-0.015 -> 0.02


@dataclasses.dataclass(frozen=True)
class Curve:
    """One run's evaluation points; `r0` overrides the config's / the first point's R0."""

    compute: np.ndarray
    reward: np.ndarray
    r0: float | None = None
    name: str = ""


@dataclasses.dataclass(frozen=True)
class CommonAFit:
    a: float  # the averaged asymptote every curve was refitted with
    a_individual: tuple[float, ...]  # the free fits' A
    spread: float  # max - min of a_individual
    comparable: bool  # spread <= margin
    free_fits: tuple[SigmoidFit, ...]
    fixed_fits: tuple[SigmoidFit, ...]  # B and C_mid with A = a
    names: tuple[str, ...]
    warnings: tuple[str, ...]

    def table(self) -> list[dict]:
        """One row per curve: name, free A/B/C_mid, B/C_mid at the common A."""
        return [{"name": n, "A_free": f.A, "B_free": f.B, "C_mid_free": f.C_mid,
                 "A": self.a, "B": g.B, "C_mid": g.C_mid, "sse": g.sse}
                for n, f, g in zip(self.names, self.free_fits, self.fixed_fits)]


def refit_common_a(curves: Sequence[Curve], config: FitConfig | None = None, *,
                   margin: float = A_MARGIN) -> CommonAFit:
    """Average the free-fit A of `curves`, refit each with A fixed; see the module docstring."""
    config = config or FitConfig()
    if len(curves) < 2:
        raise ValueError(f"a common-A comparison needs at least 2 curves, got {len(curves)}")
    selections, free = [], []
    for curve in curves:
        cfg = config if curve.r0 is None else config.replace(r0=float(curve.r0))
        sel = select_points(curve.compute, curve.reward, cfg)
        selections.append(sel)
        free.append(fit_sigmoid(sel.compute[sel.used], sel.reward[sel.used], cfg, r0=sel.r0))
    a_values = np.array([f.A for f in free])
    a_mean = float(a_values.mean())
    spread = float(a_values.max() - a_values.min())
    names = tuple(c.name or f"curve{i}" for i, c in enumerate(curves))
    warnings = []
    comparable = spread <= margin + 1e-12
    if not comparable:
        warnings.append(f"the asymptotes differ by {spread:.3f} > margin {margin}: comparing B at "
                        f"a common A = {a_mean:.3f} is not meaningful (A: "
                        + ", ".join(f"{n}={a:.3f}" for n, a in zip(names, a_values)) + ")")
    for name, f in zip(names, free):
        if not f.converged:
            warnings.append(f"{name}: the free fit is flagged ({'; '.join(f.warnings)})")
    fixed = []
    for sel in selections:
        if a_mean <= sel.r0:
            raise ValueError(f"the common A = {a_mean:.4g} is not above R0 = {sel.r0:.4g}")
        fixed.append(fit_sigmoid(sel.compute[sel.used], sel.reward[sel.used], config,
                                 r0=sel.r0, fixed_a=a_mean))
    return CommonAFit(a=a_mean, a_individual=tuple(float(a) for a in a_values), spread=spread,
                      comparable=comparable, free_fits=tuple(free), fixed_fits=tuple(fixed),
                      names=names, warnings=tuple(warnings))
