"""Detect a run that collapsed: its reward rose to a peak and then fell well below it.

A sigmoid only rises, so a curve that rises then falls (training instability, a reward hack
that the verifier later punishes, entropy collapse) fitted whole gives a wrong ceiling: A is
pulled down to a compromise between the peak and the fall. `detect_collapse` flags such a
curve so `scalerl.fit.curves.curve.fit_curve` reports it as `collapsed`, with its peak, and fits
only the points up to the peak.

Rule (all on the points the fit would use, sorted by compute), read against the curve's own
noise (`scalerl.fit.curves.noise`: sd from second differences, window w = `smoothing_window`: 3 for
a clean eval curve, up to a fifth of the points for a per-step training reward):
- peak: the largest running mean over w points (a raw maximum, or a 3-point mean of a noisy
  log, is a lucky step: on rewards of 8 rollouts per step it overshoots by 0.2 or more);
  the peak point is the centre of that window; final: the mean of the last w points;
- collapsed when peak > R0, the drop peak - final is at least `drop_fraction` of the gain
  peak - R0, and the drop exceeds 3 noise standard deviations of a difference of two
  w-point means (3 sd sqrt(2 / w)).

Deliberately left out: recovery after a collapse (a second rise) and change-point models.
"""

from __future__ import annotations

import numpy as np

from scalerl.fit.curves.noise import noise_sd, running_mean, smoothing_window

__all__ = ["detect_collapse", "MIN_COLLAPSE_POINTS"]

MIN_COLLAPSE_POINTS = 6  # a peak and a fall of 3-point means need at least this many points


def detect_collapse(compute, reward, r0: float, drop_fraction: float) -> dict | None:
    """None if the curve did not collapse, else {peak_compute, peak_reward (the smoothed
    peak; also peak_smoothed), peak_index (into the sorted points), final_reward, drop,
    drop_fraction, noise_sd, window}."""
    c = np.asarray(compute, dtype=float)
    y = np.asarray(reward, dtype=float)
    if y.size < MIN_COLLAPSE_POINTS:
        return None
    window = smoothing_window(y)
    smooth = running_mean(y, window)  # [N - w + 1], entry k centred on point k + w // 2
    k = int(np.argmax(smooth))
    peak = float(smooth[k])
    final = float(y[-window:].mean())
    gain, drop = peak - r0, peak - final
    sd = noise_sd(y)
    if gain <= 0 or drop < drop_fraction * gain or drop <= 3.0 * sd * np.sqrt(2.0 / window):
        return None
    peak_index = k + window // 2
    return {"peak_compute": float(c[peak_index]), "peak_reward": peak, "peak_smoothed": peak,
            "peak_index": peak_index, "final_reward": final, "drop": drop,
            "drop_fraction": drop / gain, "noise_sd": sd, "window": window}
