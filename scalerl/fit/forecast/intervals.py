"""Calibrated forecast intervals: for the value the user will observe, and for the mean curve.

A forecast made at compute c_k for the final compute F (horizon ratio r = F / c_k) gets two
intervals at `FitConfig.confidence` (0.95 by default), each named for what it covers:

- the mean-curve interval (`predicted_final_lo/hi` in `scalerl.fit.forecast.predict`): the expected
  pass rate of the final model, what an infinitely large eval of it would give;
- the observed interval (`observed_final_lo/hi`): one eval of the final model, the number
  the user will see: the mean curve plus the eval noise of one measurement.

Sources of uncertainty, all measured on the run's own data (no constant fitted on other
curves):

1. The fit: the moving-block residual bootstrap of `scalerl.fit.curves.bootstrap` (blocks keep the
   correlation of the residuals of real curves), giving replicate values of the curve at F
   (variance var_fit) and of A and C_mid. Their percentiles are the model's intervals.
2. The eval noise of one measurement, se (`eval_noise_se`): binomial, sqrt(p (1 - p) / n) at
   the predicted final with n the samples of the latest eval, when n is known; otherwise from
   the points (`scalerl.fit.curves.noise.noise_sd`, second differences: blind to a slow trend;
   unknown, NaN, with fewer than 3 points).
3. The discrepancy between the curve and the fitted form at this horizon, var_disc, the
   larger of two estimates:
   - the backtest (`horizon_backtest`): the same forecaster refitted on earlier prefixes of
     the run (first m points, ending at c_m, at least `MIN_PREFIX_POINTS`), each forecasting
     the eval nearest c_m r, at the same horizon ratio, inside the data so far; only prefixes
     whose own fit had passed its C_mid count (earlier forecasts are not issued, see below).
     Each error e_m holds the prefix fit's own spread s_m (its bootstrap sd at the target,
     resampling the whole run's residuals), the eval noise and the discrepancy:
     var_disc = mean(e_m^2 - s_m^2 - se^2), at least 0 (a conformal-style widening: the
     interval is as wide as the run's own forecasts at this horizon were wrong);
   - the residuals: mean square residual of the fit - se^2 (wiggles of the curve around the
     form that the eval noise does not explain).

Combination: predictive variance of one eval V_obs = var_fit + se^2 + var_disc, of the mean
curve V_mean = var_fit + var_disc; half-width t sqrt(V), with t the Student quantile at the
Welch-Satterthwaite degrees of freedom of V (the backtest's variance counts as estimated from
n_eff = n (1 - rho) / (1 + rho) errors, rho their lag-1 autocorrelation: neighbouring
prefixes' errors are correlated; the bootstrap and noise variances from N - 3). The model's
percentile interval of the curve is scaled about the point forecast to the mean curve's
half-width (keeping its asymmetry); the observed interval adds t se to each side in
quadrature, so it always contains the mean curve's; `widening` is the mean-curve factor t sqrt(V_mean) / (z sqrt(var_fit)), and the
intervals of A and C_mid (log scale) are their bootstrap intervals scaled by it: what the run
says about the curve at F, carried over to its parameters. Pass rates (all points in [0, 1])
keep their intervals inside [0, 1].

No interval (status, bounds NaN) where the data cannot support one, rather than a narrow
number: "before_c_mid" (the points have not reached the sigmoid's C_mid: the ceiling is not
determined by the data), "no_backtest" (fewer than `MIN_BACKTEST` earlier prefixes reach the
same horizon ratio: the run cannot show how wrong forecasts this far ahead are, typically
early in a sparsely evaluated run), and, set by `scalerl.fit.forecast.predict`, "few_points" and
"collapsed". Otherwise "ok"; "uncalibrated" with `FitConfig.calibrate_intervals = False`
(bootstrap percentiles, plus z se in quadrature for the observed interval).

Deliberately left out: pooling forecast errors across runs (a prior from other curves),
forecasting declines after a peak (a sigmoid only rises; a run that turns down late leaves
its interval) and intervals for B.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from scalerl.fit.curves.noise import binomial_se, noise_sd

__all__ = ["ForecastIntervals", "eval_noise_se", "horizon_backtest", "calibrate",
           "unsupported", "spread_sd", "effective_n", "MIN_BACKTEST", "MIN_PREFIX_POINTS",
           "INTERVAL_STATUSES", "PREFIX_BOOTSTRAP_MIN"]

MIN_BACKTEST = 2  # fewer backtest errors than this cannot scale a prediction interval
MIN_PREFIX_POINTS = 6  # two points per sigmoid parameter: smaller prefixes' fits (and their
#                        bootstrap spreads) are too unstable to say anything about later ones
MAX_BACKTEST_PREFIXES = 16  # a dense run's eligible prefixes are thinned to this many
PREFIX_BOOTSTRAP_MIN = 20  # bootstrap replicates per backtest prefix, at least
INTERVAL_STATUSES = ("ok", "before_c_mid", "no_backtest", "few_points", "collapsed",
                     "uncalibrated", "off")
NAN2 = (float("nan"), float("nan"))


@dataclasses.dataclass(frozen=True)
class ForecastIntervals:
    observed: tuple[float, float]  # one eval at the final compute
    mean: tuple[float, float]  # the mean curve at the final compute
    A: tuple[float, float]
    C_mid: tuple[float, float]  # NaN for forms without a midpoint
    status: str  # "ok", "uncalibrated" (calibration off), or why there is no interval
    eval_se: float  # the noise sd of one measurement that was used
    eval_se_source: str  # "binomial" or "points"
    widening: float  # mean-curve interval width / bootstrap width (NaN without one)
    backtest_n: int  # earlier prefixes at the same horizon ratio
    backtest_rmse: float  # root mean square of their errors against the observed evals
    warnings: tuple[str, ...] = ()


def unsupported(status: str, eval_se: float = float("nan"), source: str = "",
                backtest_n: int = 0, backtest_rmse: float = float("nan"),
                warning: str = "") -> ForecastIntervals:
    """No interval: every bound NaN, `status` says why."""
    return ForecastIntervals(NAN2, NAN2, NAN2, NAN2, status, eval_se, source, float("nan"),
                             backtest_n, backtest_rmse, (warning,) if warning else ())


def eval_noise_se(reward, predicted: float, n_samples=None) -> tuple[float, str]:
    """The sd of one eval at the final compute, and where it came from.

    `reward` [N]: the fitted points; `n_samples` [N]: graded samples behind each (None when
    unknown). Binomial at `predicted` with the latest point's n when known, else from the
    points' second differences."""
    if n_samples is not None:
        n = np.asarray(n_samples, float).ravel()
        if n.size and np.isfinite(n[-1]) and n[-1] >= 1 and 0 <= predicted <= 1:
            return float(binomial_se(predicted, n[-1], clip=True)), "binomial"
    y = np.asarray(reward, float).ravel()
    return (noise_sd(y) if y.size >= 3 else float("nan")), "points"


def effective_n(series) -> float:
    """n (1 - rho) / (1 + rho): the number of independent values a series of n values with
    lag-1 autocorrelation rho >= 0 is worth (AR(1)); at least 1."""
    x = np.asarray(series, float)
    n = x.size
    if n < 3:
        return float(n)
    xc = x - x.mean()
    denom = float(xc @ xc)
    rho = max(0.0, float(xc[1:] @ xc[:-1]) / denom) if denom > 0 else 0.0
    return max(1.0, n * (1.0 - rho) / (1.0 + rho))


def _z(confidence: float) -> float:
    return float(norm.ppf(0.5 + confidence / 2.0))


def spread_sd(values, confidence: float) -> float:
    """The sd implied by the central `confidence` percentile interval of bootstrap values:
    width / (2 z) (robust to a few wild replicates, unlike the sample sd)."""
    lo, hi = _percentiles(np.asarray(values, float), confidence)
    return (hi - lo) / (2.0 * _z(confidence))


def horizon_backtest(compute, reward, ratio: float,
                     forecast: Callable[[int, float], tuple[float, float] | None],
                     min_points: int = MIN_PREFIX_POINTS,
                     max_prefixes: int = MAX_BACKTEST_PREFIXES) -> dict:
    """Errors of `forecast` on the run's earlier prefixes at the horizon ratio `ratio`.

    `compute`, `reward` [N]: the fitted points, sorted by compute (positive compute).
    `forecast(m, target)`: (forecast, its bootstrap sd) of the forecaster fitted on the first
    m points, at compute `target`; None when it gives no forecast there (failed fit, not past
    its C_mid). Prefixes: every m >= `min_points` whose target c_m ratio lies within the
    points, scored against the eval nearest the target in log compute (after the prefix);
    at most `max_prefixes` of them, evenly spread over the eligible ones. Returns
    {"prefix_compute", "target_compute", "observed", "predicted", "sd", "error"} arrays [n]
    (error = observed - predicted)."""
    c = np.asarray(compute, float)
    y = np.asarray(reward, float)
    log_c = np.log(c)
    eligible = []  # (m, index of the target eval)
    for m in range(min_points, c.size):
        target = c[m - 1] * ratio
        if target > c[-1] * (1 + 1e-9):
            break
        j = int(np.argmin(np.abs(log_c - np.log(target))))
        if j >= m:  # the nearest eval lies after the prefix: a horizon to test
            eligible.append((m, j))
    if len(eligible) > max_prefixes:
        pick = np.unique(np.round(np.linspace(0, len(eligible) - 1, max_prefixes)).astype(int))
        eligible = [eligible[i] for i in pick]
    rows = []
    for m, j in eligible:
        out = forecast(m, float(c[j]))
        if out is not None and np.isfinite(out).all():
            rows.append((c[m - 1], c[j], y[j], *out))
    arr = np.asarray(rows, float).reshape(-1, 5)  # [n, 5]
    return {"prefix_compute": arr[:, 0], "target_compute": arr[:, 1], "observed": arr[:, 2],
            "predicted": arr[:, 3], "sd": arr[:, 4], "error": arr[:, 2] - arr[:, 3]}


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return NAN2
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _scaled(point: float, interval: tuple[float, float], factor: float) -> tuple[float, float]:
    lo, hi = interval
    return point - factor * (point - lo), point + factor * (hi - point)


def _widened(point: float, model: tuple[float, float], model_half: float,
             half: float) -> tuple[float, float]:
    """The model interval scaled about `point` from half-width `model_half` to `half`; a
    symmetric interval when the model's has no width."""
    if model_half > 0 and np.isfinite(model[0]) and np.isfinite(model[1]):
        return _scaled(point, model, half / model_half)
    return point - half, point + half


def calibrate(predicted: float, final_draws, errors, error_sds, eval_se: float,
              eval_se_source: str, confidence: float, *, A: float, a_draws,
              c_mid: float | None = None, c_mid_draws=None, unit_interval: bool = False,
              n_points: int = 0, residual_ms: float = 0.0) -> ForecastIntervals:
    """The calibrated intervals from the bootstrap draws and the backtest errors.

    `final_draws` [n_boot]: replicate values of the mean curve at the final compute;
    `a_draws`, `c_mid_draws` [n_boot]: replicate A, C_mid (None: no midpoint);
    `errors`, `error_sds` [n]: `horizon_backtest` errors and their forecasts' bootstrap sds,
    None for the uncalibrated (bootstrap-only) intervals; `n_points`: points fitted;
    `residual_ms`: the fit's mean square residual; `unit_interval`: clip to [0, 1]."""
    se = float(eval_se) if np.isfinite(eval_se) else 0.0
    rmse, n = float("nan"), 0
    if errors is not None:
        errors, error_sds = np.asarray(errors, float), np.asarray(error_sds, float)
        keep = np.isfinite(errors) & np.isfinite(error_sds)
        errors, error_sds = errors[keep], error_sds[keep]
        n = int(errors.size)
        rmse = float(np.sqrt(np.mean(errors ** 2))) if n else float("nan")
        if n < MIN_BACKTEST:
            return unsupported("no_backtest", eval_se, eval_se_source, n, rmse,
                               f"only {n} earlier prefix(es) reach this horizon ratio (need "
                               f"{MIN_BACKTEST}): no interval; forecast from later in the run")
    final_draws = np.asarray(final_draws, float)
    z = _z(confidence)
    mean = _percentiles(final_draws, confidence)
    t, noise_half = z, z * se  # uncalibrated: Normal quantile
    a_int = _percentiles(np.asarray(a_draws, float), confidence)
    log_cm = NAN2 if c_mid is None or c_mid_draws is None else _percentiles(
        np.log(np.asarray(c_mid_draws, float)), confidence)
    widening = 1.0
    if errors is not None:
        var_fit = spread_sd(final_draws, confidence) ** 2
        var_backtest = max(0.0, float(np.mean(errors ** 2 - error_sds ** 2 - se * se)))
        var_resid = max(0.0, float(residual_ms) - se * se)
        var_disc = max(var_backtest, var_resid)
        dof_model = max(n_points - 3, 1)
        dof_disc = effective_n(errors) if var_backtest >= var_resid else dof_model
        var_obs = var_fit + se * se + var_disc
        dof = var_obs ** 2 / (var_disc ** 2 / dof_disc + (var_fit + se * se) ** 2 / dof_model)
        t = float(student_t.ppf(0.5 + confidence / 2.0, df=dof))  # Welch-Satterthwaite
        noise_half = t * se
        mean = _widened(predicted, mean, z * np.sqrt(var_fit), t * np.sqrt(var_fit + var_disc))
        widening = t * np.sqrt(var_fit + var_disc) / (z * np.sqrt(var_fit)) if var_fit > 0 \
            else float("nan")
        factor = widening if np.isfinite(widening) else 1.0
        a_int = _scaled(A, a_int, factor)
        if c_mid is not None:
            log_cm = _scaled(float(np.log(c_mid)), log_cm, factor)
    # one eval = the mean curve plus its noise: each side widened in quadrature
    below, above = max(predicted - mean[0], 0.0), max(mean[1] - predicted, 0.0)
    observed = (predicted - float(np.hypot(below, noise_half)),
                predicted + float(np.hypot(above, noise_half)))
    cm_int = (float(np.exp(log_cm[0])), float(np.exp(log_cm[1])))
    if unit_interval:
        observed, mean, a_int = (tuple(float(v) for v in np.clip(iv, 0.0, 1.0))
                                 for iv in (observed, mean, a_int))
    status = "ok" if errors is not None else "uncalibrated"
    return ForecastIntervals(observed, mean, a_int, cm_int, status, float(eval_se),
                             eval_se_source, float(widening), n, rmse)
