"""Detect a run that collapsed: its reward rose to a peak and then fell well below it.

A sigmoid only rises, so a curve that rises then falls (training instability, a reward hack
that the verifier later punishes, entropy collapse) fitted whole gives a wrong ceiling: A is
pulled down to a compromise between the peak and the fall. `detect_collapse` flags such a
curve so `scalerl.fit.curve.fit_curve` reports it as `collapsed`, with its peak, and fits
only the points up to the peak.

Rule (all on the points the fit would use, sorted by compute):
- peak: the largest 3-point running mean of the reward (the raw maximum overshoots by the
  noise); final: the mean of the last 3 points;
- collapsed when peak > R0, the drop peak - final is at least `drop_fraction` of the gain
  peak - R0, and the drop exceeds 3 noise standard deviations of a difference of two 3-point
  means (noise sd from the median absolute second difference, 1.4826 median |d2 y| / sqrt(6):
  robust to outliers and blind to a locally linear trend).

Deliberately left out: recovery after a collapse (a second rise) and change-point models.
"""

from __future__ import annotations

import numpy as np

from scalerl.fit.noise import point_noise_sd

__all__ = ["detect_collapse", "MIN_COLLAPSE_POINTS"]

MIN_COLLAPSE_POINTS = 6  # a peak and a fall of 3-point means need at least this many points


def detect_collapse(compute, reward, r0: float, drop_fraction: float) -> dict | None:
    """None if the curve did not collapse, else {peak_compute, peak_reward, peak_index,
    final_reward, drop, drop_fraction, noise_sd} (peak_index into the sorted points)."""
    c = np.asarray(compute, dtype=float)
    y = np.asarray(reward, dtype=float)
    if y.size < MIN_COLLAPSE_POINTS:
        return None
    smooth = np.convolve(y, np.ones(3) / 3, mode="valid")  # [N - 2], centred on points 1..N-2
    k = int(np.argmax(smooth))
    peak = float(smooth[k])
    final = float(y[-3:].mean())
    gain, drop = peak - r0, peak - final
    noise_sd = point_noise_sd(y)  # per point
    if gain <= 0 or drop < drop_fraction * gain or drop <= 3.0 * noise_sd * np.sqrt(2.0 / 3.0):
        return None
    peak_index = k + int(np.argmax(y[k:k + 3]))  # the highest raw point of the peak window
    return {"peak_compute": float(c[peak_index]), "peak_reward": float(y[peak_index]),
            "peak_smoothed": peak, "peak_index": peak_index, "final_reward": final,
            "drop": drop, "drop_fraction": drop / gain, "noise_sd": noise_sd}
