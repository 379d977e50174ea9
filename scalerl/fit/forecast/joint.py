"""Fit runs with the curve prior: one run, or the runs of a sweep jointly (they share a recipe).

`fit_runs(runs, prior)` finds the posterior mode of every run's shape theta = (log B,
log(C_mid / F), logit h) (`scalerl.fit.forecast.prior`) given its points and the prior, and its
Laplace covariance. The model, for run k of a sweep of K runs with reference compute F (the
largest planned final compute among them):

    y_kj ~ N(R(c_kj; theta_k, R0_k), s_k^2)            its evals about the mean curve
    theta_k ~ N(m, diag(within_sd^2))                  runs of one sweep scatter about m
    m ~ N(mean, diag(between_sd^2))                    the sweep's mean shape

Everything is one least-squares problem in (theta_1 .. theta_K, m) with the prior terms as
whitened residuals (`scipy.optimize.least_squares`, analytic Jacobian): with K = 1 it is the
single-run fit under N(mean, between_sd^2 + within_sd^2) exactly (m profiles out of a
Gaussian); with many runs each run's early points borrow strength from the others' shape
(B and C_mid are set mostly by the recipe, Khatri et al. 2025), and with many points of its
own a run's data dominate any prior (the prior terms stay a fixed 3 residuals per run while
its data residuals grow with N).

The eval noise s_k: the prior's scaled inverse chi-square (s0, nu0) combined with the run's
residuals at the fit, s_k^2 = (nu0 s0^2 + sum_j r_kj^2) / (nu0 + N_k) (two passes: first with
s0, then with the residuals), never below the known binomial sd when the samples per eval
are known. R0 is the compute-0 eval as in `scalerl.fit.curves.curve` (its sd s_k / sqrt(n evals)
enters the forecast's variance). Starts: several midpoints around the prior's and the data's
(a single run's posterior can have two modes: the bend seen or still ahead), then the joint
problem from the single-run modes.

`forecast_points(compute, reward, final, prior)` is the forecast of one run from its points so
far: the same point selection as `scalerl.fit.forecast.predict` (R0, cutoff, collapse), the fit, the
mean curve at `final` with its variance (`PriorForecast`); `prior_intervals` turns it into the
intervals of `scalerl.fit.forecast.intervals.ForecastIntervals` with the prior's calibrated
discrepancy added (`discrepancy_var`: kappa log(final / c_last) and kappa_gain times the rise
the posterior still expects). `forecast_sweep` forecasts the runs of one sweep
together.

Deliberately left out: full posterior sampling (the Laplace approximation is used throughout)
and pooling across sweeps that do not share a recipe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit, logit
from scipy.stats import norm

from scalerl.fit.curves.collapse import detect_collapse
from scalerl.fit.curves.curve import select_points
from scalerl.fit.curves.noise import binomial_se
from scalerl.fit.curves.sigmoid import FitConfig, FitError
from scalerl.fit.forecast.intervals import ForecastIntervals, unsupported
from scalerl.fit.forecast.prior import THETA_BOUNDS, CurvePrior, from_theta, mean_curve, supports

__all__ = ["RunData", "RunPosterior", "JointFit", "fit_runs", "PriorForecast",
           "forecast_points", "prior_intervals", "forecast_sweep", "discrepancy_var", "SD_FLOOR"]

SD_FLOOR = 1e-3  # smallest prior sd used (a within-sweep sd of 0 would make a singular fit)
N_STARTS = 3  # optimiser starts per run (the best of a grid of shapes)


@dataclasses.dataclass(frozen=True)
class RunData:
    """One run's points as the fit sees them."""

    compute: np.ndarray  # [N] fitted points: compute > 0, sorted
    reward: np.ndarray  # [N]
    r0: float  # base reward (compute-0 evals, or the first point)
    n_base: int  # evals averaged into R0 (at least 1)
    final: float  # F: the compute the run is planned to reach
    known_sd: float | None = None  # sd of one eval when the samples per eval are known


@dataclasses.dataclass(frozen=True)
class RunPosterior:
    theta: np.ndarray  # [3] posterior mode
    cov: np.ndarray  # [3, 3] Laplace covariance
    r0: float
    r0_sd: float  # sd of R0 (one eval's noise over sqrt(n_base))
    ref: float  # reference compute of theta's C_mid (the sweep's largest final)
    final: float
    noise_sd: float  # s: sd of one eval about the curve
    n_points: int

    @property
    def params(self) -> dict:
        a, b, c_mid = from_theta(self.theta, self.r0, self.ref)
        return {"A": a, "B": b, "C_mid": c_mid, "R0": self.r0}

    def predict(self, compute) -> np.ndarray:
        return mean_curve(self.theta, np.log(np.asarray(compute, float) / self.ref), self.r0)

    def forecast(self, compute: float) -> tuple[float, float]:
        """The mean curve at `compute` and its variance (theta's and R0's; no eval noise)."""
        f, jac = mean_curve(self.theta, np.array([np.log(compute / self.ref)]), self.r0,
                            jacobian=True)
        g = jac[0]  # [3]
        d_r0 = 1.0 - float(expit(self.theta[2]) * expit(np.exp(self.theta[0])
                                                          * (np.log(compute / self.ref)
                                                             - self.theta[1])))
        return float(f[0]), float(g @ self.cov @ g) + (d_r0 * self.r0_sd) ** 2

    def a_sd(self) -> float:
        """sd of A = R0 + (1 - R0) h (delta method)."""
        h = float(expit(self.theta[2]))
        da_dw = (1.0 - self.r0) * h * (1.0 - h)
        return float(np.sqrt(da_dw ** 2 * self.cov[2, 2] + ((1.0 - h) * self.r0_sd) ** 2))


@dataclasses.dataclass(frozen=True)
class JointFit:
    runs: tuple[RunPosterior, ...]
    group_mean: np.ndarray  # [3] the sweep's mean theta m
    group_cov: np.ndarray  # [3, 3]
    cov: np.ndarray  # [3K + 3, 3K + 3] Laplace covariance of (theta_1 .. theta_K, m)
    cost: float  # half the sum of squared whitened residuals at the mode
    converged: bool


def _noise(run: RunData, prior: CurvePrior, resid_ss: float | None) -> float:
    s0 = max(prior.noise_sd, run.known_sd or 0.0)
    if resid_ss is None:
        return s0
    s2 = (prior.noise_dof * s0 ** 2 + resid_ss) / (prior.noise_dof + run.compute.size)
    return float(np.sqrt(max(s2, (run.known_sd or 0.0) ** 2)))


class _Problem:
    """The stacked whitened residuals of K runs and the sweep mean, and their Jacobian."""

    def __init__(self, runs: Sequence[RunData], prior: CurvePrior, ref: float, sds):
        self.runs, self.ref, self.sds = runs, ref, np.asarray(sds, float)
        self.k = len(runs)
        self.log_rel = [np.log(r.compute / ref) for r in runs]
        self.mu = np.asarray(prior.mean, float)
        self.sd_w = np.maximum(np.asarray(prior.within_sd, float), SD_FLOOR)
        self.sd_b = np.maximum(np.asarray(prior.between_sd, float), SD_FLOOR)
        self.n = [r.compute.size for r in runs]

    def residuals(self, x: np.ndarray) -> np.ndarray:
        thetas, m = x[:-3].reshape(self.k, 3), x[-3:]
        parts = [(mean_curve(t, lr, r.r0) - r.reward) / s
                 for t, lr, r, s in zip(thetas, self.log_rel, self.runs, self.sds)]
        parts += [((thetas - m) / self.sd_w).ravel(), (m - self.mu) / self.sd_b]
        return np.concatenate(parts)

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        thetas = x[:-3].reshape(self.k, 3)
        n_data = sum(self.n)
        jac = np.zeros((n_data + 3 * self.k + 3, x.size))
        row = 0
        for i, (t, lr, r, s) in enumerate(zip(thetas, self.log_rel, self.runs, self.sds)):
            _, j = mean_curve(t, lr, r.r0, jacobian=True)  # [N_i, 3]
            jac[row:row + self.n[i], 3 * i:3 * i + 3] = j / s
            row += self.n[i]
        rows = row + np.arange(3 * self.k)  # (theta_k - m) / sd_w
        jac[rows, np.arange(3 * self.k)] = np.tile(1.0 / self.sd_w, self.k)
        jac[rows, 3 * self.k + np.arange(3 * self.k) % 3] = -np.tile(1.0 / self.sd_w, self.k)
        jac[rows[-1] + 1 + np.arange(3), 3 * self.k + np.arange(3)] = 1.0 / self.sd_b
        return jac

    def solve(self, x0: np.ndarray):
        lo = np.tile(THETA_BOUNDS[0], self.k + 1)
        hi = np.tile(THETA_BOUNDS[1], self.k + 1)
        return least_squares(self.residuals, np.clip(x0, lo + 1e-9, hi - 1e-9),
                             jac=self.jacobian, bounds=(lo, hi), method="trf", x_scale="jac",
                             xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=200)


def _starts(run: RunData, prior: CurvePrior, ref: float, sd: float) -> list[np.ndarray]:
    """Single-run starts: the best `N_STARTS` points of a grid of shapes around the prior's
    and the data's (midpoints about the prior mean and at the last point seen, gains about
    the prior's and the one seen so far), by the objective itself."""
    mu, tot = np.asarray(prior.mean, float), prior.total_sd
    seen = float(np.log(run.compute[-1] / ref))
    gain = (np.max(run.reward) - run.r0) / (1.0 - run.r0)
    us = mu[0] + tot[0] * np.array([-1.0, 0.0, 1.0])
    vs = np.r_[mu[1] + tot[1] * np.linspace(-2.5, 2.5, 11), seen - 1.0, seen, seen + 0.5]
    ws = np.r_[mu[2] + tot[2] * np.array([-1.0, 0.0, 1.0]), logit(np.clip(gain, 0.02, 0.98))]
    grid = np.stack(np.meshgrid(us, vs, ws, indexing="ij"), axis=-1).reshape(-1, 3)  # [G, 3]
    grid = np.clip(grid, THETA_BOUNDS[0] + 1e-6, THETA_BOUNDS[1] - 1e-6)
    log_rel = np.log(run.compute / ref)
    b = np.exp(grid[:, :1])  # [G, 1]
    fit = run.r0 + (1 - run.r0) * expit(grid[:, 2:]) * expit(b * (log_rel - grid[:, 1:2]))
    cost = (((fit - run.reward) / sd) ** 2).sum(axis=1) + (((grid - mu) / tot) ** 2).sum(axis=1)
    return [grid[i] for i in np.argsort(cost)[:N_STARTS]]


def _fit_single(run: RunData, prior: CurvePrior, ref: float, sd: float) -> np.ndarray:
    problem = _Problem([run], prior, ref, [sd])
    best = None
    for start in _starts(run, prior, ref, sd):
        m0 = np.asarray(prior.mean, float)
        res = problem.solve(np.concatenate([start, m0]))
        if best is None or res.cost < best.cost:
            best = res
    return best.x


def fit_runs(runs: Sequence[RunData], prior: CurvePrior, init=None) -> JointFit:
    """The posterior mode and Laplace covariance of every run's theta (one run, or the runs
    of one sweep jointly); see the module docstring. `init` [K, 3]: start from these thetas
    (e.g. a previous fit's) instead of the single-run multi-start."""
    runs = list(runs)
    if not runs:
        raise ValueError("fit_runs needs at least one run")
    for r in runs:
        if r.compute.size == 0 or r.compute.shape != r.reward.shape or (r.compute <= 0).any():
            raise FitError("fit_runs needs runs with positive compute and one reward per point")
        if not supports(r.reward, r.r0):
            raise FitError("the curve prior applies to pass rates in [0, 1] with R0 < 1")
    ref = max(r.final for r in runs)
    sds = [_noise(r, prior, None) for r in runs]
    if init is None:
        thetas = np.asarray([_fit_single(r, prior, ref, s)[:3] for r, s in zip(runs, sds)])
    else:
        thetas = np.asarray(init, float).reshape(len(runs), 3)
    m0 = thetas.mean(axis=0) if len(runs) > 1 else np.asarray(prior.mean, float)
    x = np.concatenate([thetas.ravel(), m0])
    for _ in range(2):  # the mode with s0, then with the noise its residuals imply
        problem = _Problem(runs, prior, ref, sds)
        res = problem.solve(x)
        x = res.x
        for i, r in enumerate(runs):
            data = mean_curve(x[3 * i:3 * i + 3], problem.log_rel[i], r.r0) - r.reward  # [N_i]
            sds[i] = _noise(r, prior, float(data @ data))
    problem = _Problem(runs, prior, ref, sds)
    res = problem.solve(x)
    jac = problem.jacobian(res.x)
    cov = np.linalg.pinv(jac.T @ jac)
    thetas = res.x[:-3].reshape(len(runs), 3)
    posts = tuple(RunPosterior(
        theta=thetas[i].copy(), cov=cov[3 * i:3 * i + 3, 3 * i:3 * i + 3].copy(), r0=r.r0,
        r0_sd=sds[i] / np.sqrt(max(r.n_base, 1)), ref=ref, final=r.final, noise_sd=sds[i],
        n_points=int(r.compute.size)) for i, r in enumerate(runs))
    return JointFit(posts, res.x[-3:].copy(), cov[-3:, -3:].copy(), cov, float(res.cost),
                    bool(res.status > 0))


# -- forecasts -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PriorForecast:
    status: str  # "ok", or why there is no forecast: few_points | collapsed | unsupported
    message: str = ""
    posterior: RunPosterior | None = None
    predicted: float = float("nan")  # the mean curve at the final compute
    var_fit: float = float("nan")  # its variance from theta and R0
    horizon: float = float("nan")  # log(final / last fitted compute)
    n_points: int = 0
    gain_ahead: float = float("nan")  # |R(final) - R(last fitted compute)| of the mean curve


def run_data(compute, reward, final: float, config: FitConfig | None = None,
             n_samples=None) -> tuple[RunData | None, str, str]:
    """The points a prior fit uses (the selection of `scalerl.fit.forecast.predict`): (RunData, "ok",
    "") or (None, status, why)."""
    config = config or FitConfig()
    try:
        sel = select_points(compute, reward, config)
    except FitError as err:
        return None, "few_points", str(err)
    c, y = sel.compute[sel.used], sel.reward[sel.used]
    if not supports(y, sel.r0):
        return None, "unsupported", "the curve prior needs pass rates in [0, 1] and R0 < 1"
    if config.collapse_drop is not None:
        collapse = detect_collapse(c, y, sel.r0, config.collapse_drop)
        if collapse is not None:
            return None, "collapsed", (f"collapsed: peak {collapse['peak_reward']:.4g} at "
                                       f"compute {collapse['peak_compute']:.4g}, now "
                                       f"{collapse['final_reward']:.4g}")
    known = None
    if n_samples is not None:
        order = np.argsort(np.asarray(compute, float).ravel(), kind="stable")
        n = np.asarray(n_samples, float).ravel()[order][sel.used]
        if n.size and np.isfinite(n).all() and (n >= 1).all():
            known = float(binomial_se(float(np.mean(y[-3:])), n[-1], clip=True))
    n_base = int((sel.compute == 0).sum()) if sel.r0_source == "compute-0 point" else 1
    return RunData(c, y, sel.r0, max(n_base, 1), float(final), known), "ok", ""


def _forecast_from(post: RunPosterior, last: float) -> PriorForecast:
    pred, var = post.forecast(post.final)
    ahead = abs(pred - float(post.predict(np.array([last]))[0]))
    return PriorForecast("ok", "", post, pred, var, float(np.log(post.final / last)),
                         post.n_points, ahead)


def discrepancy_var(fc: PriorForecast, prior: CurvePrior) -> float:
    """The calibrated discrepancy variance of a forecast: (kappa horizon)^2 + (kappa_gain
    gain_ahead)^2 (`scalerl.fit.forecast.prior`)."""
    return ((prior.kappa * max(fc.horizon, 0.0)) ** 2
            + (prior.kappa_gain * fc.gain_ahead) ** 2)


def forecast_points(compute, reward, final: float, prior: CurvePrior,
                    config: FitConfig | None = None, n_samples=None) -> PriorForecast:
    """Forecast of one run at `final` from its points so far, with the prior: a sweep of one."""
    return forecast_sweep({0: (compute, reward)}, {0: final}, prior, config,
                          {0: n_samples})[0]


def forecast_sweep(curves: Mapping[str, tuple], finals: Mapping[str, float], prior: CurvePrior,
                   config: FitConfig | None = None,
                   n_samples: Mapping[str, object] | None = None) -> dict[str, PriorForecast]:
    """Forecasts of the runs of one sweep (same recipe family), fitted jointly.

    `curves`: run -> (compute, reward) so far; `finals`: run -> planned final compute;
    `n_samples`: run -> graded samples per eval (or None). Runs without a forecast (too few
    points, collapsed, not pass rates) get their status and are left out of the joint fit."""
    out, data = {}, {}
    for name, (compute, reward) in curves.items():
        n = None if n_samples is None else n_samples.get(name)
        run, status, why = run_data(compute, reward, finals[name], config, n)
        if run is None:
            out[name] = PriorForecast(status, why)
        else:
            data[name] = run
    if data:
        fit = fit_runs(list(data.values()), prior)
        for (name, run), post in zip(data.items(), fit.runs):
            out[name] = _forecast_from(post, float(run.compute[-1]))
    return out


def prior_intervals(fc: PriorForecast, prior: CurvePrior, confidence: float) -> ForecastIntervals:
    """Intervals of a prior forecast at `confidence`: the posterior's variance plus the
    calibrated discrepancy (`discrepancy_var`) for the mean curve, plus one eval's noise for
    the observed value; A and C_mid get their posterior intervals widened by the same factor
    as the mean curve's (as in `scalerl.fit.forecast.intervals.calibrate`). Pass rates stay in [0, 1]."""
    post = fc.posterior
    if fc.status != "ok" or post is None:
        return unsupported(fc.status, warning=fc.message)
    z = float(norm.ppf(0.5 + confidence / 2.0))
    disc = discrepancy_var(fc, prior)
    var_mean = fc.var_fit + disc
    widening = float(np.sqrt(var_mean / fc.var_fit)) if fc.var_fit > 0 else float("nan")
    half = z * np.sqrt(var_mean)
    half_obs = z * np.sqrt(var_mean + post.noise_sd ** 2)
    clip = lambda lo, hi: (float(np.clip(lo, 0.0, 1.0)), float(np.clip(hi, 0.0, 1.0)))  # noqa: E731
    factor = widening if np.isfinite(widening) else 1.0
    a = post.params["A"]
    a_half = z * factor * post.a_sd()
    log_cm = float(np.log(post.params["C_mid"]))
    cm_half = z * factor * float(np.sqrt(post.cov[1, 1]))
    return ForecastIntervals(
        observed=clip(fc.predicted - half_obs, fc.predicted + half_obs),
        mean=clip(fc.predicted - half, fc.predicted + half), A=clip(a - a_half, a + a_half),
        C_mid=(float(np.exp(log_cm - cm_half)), float(np.exp(log_cm + cm_half))), status="ok",
        eval_se=post.noise_sd, eval_se_source="prior", widening=widening, backtest_n=0,
        backtest_rmse=float("nan"))
