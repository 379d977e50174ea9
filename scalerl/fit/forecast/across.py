"""Forecast across scale: predict a run of an untried model size (or generation length) from
runs of other sizes trained with the same recipe, before spending its GPU-hours.

`predict_across(runs, target_size, final_compute, target_r0=None, config=None, axis="size")`
takes `runs`, a sequence of `(size, compute, reward)` (size in parameters; compute and reward
arrays as `scalerl.fit.forecast.predict.predict_final` takes them, compute in the same unit for every
run), and returns one `scalerl.fit.forecast.predict.Prediction` (form "sigmoid") for a run of
`target_size` trained to `final_compute`: the predicted final pass rate, A, C_mid, their
intervals and the observed-final interval, a status and warnings. The same along generation
length: pass `(gen_len, compute, reward)` runs, the target's length and `axis="gen_len"` (the
laws below are the same in log length; only the words of the warnings change). Runs must
differ only along that axis (same recipe, data, batch and schedule); the function cannot
check that.

Two stages.

1. Each run is fitted on its own as `predict_final(..., prior=None)` fits it (the points `select_points` keeps,
   R0 from the compute-0 point, the collapse check, `FitConfig.weighting`): the sigmoid's A,
   B and C_mid, and their sampling spread from the moving-block bootstrap
   (`scalerl.fit.curves.bootstrap`, `FitConfig.bootstrap_n` replicates; 0: no spread, equal
   weights below). A run's parameter enters the law only where the data determine it
   (`RunEstimate.uses`): A when the reward rises, A lies inside its range and the points
   reached C_mid (before it, the ceiling is a guess); C_mid when it lies inside its range (a
   rise before the first checkpoint, or one not yet half done, leaves it open); B when C_mid
   does and B lies inside its bounds. Runs that collapsed or have too few points enter no law.

2. Laws in x = log(size), each fitted across the runs that determine the parameter:
   - the ceiling: log(1 - A) = a + b x, a power law of the gap to a perfect score (pass rates,
     every reward in [0, 1]): A rises with size and saturates at 1, never beyond. Rewards on
     another scale (a sum of reward functions) get A = a + b x instead;
   - the midpoint: log C_mid = c + d x, a power law in size (in the runs' compute unit; with
     GPU-hours a larger model's step costs more, with steps it learns faster: d's sign is the
     data's);
   - the exponent: log B = e, shared by all sizes (the paper's B is a property of the recipe:
     1.92 for its 8B, 1.65 for Scout: the paper's Table 1 and Section 5);
   - the base score: the measured `target_r0` when given (evaluating a base model is cheap;
     measure it), else log(1 - R0) = f + g x over every usable run, with a warning.
   A two-parameter law with no floor on the gap is the most that three to five sizes can fit
   and check; a saturating gap E + D N^-alpha needs a fourth size per extra parameter.

   Each law is a random-effects weighted regression (`fit_law`): run i's estimate t_i has its
   bootstrap variance v_i, and the runs scatter about the law by a between-size variance
   tau^2 estimated from them (DerSimonian-Laird moments, the "spread of the smaller runs":
   how far sizes lie from the law beyond their own fit noise). Weights 1 / (v_i + tau^2); the
   coefficients' covariance is scaled by the weighted residual mean square when above 1
   (Knapp-Hartung). The prediction at the target's x has variance tau^2 + the line's
   variance there and a Student t with k - 2 degrees of freedom (k - 1 for the shared B),
   k = the runs used: three sizes give 1 degree of freedom and a wide interval, as they
   should.

Intervals (at `FitConfig.confidence`):
- A and C_mid: their law's own t interval at the target, mapped back to A and C_mid;
- the mean curve at the final compute (`predicted_final_lo/hi`): `MC_DRAWS` Normal draws of
  every law's prediction (independent; seeded by `FitConfig.bootstrap_seed`) through the
  sigmoid give the interval's shape (the curve saturates, so it is skewed), which is widened
  about the point forecast from the Normal to the Student quantile at the Welch-Satterthwaite
  degrees of freedom of the laws' shares of its variance (each law's scale times the final's
  slope in it, by finite differences). Drawing each law from its own t instead gives
  intervals that are too wide (100 seeded `size_family` families, no bootstrap: 100 %
  covered, median width 0.27, against 97 % and 0.20 this way);
- the observed final (`observed_final_lo/hi`): the mean curve's plus the noise of one eval in
  quadrature on each side, z se, se from the runs' own points (`scalerl.fit.curves.noise.noise_sd`;
  for pass rates via a binomial-equivalent sample size, so it shrinks near 0 and 1).
Measured (tests/fit/test_across.py, benchmarks/bench_across_sizes.py): on families with
size-to-size scatter the observed-final and A intervals cover at about the nominal rate; a
law of three sizes whose runs' own fit noise exceeds their scatter gets a conservative one
(the noise floors the variance under a t with 1 degree of freedom).
The point forecast is the sigmoid at the laws' central values; `reached_c_mid` says whether
the final compute lies past the predicted C_mid.

Refusals (status, every value NaN): "few_sizes" when a law has fewer than `MIN_SIZES` distinct
sizes to fit (two sizes fix a line but say nothing of how far sizes scatter about it, so no
interval and no number), or the shared B fewer than two runs; the warnings say which law and
why each missing run was left out. A target more than `FAR_FACTOR` times beyond the sizes
fitted is forecast with a warning (the interval widens with the distance, the law's form is
untested there).

Deliberately left out: correlated deviations of A and C_mid across sizes (too few sizes to
estimate), a floor on the gap, the curve prior of `scalerl.fit.forecast.prior` (the per-size fits
are plain least squares: a law across sizes wants each size's own estimate and its sampling
spread, not one pulled toward public runs), and curves that fall after a peak.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from scalerl.fit.curves.bootstrap import bootstrap_intervals
from scalerl.fit.curves.collapse import detect_collapse
from scalerl.fit.curves.curve import point_weights, select_points
from scalerl.fit.curves.noise import noise_sd
from scalerl.fit.curves.sigmoid import FitConfig, FitError, fit_sigmoid, sigmoid
from scalerl.fit.forecast.intervals import spread_sd
from scalerl.fit.forecast.predict import Prediction

__all__ = ["predict_across", "fit_law", "Law", "RunEstimate", "estimate_run", "AXES",
           "MIN_SIZES", "FAR_FACTOR", "MC_DRAWS"]

AXES = {"size": "model size", "gen_len": "generation length"}
MIN_SIZES = 3  # distinct sizes a law of two coefficients needs to show its scatter
FAR_FACTOR = 4.0  # a target beyond this multiple of the fitted range gets a warning
MC_DRAWS = 4000  # Monte Carlo draws of the laws' predictions
NAN = float("nan")
_BOUND_REL = 1e-4  # a parameter within this fraction of its range's span sits on the bound


@dataclasses.dataclass(frozen=True)
class RunEstimate:
    """One run's own fit: the parameters the laws take, their sampling sd in the law's scale
    (log(1 - A) or A, log B, log C_mid; NaN without a bootstrap), and which it determines."""

    size: float
    A: float
    B: float
    C_mid: float
    R0: float
    sd: dict  # {"A", "B", "C_mid"}: bootstrap sd in the law's scale
    uses: frozenset  # subset of {"A", "B", "C_mid", "R0"}
    n_points: int
    noise: float  # per-point noise sd of the fitted points
    level: float  # mean reward of the latest half of the compute
    reason: str  # why a parameter is not used ("" when all are)


@dataclasses.dataclass(frozen=True)
class Law:
    """theta = coef[0] + coef[1] x (or coef[0] alone) across sizes, and its prediction."""

    coef: tuple[float, ...]
    cov: np.ndarray  # [p, p] covariance of coef
    tau2: float  # between-size variance about the law
    dof: int  # k - p: the degrees of freedom of the predictive t
    k: int  # runs used
    sizes: int  # distinct x values

    def predict(self, x: float) -> tuple[float, float]:
        """(centre, scale) of the predictive t at x: scale^2 = tau^2 + the line's variance."""
        z = np.array([1.0, x][: len(self.coef)])
        centre = float(z @ np.asarray(self.coef))
        return centre, float(np.sqrt(self.tau2 + z @ self.cov @ z))


def fit_law(x, theta, var=None, *, slope: bool = True) -> Law:
    """Random-effects weighted regression of `theta` [k] on `x` [k] (`slope`: a line, else a
    constant), `var` [k] the estimates' own sampling variances (None or zeros: unknown, the
    scatter alone). See the module docstring. Needs k > p (p coefficients)."""
    x, theta = np.asarray(x, float).ravel(), np.asarray(theta, float).ravel()
    k = theta.size
    v = np.zeros(k) if var is None else np.nan_to_num(np.asarray(var, float).ravel(), nan=0.0)
    X = np.column_stack([np.ones(k), x]) if slope else np.ones((k, 1))  # [k, p]
    p = X.shape[1]
    if k <= p:
        raise ValueError(f"a law with {p} coefficient(s) needs more than {p} estimates, got {k}")

    def wls(w):
        xtw = X.T * w  # [p, k]
        inv = np.linalg.pinv(xtw @ X)  # [p, p]
        beta = inv @ (xtw @ theta)  # [p]
        return beta, inv, theta - X @ beta  # resid [k]

    if np.all(v > 0):
        w = 1.0 / v
        beta, inv, resid = wls(w)
        q = float(w @ resid ** 2)
        hat = (X * w[:, None]) @ inv @ (X.T * w)  # [k, k] = W X (X'WX)^-1 X'W
        trace = float(w.sum() - np.trace(hat))  # tr(W - W X (X'WX)^-1 X'W)
        tau2 = max(0.0, (q - (k - p)) / trace) if trace > 0 else 0.0
    else:  # no sampling variances: the scatter about an unweighted line is all there is
        v = np.zeros(k)
        _, _, resid = wls(np.ones(k))
        tau2 = float(resid @ resid) / (k - p)
    w = 1.0 / np.maximum(v + tau2, 1e-300)
    beta, inv, resid = wls(w)
    scale = max(1.0, float(w @ resid ** 2) / (k - p))  # Knapp-Hartung, never below 1
    return Law(tuple(float(b) for b in beta), inv * scale, float(tau2), k - p, k,
               int(np.unique(x).size))


def _on_bound(value: float, lo: float, hi: float, step: float = 0.0) -> bool:
    """Within `step` (a grid step) or a small fraction of the span of either end."""
    tol = max(_BOUND_REL * (hi - lo), step)
    return value <= lo + tol or value >= hi - tol


def _gap(a, unit: bool):
    """The ceiling's law scale: log(1 - A) for pass rates, A otherwise."""
    return np.log1p(-np.asarray(a, float)) if unit else np.asarray(a, float)


def _ungap(u, unit: bool):
    return -np.expm1(np.asarray(u, float)) if unit else np.asarray(u, float)


def estimate_run(size: float, compute, reward, config: FitConfig, unit: bool) -> RunEstimate:
    """Stage 1 for one run (see the module docstring); `unit`: the family's rewards are pass
    rates (the ceiling's scale is log(1 - A))."""
    nan3 = {"A": NAN, "B": NAN, "C_mid": NAN}
    try:
        sel = select_points(compute, reward, config)
        c, y = sel.compute[sel.used], sel.reward[sel.used]
        collapse = detect_collapse(c, y, sel.r0, config.collapse_drop) \
            if config.collapse_drop is not None else None
        if collapse is not None:
            return RunEstimate(size, NAN, NAN, NAN, sel.r0, nan3, frozenset({"R0"}), c.size,
                               NAN, NAN, f"collapsed (peak {collapse['peak_reward']:.3g}, "
                               f"now {collapse['final_reward']:.3g})")
        weights = point_weights(c, y, None, config)
        fit = fit_sigmoid(c, y, config, r0=sel.r0, weights=weights)
    except FitError as err:
        r0 = float(np.asarray(reward, float).ravel()[0]) if np.size(reward) else NAN
        return RunEstimate(size, NAN, NAN, NAN, r0, nan3, frozenset(), 0, NAN, NAN, str(err))
    rising = not any("reward is" in w for w in fit.warnings)
    reached = bool(c.max() >= fit.C_mid)
    a_ok = rising and reached and fit.R0 < fit.A and not _on_bound(fit.A, *fit.a_range, config.a_step) \
        and (not unit or fit.A < 1.0)
    c_ok = rising and not _on_bound(fit.C_mid, *fit.cmid_range)
    b_ok = c_ok and not _on_bound(fit.B, config.b_min, config.b_max)
    why = [] if a_ok else ["A: " + ("the reward does not rise" if not rising else
                                    "the points have not reached C_mid" if not reached else
                                    "A sits within a grid step of the end of its range")]
    if not c_ok:
        why.append("C_mid: " + ("the reward does not rise" if not rising else
                                "C_mid sits on the end of its range"))
    elif not b_ok:
        why.append("B: B sits on its bound (a step between checkpoints)")
    sd = dict(nan3)
    if config.bootstrap_n > 0:
        boot = bootstrap_intervals(c, y, fit, config, weights=weights, keep_draws=True)
        draws = boot["draws"]  # [n_ok, (A, B, C_mid)]
        if len(draws) >= 10:
            gap = _gap(np.minimum(draws[:, 0], 1.0 - 1e-9) if unit else draws[:, 0], unit)
            sd = {"A": spread_sd(gap, config.confidence),
                  "B": spread_sd(np.log(draws[:, 1]), config.confidence),
                  "C_mid": spread_sd(np.log(draws[:, 2]), config.confidence)}
    uses = {"R0"} | {name for name, ok in (("A", a_ok), ("B", b_ok), ("C_mid", c_ok)) if ok}
    recent = y[c >= c.max() / 2]
    return RunEstimate(size, fit.A, fit.B, fit.C_mid, fit.R0, sd, frozenset(uses), int(c.size),
                       noise_sd(y), float(recent.mean()), "; ".join(why))


def _eval_se(estimates: Sequence[RunEstimate], predicted: float, unit: bool) -> float:
    """Noise sd of one eval of the target at `predicted`: the runs' median noise, for pass
    rates via their binomial-equivalent sample size n = p (1 - p) / sd^2."""
    rows = [(e.noise, e.level) for e in estimates if np.isfinite(e.noise) and e.noise > 0]
    if not rows:
        return 0.0
    if not unit:
        return float(np.median([s for s, _ in rows]))
    def var1(p: float) -> float:  # p (1 - p), p kept off 0 and 1
        p = float(np.clip(p, 0.02, 0.98))
        return p * (1.0 - p)

    n = float(np.median([var1(p) / s ** 2 for s, p in rows]))
    return float(np.sqrt(var1(predicted) / n))


def _refuse(n_points: int, warnings: list[str], confidence: float, params: dict) -> Prediction:
    return Prediction("sigmoid", NAN, NAN, NAN, NAN, NAN, NAN, False, n_points, "few_sizes",
                      tuple(warnings), params=params, interval_status="few_sizes",
                      confidence=confidence)


def _check(runs, target_size, final_compute, target_r0, axis) -> list[tuple[float, np.ndarray,
                                                                            np.ndarray]]:
    if axis not in AXES:
        raise ValueError(f"axis must be one of {', '.join(AXES)}, got {axis!r}")
    word = AXES[axis]
    if not np.isfinite(target_size) or target_size <= 0:
        raise ValueError(f"the target {word} must be positive, got {target_size}")
    if not np.isfinite(final_compute) or final_compute <= 0:
        raise ValueError(f"final compute must be positive, got {final_compute}")
    if target_r0 is not None and not np.isfinite(target_r0):
        raise ValueError(f"target_r0 must be a finite base score or None, got {target_r0}")
    out = []
    for i, run in enumerate(runs):
        if len(run) != 3:
            raise ValueError(f"run {i}: expected (size, compute, reward), got {len(run)} item(s)")
        size, compute, reward = run
        if not np.isfinite(size) or size <= 0:
            raise ValueError(f"run {i}: the {word} must be positive, got {size}")
        out.append((float(size), np.asarray(compute, float), np.asarray(reward, float)))
    return out


def predict_across(runs: Sequence[tuple], target_size: float, final_compute: float,
                   target_r0: float | None = None, config: FitConfig | None = None, *,
                   axis: str = "size") -> Prediction:
    """The forecast for a run of `target_size` trained to `final_compute`; see the module
    docstring. `Prediction.params` holds the laws and every run's estimate."""
    config = config or FitConfig()
    checked = _check(runs, target_size, final_compute, target_r0, axis)
    word = AXES[axis]
    unit = bool(checked) and all(np.all((y >= 0) & (y <= 1)) for _, _, y in checked) and \
        (target_r0 is None or 0 <= target_r0 <= 1)
    estimates = [estimate_run(s, c, y, config, unit) for s, c, y in checked]
    warnings = [f"{word} {e.size:.4g}: {e.reason}" for e in estimates if e.reason]
    n_points = sum(e.n_points for e in estimates)
    laws, x_star = {}, float(np.log(target_size))
    params: dict = {"axis": axis, "scale": "log(1 - A)" if unit else "A",
                    "runs": [dataclasses.asdict(e) | {"uses": sorted(e.uses)} for e in estimates]}
    names = ("A", "C_mid", "B") + (() if target_r0 is not None else ("R0",))
    for name in names:
        used = [e for e in estimates if name in e.uses]
        sizes = {e.size for e in used}
        slope = name != "B"
        need = MIN_SIZES if slope else 2
        if (len(sizes) if slope else len(used)) < need:
            have = f"{len(sizes)} distinct {word}(s)" if slope else f"{len(used)} run(s)"
            warnings.insert(0, f"no forecast: the {name} law has {have} to fit, it needs "
                               f"{need}" + (" (two sizes fix a line but not how far sizes "
                                            "scatter about it)" if len(sizes) == 2 and slope
                                            else ""))
            return _refuse(n_points, warnings, config.confidence, params)
        x = np.log([e.size for e in used])
        value = {"A": lambda e: _gap(e.A, unit), "C_mid": lambda e: np.log(e.C_mid),
                 "B": lambda e: np.log(e.B), "R0": lambda e: _gap(e.R0, unit)}[name]
        var = None if name == "R0" or config.bootstrap_n <= 0 else \
            [e.sd[name] ** 2 for e in used]
        laws[name] = fit_law(x, [float(value(e)) for e in used], var, slope=slope)
    x_fit = np.log([e.size for e in estimates if "A" in e.uses])
    beyond = max(x_star - x_fit.max(), x_fit.min() - x_star)
    if beyond > np.log(FAR_FACTOR):
        warnings.append(f"the target {word} {target_size:.4g} lies {np.exp(beyond):.3g}x "
                        f"beyond the {word}s the ceiling law was fitted on: the law's form is "
                        "untested there")
    pred = {name: law.predict(x_star if name != "B" else 0.0) for name, law in laws.items()}
    if target_r0 is None:
        warnings.append(f"R0 of the target comes from the law across {word}s; evaluate the "
                        "base model and pass target_r0 (cheap, and the forecast's anchor)")
    else:
        pred["R0"] = (float(_gap(target_r0, unit)), 0.0)
    centre = {name: mid for name, (mid, _) in pred.items()}

    def final(theta: dict):  # the sigmoid at the final compute from law-scale parameters
        with np.errstate(over="ignore"):
            return sigmoid(final_compute, _ungap(theta["A"], unit), np.exp(theta["B"]),
                           np.exp(theta["C_mid"]), _ungap(theta["R0"], unit))

    predicted = float(final(centre))
    a_point, r0_point = float(_ungap(centre["A"], unit)), float(_ungap(centre["R0"], unit))
    c_point, b_point = float(np.exp(centre["C_mid"])), float(np.exp(centre["B"]))
    if a_point <= r0_point:
        warnings.append(f"the predicted ceiling A = {a_point:.3g} is not above R0 = "
                        f"{r0_point:.3g}: no gain predicted")
    # Welch-Satterthwaite degrees of freedom of the final from each law's share of its variance
    share = {}
    for name, (mid, scale) in pred.items():
        if scale > 0:
            grad = (final(centre | {name: mid + 1e-4}) - final(centre | {name: mid - 1e-4})) / 2e-4
            share[name] = float(grad * scale) ** 2
    total = sum(share.values())
    dof = total ** 2 / sum(v ** 2 / laws[n].dof for n, v in share.items()) if total > 0 \
        else np.inf
    # Normal draws keep the curve's asymmetry; the interval is widened about the point from
    # the Normal to the Student quantile
    rng = np.random.default_rng(config.bootstrap_seed)
    draws = {name: mid + scale * rng.standard_normal(MC_DRAWS) for name, (mid, scale) in
             pred.items()}
    q = [(1 - config.confidence) / 2, (1 + config.confidence) / 2]
    lo, hi = np.quantile(final(draws), q)
    z = float(norm.ppf(q[1]))
    factor = float(student_t.ppf(q[1], dof)) / z if np.isfinite(dof) else 1.0
    mean_iv = (predicted - factor * (predicted - lo), predicted + factor * (hi - predicted))
    se = _eval_se(estimates, predicted, unit)
    obs_iv = (predicted - float(np.hypot(predicted - mean_iv[0], z * se)),
              predicted + float(np.hypot(mean_iv[1] - predicted, z * se)))

    def law_interval(name: str) -> np.ndarray:  # the law's own t interval, in the law's scale
        (mid, scale), t = pred[name], float(student_t.ppf(q[1], laws[name].dof))
        return np.array([mid - t * scale, mid + t * scale])

    a_iv = np.sort(_ungap(law_interval("A"), unit))
    c_iv = np.exp(law_interval("C_mid"))
    if unit:
        mean_iv, obs_iv, a_iv = (np.clip(iv, 0, 1) for iv in (mean_iv, obs_iv, a_iv))
    params.update(A=a_point, B=b_point, C_mid=c_point, R0=r0_point,
                  R0_source="given" if target_r0 is not None else "law",
                  laws={name: {"coef": law.coef, "tau": float(np.sqrt(law.tau2)),
                               "dof": law.dof, "runs": law.k, "sizes": law.sizes}
                        for name, law in laws.items()})
    return Prediction(
        "sigmoid", predicted, float(mean_iv[0]), float(mean_iv[1]), a_point, float(a_iv[0]),
        float(a_iv[1]), bool(final_compute >= c_point), n_points, "ok", tuple(warnings),
        params=params, observed_final_lo=float(obs_iv[0]), observed_final_hi=float(obs_iv[1]),
        C_mid=c_point, C_mid_lo=float(c_iv[0]), C_mid_hi=float(c_iv[1]), interval_status="ok",
        confidence=config.confidence, eval_se=se)
