"""Evaluation noise: the binomial standard error of a pass rate, fit weights, the noise floor.

A pass rate p measured on n graded samples (prompts x samples per prompt) has the binomial
standard error se = sqrt(p (1 - p) / n). `binomial_se` computes it per eval point;
`binomial_weights` turns it into least-squares weights w = 1 / se^2 (normalised to mean 1, so
the weighted SSE stays on the scale of the plain one) for `FitConfig.weighting = "binomial"`.
A measured p of exactly 0 or 1 would get se = 0 (infinite weight); the variance uses p clipped
to [1/(2n), 1 - 1/(2n)] instead, i.e. half a success or failure.

`point_noise_sd(y)` estimates the noise sd of one point from the points themselves when n is
unknown: 1.4826 median |second difference| / sqrt(6) (a second difference of independent
noise has variance 6 sigma^2; the median makes it robust to outliers, the second difference
blind to a locally linear trend). `scalerl.fit.collapse` and `scalerl.fit.intervals` use it.

`noise_floor(p, n)` states what a final pass rate can and cannot resolve: its se, the
half-width of its confidence interval, and the smallest difference between two runs' finals
that is not noise (z sqrt(2) se, both measured on n samples).

The binomial se treats the n samples as independent. Samples of one prompt are correlated
(an easy prompt is solved by all its samples), so with k > 1 samples per prompt the true se
lies between sqrt(p (1 - p) / n) and the per-prompt se; the binomial one is a floor.

Deliberately left out: the per-prompt (cluster) standard error and Bayesian intervals.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.stats import norm

__all__ = ["binomial_se", "binomial_weights", "noise_floor", "NoiseFloor", "point_noise_sd"]


def binomial_se(pass_rate, n_samples, *, clip: bool = False) -> np.ndarray:
    """sqrt(p (1 - p) / n) per point; `clip`: p limited to [1/(2n), 1 - 1/(2n)] first."""
    p = np.asarray(pass_rate, dtype=float)
    n = np.asarray(n_samples, dtype=float)
    if np.any(n < 1) or not np.isfinite(n).all():
        raise ValueError(f"n_samples must be >= 1 graded samples per point, got {n_samples!r}")
    if np.any((p < 0) | (p > 1)) or not np.isfinite(p).all():
        raise ValueError("a binomial standard error needs pass rates in [0, 1] (the mean of a "
                         "0/1 `correct` column), got values outside it")
    if clip:
        p = np.clip(p, 0.5 / n, 1.0 - 0.5 / n)
    return np.sqrt(p * (1.0 - p) / n)


def binomial_weights(pass_rate, n_samples) -> np.ndarray:
    """Least-squares weights 1 / se^2 (se with clipped p), scaled to mean 1: [N]."""
    se = binomial_se(pass_rate, n_samples, clip=True)
    w = 1.0 / (se * se)
    return w / w.mean()


def point_noise_sd(reward) -> float:
    """Noise sd of one point from the points [N] in order of compute (see the module
    docstring); NaN with fewer than 3 points."""
    y = np.asarray(reward, dtype=float)
    if y.size < 3:
        return float("nan")
    return 1.4826 * float(np.median(np.abs(np.diff(y, 2)))) / np.sqrt(6.0)


@dataclasses.dataclass(frozen=True)
class NoiseFloor:
    pass_rate: float
    n_samples: int
    se: float  # binomial standard error of the pass rate
    half_width: float  # z * se: half the confidence interval of the pass rate
    min_difference: float  # z * sqrt(2) * se: smallest difference of two finals that is real
    confidence: float

    def statement(self) -> str:
        return (f"a pass rate of {self.pass_rate:.3f} on {self.n_samples} samples has "
                f"se {self.se:.4f}: it is known to +-{self.half_width:.3f} "
                f"({self.confidence:.0%}), and two runs' finals closer than "
                f"{self.min_difference:.3f} are not distinguishable (binomial floor; "
                "correlated samples per prompt make it larger)")


def noise_floor(pass_rate: float, n_samples: int, confidence: float = 0.95) -> NoiseFloor:
    """The noise floor of one final pass rate measured on `n_samples` graded samples."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    se = float(binomial_se(pass_rate, n_samples))
    z = float(norm.ppf(0.5 + confidence / 2))
    return NoiseFloor(float(pass_rate), int(n_samples), se, z * se, z * np.sqrt(2.0) * se,
                      confidence)
