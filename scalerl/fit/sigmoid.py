"""`scalerl.fit.sigmoid`, an import path kept for users: the sigmoid, `FitConfig` and the fit
live in `scalerl.fit.curves.sigmoid` (the curve-math layer); this module re-exports their
public names, the same objects.

Nothing in scalerl imports it (tests/fit/test_layout.py checks both). Deliberately left out:
any code of its own.
"""

from scalerl.fit.curves.sigmoid import (
    MIN_POINTS,
    WEIGHTINGS,
    FitConfig,
    FitError,
    SigmoidFit,
    a_grid_for,
    cmid_grid_for,
    compute_for_fraction,
    fit_sigmoid,
    sigmoid,
)

__all__ = ["FitConfig", "FitError", "SigmoidFit", "sigmoid", "compute_for_fraction",
           "fit_sigmoid", "a_grid_for", "cmid_grid_for", "MIN_POINTS", "WEIGHTINGS"]
