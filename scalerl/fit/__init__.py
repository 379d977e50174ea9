"""scalerl.fit: sigmoidal compute-performance fits (Khatri et al. 2025, Eq. 1) and forecasts of
runs from their points so far, for scalerl's own sweeps and for the logs of any trainer.

Five layers, bottom to top; a module imports only its own layer and those below
(tests/fit/test_layout.py; docs/design.md, "Package layout"):

1. `curves`: curve math on arrays: the sigmoid, `FitConfig` and the fit (`sigmoid`,
   `optimize`), the power law, bootstrap intervals, eval noise and weights, collapse, one
   curve end to end = fit.json (`curve`), the common-A refit (`compare`), Table 1 curves;
2. `readers`: any run's logs -> curves: Parquet/CSV tables (`tables`), TensorBoard and MLflow
   (`logs`), naming and grouping into curves (`inputs`), model sizes (`sizes`);
3. `forecast`: a run's final value and A from its points so far (`predict`), their calibrated
   intervals (`intervals`), the backtest of forecasts (`backtest`), the racing rule
   (`racing`), the forecasts and verdicts of the runs of any log (`runs`), the curve
   prior learned from public RL runs (`prior`, shipped as `curve_prior.json`; `joint`: fits
   with it, one run or a sweep's runs jointly; `corpus`: its empirical-Bayes estimate,
   rebuilt by `scalerl prior`), and a run of an untried model size or generation length from
   runs of other sizes (`across`);
4. `report`: the scaling report (`scaling`) and its sections (`axes`, `across`, `backtest`,
   `racing`, `mismatch`), the forecast table (`forecasts`), the figures (`plots`, `panels`);
5. `commands`: `scalerl fit`, `predict`, `across`, `race`, `watch`, `report`, `prior`, and
   the flags they share (`options`).

This face re-exports the entry points below; `scalerl.fit.sigmoid` and `scalerl.fit.predict`
are kept as import paths (re-exports of `curves.sigmoid` and `forecast.predict`). No module of
scalerl.fit imports this face or those two paths: they import the modules themselves.
"""

from scalerl.fit.curves.compare import Curve, refit_common_a
from scalerl.fit.curves.curve import CurveFit, fit_curve
from scalerl.fit.curves.powerlaw import fit_power_law
from scalerl.fit.curves.sigmoid import FitConfig, FitError, compute_for_fraction, fit_sigmoid
from scalerl.fit.forecast.across import predict_across
from scalerl.fit.forecast.predict import Prediction, predict_final

__all__ = ["FitConfig", "FitError", "fit_sigmoid", "fit_curve", "CurveFit", "fit_power_law",
           "refit_common_a", "Curve", "compute_for_fraction", "predict_final", "Prediction",
           "predict_across"]
