"""Evaluation noise: the binomial standard error of a pass rate, fit weights, the noise floor.

A pass rate p measured on n graded samples (prompts x samples per prompt) has the binomial
standard error se = sqrt(p (1 - p) / n). `binomial_se` computes it per eval point;
`binomial_weights` turns it into least-squares weights w = 1 / se^2 (normalised to mean 1, so
the weighted SSE stays on the scale of the plain one) for `FitConfig.weighting = "binomial"`.
A measured p of exactly 0 or 1 would get se = 0 (infinite weight); the variance uses p clipped
to [1/(2n), 1 - 1/(2n)] instead, i.e. half a success or failure.

`noise_floor(p, n)` states what a final pass rate can and cannot resolve: its se, the
half-width of its confidence interval, and the smallest difference between two runs' finals
that is not noise (z sqrt(2) se, both measured on n samples).

The binomial se treats the n samples as independent. Samples of one prompt are correlated
(an easy prompt is solved by all its samples), so with k > 1 samples per prompt the true se
lies between sqrt(p (1 - p) / n) and the per-prompt se; the binomial one is a floor.

The curve's own noise, for logs that do not say how a value was measured (a per-step training
reward of 8 rollouts, an eval of unknown size): `noise_sd(y)` estimates the per-point noise
standard deviation from second differences, 1.4826 median |d2 y| / sqrt(6) (robust to outliers
and blind to a locally linear trend; the plain sd of d2 / sqrt(6) when more than half the d2
are 0, as in quantised rewards; `scalerl.fit.curves.collapse` reads drops against it and
`scalerl.fit.forecast.intervals` takes it as the noise of one eval when n is unknown);
`smoothing_window(y)` is the odd running-mean window whose mean has noise sd <=
`SMOOTHING_TARGET_SD` (0.01, half the paper's seed-to-seed spread of A), at least 3 and at
most a fifth of the points (so a peak and a fall both span windows);
`running_mean(y, w)` the means of the full windows. `local_noise_weights(y)` gives fit weights
1 / s_j^2 from a local noise estimate s_j (rolling mean of d2^2 / 6 over max(2 w + 1, N / 4)
points: wide enough that equal noise gives near-equal weights; floored at a tenth of its
median so a quiet stretch does not take all the weight), scaled to mean 1:
`FitConfig.weighting = "noise"`.

Deliberately left out: the per-prompt (cluster) standard error and Bayesian intervals.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.stats import norm

__all__ = ["binomial_se", "binomial_weights", "noise_floor", "NoiseFloor", "noise_sd",
           "smoothing_window", "running_mean", "local_noise_weights", "SMOOTHING_TARGET_SD"]

SMOOTHING_TARGET_SD = 0.01  # noise sd of a smoothed point (half the paper's A spread 0.02)


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


# -- the curve's own noise ------------------------------------------------------------------

def noise_sd(reward) -> float:
    """Per-point noise sd of a curve from its second differences (0.0 for < 3 points)."""
    y = np.asarray(reward, dtype=float).ravel()
    if y.size < 3:
        return 0.0
    d2 = np.diff(y, 2)  # [N - 2]; var(d2) = 6 sd^2 for independent noise on a linear trend
    sd = 1.4826 * float(np.median(np.abs(d2))) / np.sqrt(6.0)
    if sd == 0.0:  # quantised values (k / 8): most d2 are exactly 0
        sd = float(np.std(d2)) / np.sqrt(6.0)
    return sd


def smoothing_window(reward, target_sd: float = SMOOTHING_TARGET_SD) -> int:
    """Odd window w: smallest with noise_sd / sqrt(w) <= target_sd, within [3, N / 5]."""
    y = np.asarray(reward, dtype=float).ravel()
    need = int(np.ceil((noise_sd(y) / target_sd) ** 2))
    cap = max(3, y.size // 5)
    w = min(max(need, 3), cap)
    return w if w % 2 else w - 1 if w > 3 else 3


def running_mean(reward, window: int) -> np.ndarray:
    """Means of the full windows: [N - window + 1] (entry k covers points k .. k + window - 1)."""
    y = np.asarray(reward, dtype=float).ravel()
    if window > y.size:
        return np.array([y.mean()]) if y.size else y
    csum = np.concatenate([[0.0], np.cumsum(y)])
    return (csum[window:] - csum[:-window]) / window


def local_noise_weights(reward) -> np.ndarray:
    """Fit weights 1 / s_j^2 from the local noise s_j of the curve, mean 1: [N]."""
    y = np.asarray(reward, dtype=float).ravel()
    if y.size < 5:
        return np.ones_like(y)
    e = np.diff(y, 2) ** 2 / 6.0  # [N - 2] noise variance estimates at points 1 .. N-2
    e = np.concatenate([[e[0]], e, [e[-1]]])  # [N]: ends take their neighbour's
    width = min(max(2 * smoothing_window(y) + 1, y.size // 4), y.size)
    kernel = np.ones(width) / width
    padded = np.pad(e, (width // 2, width - 1 - width // 2), mode="edge")
    var = np.convolve(padded, kernel, mode="valid")  # [N] rolling mean of d2^2 / 6
    positive = var[var > 0]
    if positive.size == 0:
        return np.ones_like(y)
    var = np.maximum(var, 0.1 * float(np.median(positive)))
    w = 1.0 / var
    return w / w.mean()
