"""Learn the curve prior from a corpus of public RL eval curves (empirical Bayes), and rebuild
the shipped one: `rebuild`, run by `scalerl prior --out PATH [--curves DIR]`
(`scalerl.fit.commands.prior`).

Corpus: a folder like benchmarks/public_curves: `sources.csv` (one row per curve: file, kind,
model, source, ...) and one `step,value[,compute]` CSV per curve. `read_corpus` takes the
`eval` curves (held-out accuracy; per-step training rewards are not pass rates of a fixed
set), compute = step, each thinned to at most `max_points` evals (every k-th, the last kept:
the cadence of a typical run; dense W&B exports log an eval every few steps). A curve's
sweep is (source, model, metric): runs of one group on one model and eval set.

`estimate_prior(curves)`, the hierarchical model of `scalerl.fit.forecast.joint` fitted by
expectation-maximisation with Laplace E-steps:
1. each curve alone under a weak hyperprior (`HYPERPRIOR`): its residual noise sd; the noise
   prior is their geometric mean s0 with nu0 = 1 / (2 var(log s)) degrees of freedom (a
   scaled inverse chi-square whose log-variance matches the corpus's spread), in [1, 30];
2. start: mean and sd of those single-curve modes;
3. E-step: every sweep fitted jointly under the current prior (`fit_runs`): modes and Laplace
   covariances of each run's theta and of the sweep mean m; M-step: mean = weighted mean of
   the m's, between_sd^2 = weighted mean of (m - mean)^2 + var(m), within_sd^2 = weighted mean
   over runs of (theta - m)^2 + var(theta - m). Weights: every source counts the same (its
   sweeps, and its runs, share its weight), so a source with many near-identical runs does not
   make the prior look surer than the sources justify. Sds floored at `SD_MIN`. Repeated
   `EM_ITERATIONS` times or until nothing moves by 1e-3.
4. the interval calibration (kappa, kappa_gain) by leave-one-source-out inside the corpus:
   each source's curves are forecast at `CALIBRATION_FRACTIONS` of their steps with the prior
   estimated (steps 1-3) from the other sources; the observed intervals are
   pred +- z sqrt(var_fit + s^2 + (kappa log(F / c))^2 + (kappa_gain |R(F) - R(c)|)^2). For each
   kappa_gain of `KAPPA_GAIN_GRID` kappa is the smallest value at which they cover the last eval
   in a share >= `confidence` of the forecasts (each source weighted the same); the pair kept is
   the one with the smallest weighted median width (kappa_gain 0 is the horizon term alone, so
   the pair is never wider than it on these forecasts). No curve is ever calibrated on a prior
   that saw it.

`rebuild(folder, out)` writes the prior with its provenance (corpus commit, sources, counts,
the procedure, the calibration's coverage). Deliberately left out: reading other layouts
(W&B exports, event files: convert them with `scalerl.fit.readers.inputs` first) and weighting runs by
their eval-set size.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

from scalerl.fit.curves.noise import noise_sd
from scalerl.fit.forecast.joint import RunData, fit_runs, forecast_points
from scalerl.fit.forecast.prior import PARAMS, SHIPPED_PATH, CurvePrior, mean_curve

__all__ = ["CorpusCurve", "read_corpus", "thin", "estimate_prior", "rebuild", "HYPERPRIOR",
           "CALIBRATION_FRACTIONS", "MAX_POINTS", "calibrate_kappa", "fraction_prefix",
           "solve_kappa", "solve_discrepancy", "weighted_median", "KAPPA_GAIN_GRID"]

DEFAULT_CORPUS = Path(__file__).resolve().parents[3] / "benchmarks" / "public_curves"
MAX_POINTS = 60  # evals kept per curve
EM_ITERATIONS = 25
SD_MIN = 0.05  # floor of every prior sd (theta units)
CALIBRATION_FRACTIONS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
KAPPA_GAIN_GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
# The weak hyperprior of the single-curve fits of step 1: wide enough that a full curve's
# data decide (B within e^+-3, C_mid within e^+-5 of F, any gain) while keeping the modes of
# curves that show no bend finite.
HYPERPRIOR = CurvePrior(mean=(0.0, -1.0, 0.0), between_sd=(1.5, 2.5, 2.5),
                        within_sd=(0.01, 0.01, 0.01), noise_sd=0.02, noise_dof=1.0, kappa=0.0,
                        calibrated_at=0.95, provenance={"what": "weak hyperprior"})


@dataclasses.dataclass(frozen=True)
class CorpusCurve:
    file: str
    source: str
    sweep: str  # source | model | metric
    model: str
    task: str
    params: float  # nominal model size (NaN if unknown)
    compute: np.ndarray  # [N] steps, sorted, the first one the base model (0)
    reward: np.ndarray  # [N]


def thin(n: int, max_points: int) -> np.ndarray:
    """Indices of every k-th of n points, k = ceil(n / max_points), and the last: [<= max+1]."""
    every = max(1, -(-n // max_points)) if max_points > 0 else 1
    keep = np.arange(n) % every == 0
    keep[-1] = True
    return np.flatnonzero(keep)


def read_corpus(folder: str | Path = DEFAULT_CORPUS, kinds: Sequence[str] = ("eval",),
                max_points: int = MAX_POINTS) -> list[CorpusCurve]:
    """The corpus's curves of `kinds`, thinned to `max_points` evals, in sources.csv order."""
    folder = Path(folder)
    sources_csv = folder / "sources.csv"
    if not sources_csv.exists():
        raise FileNotFoundError(f"{folder} has no sources.csv: not a curve corpus (see "
                                "benchmarks/public_curves/README.md)")
    table = pd.read_csv(sources_csv, dtype={"params": str})
    missing = [c for c in ("file", "kind", "model", "source") if c not in table.columns]
    if missing:
        raise ValueError(f"{sources_csv} lacks column(s) {', '.join(missing)}; re-create it "
                         "with benchmarks/public_curves/extract.py")
    curves = []
    for row in table.itertuples():
        if row.kind not in kinds:
            continue
        points = pd.read_csv(folder / row.file)
        c = points["step"].to_numpy(float)
        y = points["value"].to_numpy(float)
        keep = thin(c.size, max_points)
        metric = row.file.rsplit("__", 1)[-1].removesuffix(".csv")
        size = float(row.params) if isinstance(row.params, str) and row.params else np.nan
        curves.append(CorpusCurve(row.file, row.source, f"{row.source}|{row.model}|{metric}",
                                  row.model, getattr(row, "task", ""), size, c[keep], y[keep]))
    if not curves:
        raise ValueError(f"{sources_csv} has no curves of kind {', '.join(kinds)}")
    return curves


def fraction_prefix(curve: CorpusCurve, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The points with step <= fraction x the last step (what a forecast then sees)."""
    final = float(curve.compute[-1])
    upto = int(np.searchsorted(curve.compute, fraction * final * (1 + 1e-12), side="right"))
    return curve.compute[:upto], curve.reward[:upto]


def _full_run(curve: CorpusCurve) -> RunData | None:
    """A whole corpus curve as a RunData (None if it is not a pass-rate curve with a base)."""
    c, y = curve.compute, curve.reward
    base = c == 0
    r0 = float(y[base].mean()) if base.any() else float(y[0])
    used = c > 0
    if used.sum() < 4 or not (0 <= r0 < 0.999) or (y < 0).any() or (y > 1).any():
        return None
    return RunData(c[used], y[used], r0, max(int(base.sum()), 1), float(c[-1]))


def _weights(source_of: Sequence[str]) -> np.ndarray:
    """Per item 1 / (items of its source): every source weighs the same in total."""
    counts = pd.Series(list(source_of)).value_counts()
    return np.array([1.0 / counts[s] for s in source_of])


def _noise_prior(runs: Sequence[RunData], thetas: np.ndarray) -> tuple[float, float]:
    """(s0, nu0) from the residual sds of the runs about their single-curve modes [n, 3]."""
    sds = []
    for run, theta in zip(runs, thetas):
        resid = mean_curve(theta, np.log(run.compute / run.final), run.r0) - run.reward
        sds.append(max(float(np.sqrt(np.mean(resid ** 2))), 0.5 * noise_sd(run.reward), 1e-3))
    log_s = np.log(sds)
    dof = float(np.clip(1.0 / (2.0 * max(np.var(log_s), 1e-6)), 1.0, 30.0))
    return float(np.exp(np.mean(log_s))), dof


def estimate_prior(curves: Sequence[CorpusCurve], *, calibrate: bool = True,
                   confidence: float = 0.95, log=None, provenance: dict | None = None
                   ) -> CurvePrior:
    """The empirical-Bayes curve prior of `curves` (see the module docstring)."""
    log = log or (lambda msg: None)
    pairs = [(cv, run) for cv in curves if (run := _full_run(cv)) is not None]
    if len({cv.source for cv, _ in pairs}) < 2:
        raise ValueError("a curve prior needs pass-rate curves from at least 2 sources")
    # start: the single-curve modes under the hyperprior
    singles = np.array([fit_runs([run], HYPERPRIOR).runs[0].theta for _, run in pairs])
    s0, nu0 = _noise_prior([run for _, run in pairs], singles)
    sweeps: dict[str, list[int]] = {}
    for i, (cv, _) in enumerate(pairs):
        sweeps.setdefault(cv.sweep, []).append(i)
    sweep_names = list(sweeps)
    sweep_source = [pairs[sweeps[g][0]][0].source for g in sweep_names]
    w_sweep = _weights(sweep_source)
    w_run = _weights([cv.source for cv, _ in pairs])
    mean = np.average(singles, axis=0, weights=w_run)
    sd = np.maximum(np.sqrt(np.average((singles - mean) ** 2, axis=0, weights=w_run)), SD_MIN)
    prior = CurvePrior(tuple(mean), tuple(sd / np.sqrt(2)), tuple(sd / np.sqrt(2)), s0, nu0,
                       0.0, confidence)
    modes = singles.copy()  # [n, 3] warm starts, updated every E-step
    for it in range(EM_ITERATIONS):
        m_hat, m_var = np.zeros((len(sweep_names), 3)), np.zeros((len(sweep_names), 3))
        dev = np.zeros((len(pairs), 3))
        for gi, g in enumerate(sweep_names):
            idx = sweeps[g]
            fit = fit_runs([pairs[i][1] for i in idx], prior, init=modes[idx])
            modes[idx] = [post.theta for post in fit.runs]
            k = len(idx)
            m_hat[gi], m_var[gi] = fit.group_mean, np.diag(fit.group_cov)
            for j, i in enumerate(idx):
                block = slice(3 * j, 3 * j + 3)
                var_diff = (np.diag(fit.cov)[block] + np.diag(fit.cov)[3 * k:]
                            - 2 * np.diag(fit.cov[block, 3 * k:]))
                dev[i] = (fit.runs[j].theta - fit.group_mean) ** 2 + np.maximum(var_diff, 0)
        new_mean = np.average(m_hat, axis=0, weights=w_sweep)
        between = np.average((m_hat - new_mean) ** 2 + m_var, axis=0, weights=w_sweep)
        within = np.average(dev, axis=0, weights=w_run)
        new = CurvePrior(tuple(new_mean), tuple(np.maximum(np.sqrt(between), SD_MIN)),
                         tuple(np.maximum(np.sqrt(within), SD_MIN)), s0, nu0, 0.0, confidence)
        change = max(np.abs(np.subtract(new.mean, prior.mean)).max(),
                     np.abs(np.subtract(new.between_sd, prior.between_sd)).max(),
                     np.abs(np.subtract(new.within_sd, prior.within_sd)).max())
        prior = new
        log(f"  EM {it + 1}: mean {np.round(prior.mean, 3)} between {np.round(prior.between_sd, 3)}"
            f" within {np.round(prior.within_sd, 3)} (change {change:.4f})")
        if change < 1e-3:
            break
    info = {"em_iterations": it + 1, "n_curves": len(pairs), "n_sweeps": len(sweep_names),
            "n_sources": len(set(sweep_source))}
    if calibrate:
        (kappa, kappa_gain), cal = calibrate_kappa(curves, confidence, log=log)
        info["calibration"] = cal
    else:
        kappa = kappa_gain = 0.0
    return dataclasses.replace(prior, kappa=kappa, kappa_gain=kappa_gain,
                               provenance={**(provenance or {}), "estimate": info})


def _forecast_records(curves: Sequence[CorpusCurve], prior: CurvePrior,
                      fractions: Sequence[float]) -> list[dict]:
    rows = []
    for cv in curves:
        for frac in fractions:
            c, y = fraction_prefix(cv, frac)
            fc = forecast_points(c, y, float(cv.compute[-1]), prior)
            if fc.status != "ok":
                continue
            rows.append({"source": cv.source, "file": cv.file, "fraction": frac,
                         "error": float(cv.reward[-1] - fc.predicted),
                         "var": fc.var_fit + fc.posterior.noise_sd ** 2, "horizon": fc.horizon,
                         "gain_ahead": fc.gain_ahead})
    return rows


def calibrate_kappa(curves: Sequence[CorpusCurve], confidence: float = 0.95,
                    fractions: Sequence[float] = CALIBRATION_FRACTIONS, log=None
                    ) -> tuple[tuple[float, float], dict]:
    """(kappa, kappa_gain) by leave-one-source-out forecasts inside `curves` (step 4 of the
    docstring), and a record of the calibration."""
    log = log or (lambda msg: None)
    rows = []
    for source in sorted({cv.source for cv in curves}):
        rest = [cv for cv in curves if cv.source != source]
        mine = [cv for cv in curves if cv.source == source]
        if len({cv.source for cv in rest}) < 2:
            continue
        inner = estimate_prior(rest, calibrate=False, confidence=confidence)
        rows += _forecast_records(mine, inner, fractions)
        log(f"  calibration: {len(mine)} curve(s) of {source} forecast with the prior of the "
            "others")
    if not rows:
        raise ValueError("calibration needs curves from at least 3 sources")
    table = pd.DataFrame(rows)
    w = _weights(table["source"].tolist())
    error, var, horizon, gain = (table[c].to_numpy(float)
                                 for c in ("error", "var", "horizon", "gain_ahead"))
    kappa, kappa_gain, width, tried = solve_discrepancy(error, var, horizon, gain, w, confidence)
    z = float(norm.ppf(0.5 + confidence / 2))
    total = var + (kappa * horizon) ** 2 + (kappa_gain * gain) ** 2
    covered = np.abs(error) <= z * np.sqrt(total)
    cal = {"kappa": kappa, "kappa_gain": kappa_gain, "n_forecasts": len(table),
           "fractions": list(fractions),
           "weighted_coverage": float(np.average(covered, weights=w)),
           "weighted_median_width": width,
           "coverage_at_kappa_0": float(np.average(np.abs(error) <= z * np.sqrt(var), weights=w)),
           "grid": tried}
    return (kappa, kappa_gain), cal


def weighted_median(values, weights) -> float:
    """The smallest value at which the cumulative weight reaches half the total."""
    v, w = np.asarray(values, float), np.asarray(weights, float)
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    return float(v[order][np.searchsorted(cum, 0.5 * cum[-1])])


def solve_discrepancy(error, var, horizon, gain, weights, confidence: float,
                      grid: Sequence[float] = KAPPA_GAIN_GRID
                      ) -> tuple[float, float, float, list[dict]]:
    """(kappa, kappa_gain, weighted median width, every pair tried): for each kappa_gain of
    `grid` the smallest kappa reaching `confidence` (`solve_kappa` with the gain term added to
    the variance), keeping the pair whose intervals have the smallest weighted median width
    (ties: the smaller kappa_gain)."""
    error, var, horizon, gain = (np.asarray(a, float) for a in (error, var, horizon, gain))
    z = float(norm.ppf(0.5 + confidence / 2))
    tried, best = [], None
    for g in grid:
        base = var + (g * gain) ** 2
        k = solve_kappa(error, base, horizon, weights, confidence)
        width = weighted_median(2 * z * np.sqrt(base + (k * horizon) ** 2), weights)
        tried.append({"kappa_gain": float(g), "kappa": k, "median_width": width})
        if best is None or width < best[2] - 1e-12:
            best = (k, float(g), width)
    return best[0], best[1], best[2], tried


def solve_kappa(error, var, horizon, weights, confidence: float) -> float:
    """Smallest kappa >= 0 with weighted share of |error| <= z sqrt(var + (kappa horizon)^2)
    at least `confidence` (bisection; coverage only grows with kappa)."""
    error, var, horizon = (np.asarray(a, float) for a in (error, var, horizon))
    w = np.asarray(weights, float) / np.sum(weights)
    z = float(norm.ppf(0.5 + confidence / 2))

    def coverage(k: float) -> float:
        return float(w @ (np.abs(error) <= z * np.sqrt(var + (k * horizon) ** 2)))

    if coverage(0.0) >= confidence:
        return 0.0
    lo, hi = 0.0, 0.05
    while coverage(hi) < confidence and hi < 100:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if coverage(mid) >= confidence else (mid, hi)
    return hi


def _git_commit(folder: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                             capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "."],
                               capture_output=True, text=True, check=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def rebuild(folder: str | Path = DEFAULT_CORPUS, out: str | Path = SHIPPED_PATH, *,
            exclude_sources: Sequence[str] = (), max_points: int = MAX_POINTS,
            confidence: float = 0.95, log=None) -> CurvePrior:
    """Estimate the prior from the corpus in `folder` and write it to `out` (`log(message)`:
    progress, by default none)."""
    log = log or (lambda msg: None)
    folder = Path(folder)
    t0 = time.perf_counter()
    curves = [cv for cv in read_corpus(folder, max_points=max_points)
              if cv.source not in set(exclude_sources)]
    counts = pd.Series([cv.source for cv in curves]).value_counts().sort_index()
    log(f"{len(curves)} eval curves from {len(counts)} sources in {folder}")
    provenance = {
        "corpus": str(folder.name), "corpus_commit": _git_commit(folder),
        "sources": {s: int(n) for s, n in counts.items()},
        "excluded_sources": list(exclude_sources), "max_points": max_points,
        "compute": "step", "params": list(PARAMS),
        "procedure": "scalerl.fit.forecast.corpus.estimate_prior: empirical Bayes (EM with Laplace "
                     "E-steps over sweeps fitted jointly), kappa and kappa_gain by "
                     "leave-one-source-out",
        "built": time.strftime("%Y-%m-%d"),
    }
    prior = estimate_prior(curves, confidence=confidence, log=log, provenance=provenance)
    prior.save(out)
    log(f"wrote {out} in {time.perf_counter() - t0:.0f} s: mean {np.round(prior.mean, 3)}, "
        f"between {np.round(prior.between_sd, 3)}, within {np.round(prior.within_sd, 3)}, "
        f"noise {prior.noise_sd:.4f} ({prior.noise_dof:.1f} dof), kappa {prior.kappa:.4f}, "
        f"kappa_gain {prior.kappa_gain:.3f}")
    return prior
