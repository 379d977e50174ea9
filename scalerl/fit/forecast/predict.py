"""Predict a run's final pass rate and ceiling from its evaluations so far.

`predict_final(compute, reward, final_compute, config)` fits the points evaluated so far (the
same selection as `scalerl.fit.curves.curve.fit_curve`: R0 from the compute-0 point, cutoff,
optional binomial weights) with both forms and returns one `Prediction` each:

- sigmoid (Khatri et al. 2025, Eq. 1): predicted_final = R(final_compute), A and C_mid;
- power law R = A - D / C^B (`scalerl.fit.curves.powerlaw`): predicted_final and A.

Intervals (at `FitConfig.confidence`, 0.95 by default), from `scalerl.fit.forecast.intervals`, each
named for what it covers:
- `observed_final_lo/hi`: the value the user will observe, one eval of the final model
  (the mean curve plus the eval noise of one measurement, `eval_se`);
- `predicted_final_lo/hi`: the mean curve at the final compute (the fitted curve's value);
- `A_lo/hi` and, for the sigmoid, `C_mid_lo/hi`.
They come from the moving-block residual bootstrap (`scalerl.fit.curves.bootstrap`; the power law
refits each replicate the same way, same seed and count), widened by the run's own forecast
errors on its earlier prefixes at the same horizon ratio (`backtest_n` of them, root mean
square `backtest_rmse`; the mean-curve widening factor is `interval_widening`).
`interval_status` says whether there is an interval: "ok"; "before_c_mid", "no_backtest",
"few_points", "collapsed" (no interval, bounds NaN: the data cannot support one); "off"
(bootstrap_n = 0); "uncalibrated" (`FitConfig.calibrate_intervals = False`: bootstrap
percentiles only, with `bootstrap_method = "residuals"` the intervals of this module before
calibration, which covered real finals far less often than nominal).

`recent_reward`: the mean eval of the latest half of the compute so far (`recent_level`);
`recent_gain` = recent_reward - R0 and its standard error `recent_gain_se` (the recent mean's
and R0's in quadrature): racing stops a run whose pass rate fell clearly below its start even
while no interval of A exists.

`reached_c_mid` is False while the points have not reached the sigmoid's C_mid (largest
fitted compute < C_mid): before the midpoint A is weakly determined (the curve's bend is not
seen yet). The power law has no midpoint; its rows carry the same flag, a property of the
data, and the same "before_c_mid" interval status.

Status per prediction: "ok"; "few_points" (fewer than 4 points to fit: values NaN);
"collapsed" (the curve fell well below its peak, `scalerl.fit.curves.collapse`: values NaN, the run
is not heading for a ceiling); "not_converged" (the fit ran but warns, e.g. a flat curve).

`PREDICTIONS_SCHEMA` is the one schema of `predictions.parquet` (one row per run, task, chunk
and form; `latest_reward`, the reward observed at that chunk, is the persistence forecast a
backtest compares with); `merge_predictions` replaces the rows of the (run, task, chunk) it
is given and keeps the rest, `write_predictions` writes atomically, `read_predictions` reads
files written before the `OPTIONAL_COLUMNS` existed (`latest_reward` and the interval
columns) with those columns empty. The CLI is `scalerl.fit.commands.predict`.

The curve prior (`prior=`, by default `DEFAULT_PRIOR` = "shipped": the one learned from public
runs, `scalerl.fit.forecast.prior.shipped_prior`; or a `CurvePrior`; None for the plain fit
above): the sigmoid of a pass-rate curve (values in [0, 1]) is then the posterior mode of
`scalerl.fit.forecast.joint` (its points and the prior; with many points its own data
dominate), its intervals the posterior's plus the prior's calibrated discrepancy
(`joint.prior_intervals`): they exist from 4 points on, before C_mid too (interval_status
"ok", backtest_n 0); grid options of FitConfig (a_min, cmid_max, ...) and weighting do not
apply to it. Rewards outside [0, 1] get the plain fit. The power law never uses the prior.
Each row's `prior` column says what its form was fitted with ("none", or the prior's
`summary()`).

`predict_sweep` predicts the runs of one sweep (one recipe, differing along a sweep axis)
with their sigmoids fitted jointly under the prior (`scalerl.fit.forecast.joint`).

Persistence baselines a backtest scores against, carried by every row: `latest_reward` (the
value observed at that chunk: "it stays where it is") and `smoothed_reward` (the mean of the
last `SMOOTH_EVALS` evals seen, `smoothed_level`: the same without one eval's noise).

Deliberately left out: profile-likelihood intervals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from scalerl.fit.curves.bootstrap import block_length, bootstrap_intervals, resample_indices
from scalerl.fit.curves.collapse import detect_collapse
from scalerl.fit.curves.curve import point_weights, select_points
from scalerl.fit.curves.noise import binomial_se, noise_sd
from scalerl.fit.curves.powerlaw import fit_power_law
from scalerl.fit.curves.sigmoid import FitConfig, FitError, SigmoidFit, fit_sigmoid, sigmoid
from scalerl.fit.forecast.intervals import (
    PREFIX_BOOTSTRAP_MIN,
    ForecastIntervals,
    calibrate,
    eval_noise_se,
    horizon_backtest,
    spread_sd,
    unsupported,
)
from scalerl.fit.forecast.joint import (
    PriorForecast,
    forecast_points,
    forecast_sweep,
    prior_intervals,
)
from scalerl.fit.forecast.prior import CurvePrior, shipped_prior, supports
from scalerl.utils.io import atomic_path

__all__ = ["Prediction", "predict_final", "predict_sweep", "PREDICTIONS_SCHEMA", "FORMS", "prediction_rows",
           "OPTIONAL_COLUMNS", "merge_predictions", "write_predictions", "read_predictions",
           "INTERVAL_COLUMNS", "RECENT_COLUMNS", "recent_level", "smoothed_level",
           "SMOOTH_EVALS", "DEFAULT_PRIOR"]

FORMS = ("sigmoid", "power_law")
DEFAULT_PRIOR = "shipped"  # predict_final's `prior` (module docstring)
KEY_COLUMNS = ("run", "task", "chunk")

PREDICTIONS_SCHEMA = pa.schema([
    pa.field("run", pa.string(), nullable=False),
    pa.field("task", pa.string(), nullable=False),
    pa.field("chunk", pa.int32(), nullable=False),  # latest chunk whose eval was fitted
    pa.field("compute", pa.float64(), nullable=False),  # compute of that chunk
    pa.field("compute_fraction", pa.float64(), nullable=False),  # compute / final compute
    pa.field("form", pa.string(), nullable=False),  # sigmoid | power_law
    pa.field("predicted_final", pa.float64()),  # fitted pass rate at the final compute
    pa.field("predicted_final_lo", pa.float64()),
    pa.field("predicted_final_hi", pa.float64()),
    pa.field("A", pa.float64()),  # fitted asymptote
    pa.field("A_lo", pa.float64()),
    pa.field("A_hi", pa.float64()),
    pa.field("reached_c_mid", pa.bool_(), nullable=False),
    pa.field("n_points", pa.int32(), nullable=False),  # points fitted
    pa.field("status", pa.string(), nullable=False),  # ok | few_points | collapsed | ...
    pa.field("latest_reward", pa.float64()),  # reward of that chunk: the persistence forecast
    # interval of one eval at the final compute (mean curve + eval noise)
    pa.field("observed_final_lo", pa.float64()),
    pa.field("observed_final_hi", pa.float64()),
    pa.field("C_mid", pa.float64()),  # sigmoid midpoint (NaN for the power law)
    pa.field("C_mid_lo", pa.float64()),
    pa.field("C_mid_hi", pa.float64()),
    pa.field("interval_status", pa.string()),  # ok | before_c_mid | no_backtest | ...
    pa.field("confidence", pa.float64()),  # nominal coverage of the intervals
    pa.field("eval_se", pa.float64()),  # noise sd of one eval used by the observed interval
    pa.field("interval_widening", pa.float64()),  # mean-curve interval / bootstrap width
    pa.field("backtest_n", pa.int32()),  # earlier prefixes at the same horizon ratio
    pa.field("backtest_rmse", pa.float64()),  # their forecast errors' root mean square
    # mean eval of the latest half of the compute so far (racing's observed rule)
    pa.field("recent_reward", pa.float64()),
    pa.field("recent_gain", pa.float64()),  # recent_reward - R0
    pa.field("recent_gain_se", pa.float64()),
    pa.field("smoothed_reward", pa.float64()),  # mean of the last SMOOTH_EVALS evals seen
    pa.field("prior", pa.string()),  # what the form was fitted with: none | the prior's summary
])
# Columns added with calibrated intervals (each a `Prediction` field of the same name).
INTERVAL_COLUMNS = ("observed_final_lo", "observed_final_hi", "C_mid", "C_mid_lo", "C_mid_hi",
                    "interval_status", "confidence", "eval_se", "interval_widening",
                    "backtest_n", "backtest_rmse")
# Columns a predictions file written before they existed lacks; read (and written) empty.
RECENT_COLUMNS = ("recent_reward", "recent_gain", "recent_gain_se")
OPTIONAL_COLUMNS = ("latest_reward", *INTERVAL_COLUMNS, *RECENT_COLUMNS, "smoothed_reward",
                    "prior")
SMOOTH_EVALS = 3  # evals averaged by the smoothed persistence forecast


NAN = float("nan")


@dataclasses.dataclass(frozen=True)
class Prediction:
    form: str
    predicted_final: float  # the fitted (mean) curve at the final compute
    predicted_final_lo: float  # interval of the mean curve at the final compute
    predicted_final_hi: float
    A: float
    A_lo: float
    A_hi: float
    reached_c_mid: bool
    n_points: int
    status: str
    warnings: tuple[str, ...] = ()
    params: dict | None = None  # the fitted form's parameters (sigmoid: A, B, C_mid, R0)
    observed_final_lo: float = NAN  # interval of one eval at the final compute
    observed_final_hi: float = NAN
    C_mid: float = NAN
    C_mid_lo: float = NAN
    C_mid_hi: float = NAN
    interval_status: str = "off"  # see the module docstring
    confidence: float = NAN
    eval_se: float = NAN
    interval_widening: float = NAN
    backtest_n: int = 0
    backtest_rmse: float = NAN
    recent_reward: float = NAN  # see `recent_level`
    recent_gain: float = NAN  # recent_reward - R0
    recent_gain_se: float = NAN
    prior: str = "none"  # what the form was fitted with: none | the prior's summary()


def smoothed_level(reward, k: int = SMOOTH_EVALS) -> float:
    """The smoothed persistence forecast: the mean of the last `k` evals of `reward` [N]
    (all of them when fewer), NaN when empty."""
    y = np.asarray(reward, float).ravel()
    return float(y[-k:].mean()) if y.size else NAN


def _empty(form: str, n_points: int, status: str, warning: str,
           confidence: float = NAN) -> Prediction:
    return Prediction(form, NAN, NAN, NAN, NAN, NAN, NAN, False, n_points, status, (warning,),
                      interval_status=status, confidence=confidence)


def recent_level(compute, reward, n_samples=None) -> tuple[float, float]:
    """(mean, standard error) of the evals in the latest half of the compute so far.

    `compute`, `reward` [N] (compute > 0, sorted), `n_samples` [N] graded samples per eval or
    None. The se is binomial at the mean with each eval's n when known (a floor: samples of
    one prompt are correlated, `scalerl.fit.curves.noise`), else the points' noise sd
    (`noise_sd`, NaN under 3 points) over sqrt(k)."""
    c, y = np.asarray(compute, float).ravel(), np.asarray(reward, float).ravel()
    if not c.size:
        return NAN, NAN
    recent = c >= c.max() / 2  # [N]
    k = int(recent.sum())
    mean = float(y[recent].mean())
    if n_samples is not None and 0 <= mean <= 1:
        n = np.asarray(n_samples, float).ravel()[recent]  # [k]
        if np.isfinite(n).all() and (n >= 1).all():
            return mean, float(np.sqrt(np.sum(binomial_se(mean, n, clip=True) ** 2)) / k)
    return mean, (noise_sd(y) / np.sqrt(k) if y.size >= 3 else NAN)


def _recent_gain(c, y, n_used, sel, c_all, n_samples) -> tuple[float, float, float]:
    """(recent_reward, recent_gain, recent_gain_se) of the fitted points `c`, `y` [N]: R0's se
    is binomial with the compute-0 evals' samples when known, else the points' noise sd."""
    recent, se = recent_level(c, y, n_used)
    r0_se = noise_sd(y) if y.size >= 3 else NAN
    if n_samples is not None and sel.r0_source == "compute-0 point" and 0 <= sel.r0 <= 1:
        n0 = np.asarray(n_samples, float).ravel()[c_all == 0]  # [evals at compute 0]
        if n0.size and np.isfinite(n0).all() and (n0 >= 1).all():
            r0_se = float(binomial_se(sel.r0, n0.sum(), clip=True))
    return recent, recent - sel.r0, float(np.hypot(se, r0_se))


def _standardised_residuals(y, fitted, weights) -> np.ndarray:
    """(y - fitted) sqrt(w), centred: [N], the pool the bootstraps resample."""
    resid = (y - fitted) * (1.0 if weights is None else np.sqrt(weights))
    return resid - resid.mean()


def _power_law_draws(c, y, fit, final_compute, config: FitConfig, weights,
                     residual_pool=None) -> np.ndarray:
    """Residual bootstrap of the power law (blocks, residuals or points as
    `config.bootstrap_method`; `residual_pool` as in `bootstrap_intervals`): [n_ok, 2]
    replicate (A, R(final_compute))."""
    rng = np.random.default_rng(config.bootstrap_seed)
    w = np.ones_like(y) if weights is None else weights
    sqrt_w = np.sqrt(w)
    fitted = fit.predict(c)  # [N]
    resid = _standardised_residuals(y, fitted, weights)
    method = config.bootstrap_method
    if residual_pool is not None:
        resid = np.asarray(residual_pool, float)
        method = "residuals" if method == "points" else method
    length = block_length(resid) if method == "blocks" else 1
    out = np.empty((config.bootstrap_n, 2))
    n_ok = 0
    for _ in range(config.bootstrap_n):
        idx = resample_indices(resid.size, c.size, method, length, rng)  # [N]
        if method == "points":
            cb, yb, wb = c[idx], y[idx], None if weights is None else weights[idx]
            if np.unique(cb).size < 3:
                continue
        else:
            cb, yb, wb = c, fitted + resid[idx] / sqrt_w, weights  # [N]
        try:
            rep = fit_power_law(cb, yb, b_scan_points=100, weights=wb)
        except ValueError:
            continue
        out[n_ok] = (rep.A, float(rep.predict(final_compute)))
        n_ok += 1
    return out[:n_ok]


def _params(form: str, sig, pl) -> dict:
    if form == "sigmoid":
        return {"A": sig.A, "B": sig.B, "C_mid": sig.C_mid, "R0": sig.R0}
    return {"A": pl.A, "D": pl.D, "B": pl.B}


class _PrefixFits:
    """The forecasters refitted on the first m points, for `horizon_backtest`: each prefix
    forecast comes with its bootstrap spread, resampling the whole run's residuals (a prefix of
    a few points has too few residuals of its own). The prefix's sigmoid fit is shared by both
    forms; its C_mid decides whether a forecast is issued."""

    def __init__(self, c, y, r0: float, config: FitConfig, weights):
        self.c, self.y, self.r0, self.config, self.weights = c, y, r0, config, weights
        self.boot_config = config.replace(bootstrap_n=max(PREFIX_BOOTSTRAP_MIN,
                                                          config.bootstrap_n // 4))
        self._sigmoid: dict[int, SigmoidFit | None] = {}

    def sigmoid(self, m: int) -> SigmoidFit | None:
        if m not in self._sigmoid:
            w = None if self.weights is None else self.weights[:m]
            try:
                self._sigmoid[m] = fit_sigmoid(self.c[:m], self.y[:m], self.config, r0=self.r0,
                                               weights=w)
            except (FitError, ValueError):
                self._sigmoid[m] = None
        return self._sigmoid[m]

    def forecast(self, form: str, m: int, target: float, pool) -> tuple[float, float] | None:
        """(forecast at `target`, its bootstrap sd) from the first m points, or None."""
        sig = self.sigmoid(m)
        if sig is None or self.c[m - 1] < sig.C_mid:  # not issued: before its C_mid
            return None
        c, y = self.c[:m], self.y[:m]
        w = None if self.weights is None else self.weights[:m]
        if form == "sigmoid":
            pred = float(sig.predict(target))
            draws = bootstrap_intervals(c, y, sig, self.boot_config, weights=w,
                                        keep_draws=True, residual_pool=pool)["draws"]
            values = sigmoid(target, draws[:, 0], draws[:, 1], draws[:, 2], sig.R0)
        else:
            try:
                pl = fit_power_law(c, y, weights=w)
            except ValueError:
                return None
            pred = float(pl.predict(target))
            values = _power_law_draws(c, y, pl, target, self.boot_config, w,
                                      residual_pool=pool)[:, 1]
        return pred, spread_sd(np.asarray(values, float), self.config.confidence)


def _intervals(form: str, predicted: float, fitted, final_draws, a: float, a_draws, c_mid,
               c_mid_draws, *, reached: bool, prefixes: _PrefixFits, final_compute: float,
               config: FitConfig, n_used) -> ForecastIntervals:
    c, y = prefixes.c, prefixes.y
    se, source = eval_noise_se(y, predicted, n_used)
    unit = bool(np.all((y >= 0) & (y <= 1)))
    common = dict(A=a, a_draws=a_draws, c_mid=c_mid, c_mid_draws=c_mid_draws,
                  unit_interval=unit, n_points=int(c.size),
                  residual_ms=float(np.mean((y - fitted) ** 2)))
    if not config.calibrate_intervals:
        return calibrate(predicted, final_draws, None, None, se, source, config.confidence,
                         **common)
    if not reached:
        return unsupported("before_c_mid", se, source, warning="the points have not reached "
                           "C_mid: the ceiling is not determined by the data, no interval")
    pool = _standardised_residuals(y, fitted, prefixes.weights)
    backtest = horizon_backtest(c, y, final_compute / c[-1],
                                lambda m, t: prefixes.forecast(form, m, t, pool))
    return calibrate(predicted, final_draws, backtest["error"], backtest["sd"], se, source,
                     config.confidence, **common)


def _prior_prediction(fc: PriorForecast, prior: CurvePrior, config: FitConfig, reached: bool,
                      recent: tuple[float, float, float]) -> Prediction:
    """The sigmoid's `Prediction` from a curve-prior forecast (`scalerl.fit.forecast.joint`)."""
    post = fc.posterior
    if config.bootstrap_n == 0:
        iv = unsupported("off")
    elif not config.calibrate_intervals:
        bare = dataclasses.replace(prior, kappa=0.0, kappa_gain=0.0)
        iv = dataclasses.replace(prior_intervals(fc, bare, config.confidence),
                                 status="uncalibrated")
    else:
        iv = prior_intervals(fc, prior, config.confidence)
    params = post.params
    warnings = [f"fitted with the curve prior ({prior.summary()})"]
    if not reached:
        warnings.append("the points have not reached C_mid: the forecast leans on the prior")
    return Prediction(
        "sigmoid", fc.predicted, iv.mean[0], iv.mean[1], params["A"], iv.A[0], iv.A[1],
        reached, fc.n_points, "ok", tuple(warnings), params=params,
        observed_final_lo=iv.observed[0], observed_final_hi=iv.observed[1],
        C_mid=params["C_mid"], C_mid_lo=iv.C_mid[0], C_mid_hi=iv.C_mid[1],
        interval_status=iv.status, confidence=config.confidence, eval_se=post.noise_sd,
        interval_widening=iv.widening, backtest_n=0, backtest_rmse=NAN,
        recent_reward=recent[0], recent_gain=recent[1], recent_gain_se=recent[2],
        prior=prior.summary())


def _resolve(prior: CurvePrior | str | None) -> CurvePrior | None:
    if isinstance(prior, str):
        if prior != "shipped":
            raise ValueError(f"prior must be a CurvePrior, 'shipped' or None, got {prior!r}")
        return shipped_prior()
    return prior


def predict_final(compute, reward, final_compute: float, config: FitConfig | None = None, *,
                  n_samples=None, forms: Sequence[str] = FORMS,
                  prior: CurvePrior | str | None = DEFAULT_PRIOR,
                  prior_forecast: PriorForecast | None = None) -> list[Prediction]:
    """One `Prediction` per form from the points so far; see the module docstring.

    `prior`: the curve prior of the sigmoid ("shipped": `scalerl.fit.forecast.prior.shipped_prior`;
    a `CurvePrior`; None: the plain least-squares fit). It applies to pass rates in [0, 1].
    `prior_forecast`: the sigmoid's fit with the prior made elsewhere (`predict_sweep`: the
    run fitted jointly with its sweep-mates) instead of this run's own."""
    config = config or FitConfig()
    prior = _resolve(prior)
    unknown = [f for f in forms if f not in FORMS]
    if unknown:
        raise ValueError(f"unknown form(s) {unknown}; choose from {', '.join(FORMS)}")
    c_all = np.asarray(compute, float).ravel()
    if not np.isfinite(final_compute) or final_compute <= 0:
        raise ValueError(f"final compute must be positive, got {final_compute}")
    if c_all.size and final_compute < np.nanmax(c_all) * (1 - 1e-9):
        raise ValueError(f"final compute {final_compute:.6g} lies below the largest evaluated "
                         f"compute {np.nanmax(c_all):.6g}; give the run's planned total")
    try:
        sel = select_points(compute, reward, config)
    except FitError as err:
        n = int((c_all > 0).sum())
        return [_empty(f, n, "few_points", str(err), config.confidence) for f in forms]
    used = sel.used
    c, y = sel.compute[used], sel.reward[used]
    order = np.argsort(c_all, kind="stable")
    n_used = None if n_samples is None else np.asarray(n_samples, float).ravel()[order][used]
    if config.collapse_drop is not None:
        collapse = detect_collapse(c, y, sel.r0, config.collapse_drop)
        if collapse is not None:
            text = (f"collapsed: peak {collapse['peak_reward']:.4g} at compute "
                    f"{collapse['peak_compute']:.4g}, now {collapse['final_reward']:.4g}")
            return [_empty(f, int(c.size), "collapsed", text, config.confidence) for f in forms]
    weights = point_weights(c, y, n_used, config)
    recent, gain, gain_se = _recent_gain(c, y, n_used, sel, c_all, n_samples)
    with_prior = None
    if prior is not None and "sigmoid" in forms and supports(y, sel.r0):
        with_prior = prior_forecast or forecast_points(compute, reward, final_compute, prior,
                                                       config, n_samples)
        with_prior = with_prior if with_prior.status == "ok" else None
    if with_prior is None or any(f != "sigmoid" for f in forms):
        sig = fit_sigmoid(c, y, config, r0=sel.r0, weights=weights)
        reached = bool(c.max() >= sig.C_mid)
        prefixes = _PrefixFits(c, y, sel.r0, config, weights)
    out, pl = [], None
    for form in forms:
        if form == "sigmoid" and with_prior is not None:
            out.append(_prior_prediction(
                with_prior, prior, config, bool(c.max() >= with_prior.posterior.params["C_mid"]),
                (recent, gain, gain_se)))
            continue
        c_mid = c_mid_draws = None
        if form == "sigmoid":
            pf, a, warnings = float(sig.predict(final_compute)), sig.A, list(sig.warnings)
            converged, c_mid = sig.converged, sig.C_mid
            if config.bootstrap_n > 0:
                boot = bootstrap_intervals(c, y, sig, config, weights=weights, keep_draws=True)
                draws = boot["draws"]  # [n_ok, (A, B, C_mid)]
                a_draws, c_mid_draws = draws[:, 0], draws[:, 2]
                pf_draws = np.asarray(sigmoid(final_compute, draws[:, 0], draws[:, 1],
                                              draws[:, 2], sig.R0), float)  # [n_ok]
                warnings += boot["warnings"]
        else:
            pl = fit_power_law(c, y, weights=weights)
            pf, a, warnings, converged = float(pl.predict(final_compute)), pl.A, \
                list(pl.warnings), pl.converged and not pl.warnings
            if config.bootstrap_n > 0:
                draws = _power_law_draws(c, y, pl, final_compute, config, weights)
                a_draws, pf_draws = draws[:, 0], draws[:, 1]
        if not reached:
            warnings.append("the points have not reached C_mid: A is weakly determined")
        if config.bootstrap_n > 0:
            fitted = sig.predict(c) if form == "sigmoid" else pl.predict(c)  # [N]
            iv = _intervals(form, pf, fitted, pf_draws, float(a), a_draws, c_mid, c_mid_draws,
                            reached=reached, prefixes=prefixes, final_compute=final_compute,
                            config=config, n_used=n_used)
            warnings += iv.warnings
        else:
            iv = unsupported("off")
        out.append(Prediction(
            form, pf, iv.mean[0], iv.mean[1], float(a), iv.A[0], iv.A[1], reached,
            int(c.size), "ok" if converged else "not_converged", tuple(warnings),
            params=_params(form, sig, pl), observed_final_lo=iv.observed[0], observed_final_hi=iv.observed[1],
            C_mid=NAN if c_mid is None else float(c_mid), C_mid_lo=iv.C_mid[0],
            C_mid_hi=iv.C_mid[1], interval_status=iv.status, confidence=config.confidence,
            eval_se=iv.eval_se, interval_widening=iv.widening, backtest_n=iv.backtest_n,
            backtest_rmse=iv.backtest_rmse, recent_reward=recent, recent_gain=gain,
            recent_gain_se=gain_se))
    return out


def predict_sweep(curves: Sequence[tuple], finals: Sequence[float],
                  config: FitConfig | None = None, *, n_samples: Sequence | None = None,
                  forms: Sequence[str] = FORMS,
                  prior: CurvePrior | str | None = DEFAULT_PRIOR) -> list[list[Prediction]]:
    """`predict_final` of the runs of one sweep (one recipe; they differ along a sweep axis)
    with the sigmoids of their pass-rate curves fitted jointly under the curve prior
    (`scalerl.fit.forecast.joint.forecast_sweep`: each run's shape scatters about a shape the
    sweep shares, so an early run borrows the bend its sweep-mates show). `curves`: (compute,
    reward) so far per run; `finals`: each run's planned final compute; `n_samples`: per run,
    graded samples per eval or None. A run the joint fit cannot take (too few points,
    collapsed, not a pass rate) and the power law are predicted as by `predict_final`; with
    no prior every run is."""
    prior = _resolve(prior)
    n_samples = list(n_samples) if n_samples is not None else [None] * len(curves)
    if len(finals) != len(curves) or len(n_samples) != len(curves):
        raise ValueError("predict_sweep needs one final compute and one n_samples per curve")
    fcs = {}
    if prior is not None and "sigmoid" in forms:
        fcs = forecast_sweep({i: cy for i, cy in enumerate(curves)}, dict(enumerate(finals)),
                             prior, config, dict(enumerate(n_samples)))
    return [predict_final(c, y, f, config, n_samples=n, forms=forms, prior=prior,
                          prior_forecast=fcs.get(i))
            for i, ((c, y), f, n) in enumerate(zip(curves, finals, n_samples))]


def prediction_rows(run: str, task: str, chunk: int, compute: float, final_compute: float,
                    predictions: Sequence[Prediction], *,
                    latest_reward: float = float("nan"),
                    smoothed_reward: float = float("nan")) -> list[dict]:
    """Rows of PREDICTIONS_SCHEMA for the predictions made at one chunk (`latest_reward`: the
    reward observed at that chunk, `smoothed_reward`: `smoothed_level` of the rewards up to it;
    the two persistence forecasts a backtest scores against)."""
    return [{"run": str(run), "task": str(task), "chunk": int(chunk), "compute": float(compute),
             "compute_fraction": float(compute) / float(final_compute), "form": p.form,
             "predicted_final": p.predicted_final, "predicted_final_lo": p.predicted_final_lo,
             "predicted_final_hi": p.predicted_final_hi, "A": p.A, "A_lo": p.A_lo,
             "A_hi": p.A_hi, "reached_c_mid": p.reached_c_mid, "n_points": p.n_points,
             "status": p.status, "latest_reward": float(latest_reward),
             **{name: getattr(p, name) for name in (*INTERVAL_COLUMNS, *RECENT_COLUMNS)},
             "smoothed_reward": float(smoothed_reward), "prior": p.prior}
            for p in predictions]


def _table(rows: Sequence[dict] | pd.DataFrame) -> pa.Table:
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if df.empty:
        return PREDICTIONS_SCHEMA.empty_table()
    df = df.assign(**{name: None for name in OPTIONAL_COLUMNS if name not in df.columns})
    missing = [f.name for f in PREDICTIONS_SCHEMA if f.name not in df.columns]
    if missing:
        raise ValueError(f"prediction rows lack column(s) {', '.join(missing)}")
    df = df[[f.name for f in PREDICTIONS_SCHEMA]].sort_values([*KEY_COLUMNS, "form"])
    return pa.Table.from_pandas(df, schema=PREDICTIONS_SCHEMA, preserve_index=False)


def read_predictions(paths: Sequence[str | Path] | str | Path) -> pd.DataFrame:
    """predictions.parquet file(s) concatenated; every file must have PREDICTIONS_SCHEMA."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    frames = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"predictions file {path} does not exist")
        table = pq.read_table(path)
        missing = [n for n in PREDICTIONS_SCHEMA.names
                   if n not in table.column_names and n not in OPTIONAL_COLUMNS]
        if missing:
            raise ValueError(f"{path}: not a predictions.parquet (missing column(s) "
                             f"{', '.join(missing)}); write it with `scalerl predict`")
        for name in OPTIONAL_COLUMNS:  # written before the column existed: empty
            if name not in table.column_names:
                field = PREDICTIONS_SCHEMA.field(name)
                table = table.append_column(field, pa.nulls(table.num_rows, field.type))
        frames.append(table.select(PREDICTIONS_SCHEMA.names).to_pandas())
    if not frames:
        raise ValueError("no predictions files given")
    return pd.concat(frames, ignore_index=True)


def merge_predictions(old: pd.DataFrame | None, new_rows: Sequence[dict]) -> pd.DataFrame:
    """`old` without the (run, task, chunk) keys of `new_rows`, plus `new_rows`, sorted."""
    new = pd.DataFrame(list(new_rows)).reindex(columns=PREDICTIONS_SCHEMA.names)
    if old is None or old.empty:
        merged = new
    else:
        keys = set(map(tuple, new[list(KEY_COLUMNS)].astype(str).to_numpy()))
        stale = old[list(KEY_COLUMNS)].astype(str).apply(tuple, axis=1).isin(keys)
        merged = pd.concat([old[~stale], new], ignore_index=True) if len(new) else old
    return merged.sort_values([*KEY_COLUMNS, "form"]).reset_index(drop=True)


def write_predictions(path: str | Path, rows: Sequence[dict] | pd.DataFrame) -> None:
    """Write rows as predictions.parquet atomically (temp file + rename)."""
    table = _table(rows)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
