"""scalerl.fit: sigmoidal compute-performance fits (Khatri et al. 2025, Eq. 1), the power law
beside them, bootstrap intervals, extrapolation checks, fixed-A comparisons, the budget
planner, plots, and the `scalerl fit` / `scalerl report` commands.

Modules, top down: `sigmoid` (model, FitConfig, ranges, the fit), `optimize` (vectorised
grid search, bounded polish), `powerlaw`, `bootstrap`, `curve` (one curve end to end =
fit.json), `compare` (common-A refit), `inputs` (files -> curves), `plots`, `report`, `cli`,
`report_cli`, `synthetic` (the paper's Table 1 curves for tests and benchmarks), `noise`
(binomial standard errors, weights, the noise floor), `collapse` (runs that rise then fall),
`predict` + `predict_cli` (final pass rate and A from a run's evals so far), `intervals`
(their calibrated intervals: the value a user will observe and the mean curve), `racing` (stop
runs whose A is clearly below the best's; `scalerl race`), `backtest` (error of those
predictions against finished runs, and of the persistence forecast), `logs` (TensorBoard event
files and MLflow stores as tables), `forecast` (predictions and verdicts for the runs of any
log), `watch` (`scalerl watch`: follow runs while they train).
"""

from scalerl.fit.across import predict_across
from scalerl.fit.compare import Curve, refit_common_a
from scalerl.fit.curve import CurveFit, fit_curve
from scalerl.fit.powerlaw import fit_power_law
from scalerl.fit.sigmoid import FitConfig, FitError, compute_for_fraction, fit_sigmoid

__all__ = ["FitConfig", "FitError", "fit_sigmoid", "fit_curve", "CurveFit", "fit_power_law",
           "refit_common_a", "Curve", "compute_for_fraction", "predict_across"]
