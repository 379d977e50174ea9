"""PNG plots of fitted curves, drawn from `fit.json` records alone (matplotlib Agg, no display).

`plot_curve(record, path)`: one run. Points used by the fit (filled circles) and excluded ones
(below the cutoff: grey crosses); the fitted sigmoid extended to `extend` x the largest compute;
the asymptote A (horizontal dashed line) and R0 (dotted); C_mid marked on the curve; the power
law (dashed); the extrapolation check's early-data fit (dash-dot) with its cut marked. Log x.

`plot_combined(records, path, by)`: many runs on one axis, one colour per group label (e.g.
model size, generation length or recipe); records sharing a label (seeds) share the colour.
Labels name only the `by` keys that vary; the constant ones go into the title.

`plot_forecasts(curves, predictions, path)`: runs followed by `scalerl watch`, one colour
each: the points so far, the fitted sigmoid over them (solid) and on to the final compute
(dashed), the predicted final with its interval (error bar) at the final compute. Linear x
(steps, hours), since a run is read from its start.

Deliberately left out: interactive output and styling options.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from scalerl.fit.curves.powerlaw import power_law  # noqa: E402
from scalerl.fit.curves.sigmoid import sigmoid  # noqa: E402
from scalerl.utils.io import atomic_path  # noqa: E402

__all__ = ["plot_curve", "plot_combined", "record_label", "plot_forecasts"]


def _points(record: dict):
    pts = record["points"]
    c = np.asarray(pts["compute"], float)
    y = np.asarray(pts["reward"], float)
    status = np.asarray(pts["status"])
    return c, y, status


def _x_range(c: np.ndarray, extend: float) -> np.ndarray:
    pos = c[c > 0]
    return np.geomspace(pos.min() * 0.8, pos.max() * extend, 400)


def _save(fig, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def record_label(record: dict, by: Sequence[str] | None = None) -> str:
    """'model=tiny-s, gen_len=64' from the record's group and meta (by: which keys)."""
    values = {**record.get("meta", {}), **record.get("group", {})}
    keys = list(by) if by else list(record.get("group", {}))
    parts = [f"{k}={values[k]}" for k in keys if values.get(k) is not None]
    return ", ".join(parts) or record.get("name", "run")


def plot_curve(record: dict, path: str | Path, *, title: str | None = None,
               extend: float = 4.0) -> None:
    c, y, status = _points(record)
    a, b, c_mid, r0 = record["A"], record["B"], record["C_mid"], record["R0"]
    xs = _x_range(c, extend)  # [400]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    used = status == "used"
    ax.scatter(c[used], y[used], s=18, color="C0", label=f"points used ({used.sum()})", zorder=3)
    cut = status == "cutoff"
    if cut.any():
        ax.scatter(c[cut], y[cut], s=22, marker="x", color="0.55",
                   label=f"excluded < cutoff {record['cutoff']:.3g} ({cut.sum()})", zorder=3)
    ax.plot(xs, sigmoid(xs, a, b, c_mid, r0), color="C1", lw=2,
            label=f"sigmoid A={a:.3f} B={b:.2f} C_mid={c_mid:.3g}")
    ax.axhline(a, color="C1", ls="--", lw=1, label="asymptote A")
    ax.axhline(r0, color="0.4", ls=":", lw=1, label=f"R0={r0:.3f}")
    ax.plot([c_mid], [(a + r0) / 2], marker="D", color="C3", ms=7, ls="none",
            label="C_mid (half the gain)", zorder=4)
    ax.axvline(c_mid, color="C3", ls=":", lw=0.8)
    pl = record.get("power_law")
    if pl and pl.get("D", 0) > 0:
        ax.plot(xs, power_law(xs, pl["A"], pl["D"], pl["B"]), color="C2", ls="--", lw=1.2,
                label=f"power law A={pl['A']:.3f} B={pl['B']:.2f}")
    ex = record.get("extrapolation") or {}
    if ex.get("A") is not None:
        ax.plot(xs, sigmoid(xs, ex["A"], ex["B"], ex["C_mid"], r0), color="C4", ls="-.", lw=1,
                label=f"fit on compute <= {ex['fraction']:g} x max "
                      f"(max err {ex['max_abs_error']:.3f})")
        ax.axvline(ex["fraction"] * c.max(), color="C4", ls="-.", lw=0.6)
    ax.set_xscale("log")
    ax.set_xlabel(record.get("compute_col", "compute"))
    ax.set_ylabel(record.get("reward_col", "reward"))
    flag = "" if record.get("converged", True) else "  [NOT CONVERGED: see warnings]"
    ax.set_title((title or record_label(record) or "fit") + flag, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    _save(fig, path)


def plot_combined(records: Sequence[dict], path: str | Path, *, by: Sequence[str] | None = None,
                  extend: float = 4.0, title: str = "") -> None:
    """All curves on one axis; one colour per distinct `record_label(record, by)`."""
    if not records:
        raise ValueError("plot_combined needs at least one fit record")
    keys = list(by) if by else list(records[0].get("group", {}))
    values = [{**r.get("meta", {}), **r.get("group", {})} for r in records]
    varying = [k for k in keys if len({str(v.get(k)) for v in values}) > 1]
    constant = [f"{k}={values[0][k]}" for k in keys if k not in varying
                and values[0].get(k) is not None]
    labels = [record_label(r, varying or keys) for r in records]
    palette = {lab: f"C{i % 10}" for i, lab in enumerate(dict.fromkeys(labels))}
    fig, ax = plt.subplots(figsize=(8, 5))
    seen = set()
    shown: list[float] = []  # y values the axis must show: points and converged asymptotes
    for record, label in zip(records, labels):
        c, y, status = _points(record)
        shown += [float(np.min(y)), float(np.max(y))]
        colour = palette[label]
        used = status == "used"
        ax.scatter(c[used], y[used], s=10, color=colour, alpha=0.6)
        ax.scatter(c[status == "cutoff"], y[status == "cutoff"], s=10, marker="x",
                   color=colour, alpha=0.4)
        converged = record.get("converged", True)
        # An unconverged fit (flat or falling data, a parameter on its bound) says nothing
        # beyond its points: drawn dotted over the data only, without its asymptote.
        xs = _x_range(c, extend if converged else 1.0)
        line_label = None if label in seen else (
            f"{label}: A={record['A']:.3f}" if converged else f"{label}: not converged")
        seen.add(label)
        ax.plot(xs, sigmoid(xs, record["A"], record["B"], record["C_mid"], record["R0"]),
                color=colour, lw=1.8 if converged else 1.0, ls="-" if converged else ":",
                label=line_label)
        if converged:
            ax.axhline(record["A"], color=colour, ls="--", lw=0.7, alpha=0.7)
            shown.append(float(record["A"]))
    pad = 0.05 * max(max(shown) - min(shown), 0.1)
    ax.set_ylim(min(shown) - pad, max(shown) + pad)
    ax.set_xscale("log")
    ax.set_xlabel(records[0].get("compute_col", "compute"))
    ax.set_ylabel(records[0].get("reward_col", "reward"))
    default = "curves by " + ", ".join(varying) if varying else "fitted curves"
    if constant and varying:
        default += " (" + ", ".join(constant) + ")"
    ax.set_title(title or default, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    # Beside the axes, so it never hides points (a sweep has many curves).
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    _save(fig, path)


def plot_forecasts(curves: Sequence, predictions: Sequence[dict], path: str | Path, *,
                   xlabel: str = "compute", ylabel: str = "reward", title: str = "") -> None:
    """Each run's points and forecast. `curves`: objects with run, task, compute [N], reward
    [N]; `predictions`: {run, task, final_compute, predicted_final, predicted_final_lo,
    predicted_final_hi, params (sigmoid A, B, C_mid, R0, or None), verdict}."""
    by_key = {(p["run"], p["task"]): p for p in predictions}
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, curve in enumerate(curves):
        colour = f"C{i % 10}"
        pred = by_key.get((curve.run, curve.task), {})
        label = curve.run if len({c.task for c in curves}) == 1 else f"{curve.run} {curve.task}"
        ax.scatter(curve.compute, curve.reward, s=8, color=colour, alpha=0.5)
        params, final = pred.get("params"), pred.get("final_compute")
        if params and final:
            c_last = float(np.max(curve.compute))
            seen = np.linspace(max(float(np.min(curve.compute)), 1e-12), c_last, 200)  # [200]
            ahead = np.linspace(c_last, max(final, c_last), 100)  # [100]
            args = (params["A"], params["B"], params["C_mid"], params["R0"])
            ax.plot(seen, sigmoid(seen, *args), color=colour, lw=1.8)
            ax.plot(ahead, sigmoid(ahead, *args), color=colour, lw=1.4, ls="--")
        value = pred.get("predicted_final", float("nan"))
        if final and np.isfinite(value):
            lo, hi = pred.get("predicted_final_lo"), pred.get("predicted_final_hi")
            err = None if lo is None or not np.isfinite(lo) else [[value - lo], [hi - value]]
            ax.errorbar([final], [value], yerr=err, color=colour, marker="o", ms=5, capsize=4)
            label += f": final {value:.3f}"
        if pred.get("verdict"):
            label += f" ({pred['verdict']})"
        ax.plot([], [], color=colour, lw=1.8, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title or "forecasts: points, fitted sigmoid (solid), forecast (dashed), "
                 "predicted final [95%]", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    _save(fig, path)
