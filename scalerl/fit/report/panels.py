"""Small multiples of fitted curves: one panel per task, colour by model, line style by length.

`plot_panels(records, path, ...)` draws many `fit.json` records (matplotlib Agg, PNG):
- one panel per distinct `panel_by` value (default: task); any other key of `by` that varies
  and is neither the colour nor the style key (recipe, batch, ...) joins the panel key, so a
  panel never mixes two recipes;
- colour by `colour_by` (default: model), ordered smallest first by `order[colour_by]` (the
  sweep's model list) or naturally, on a sequential colour map (darker = larger);
- line style by `style_by` (default: gen_len), solid for the shortest, then dashed, dotted;
- the fitted sigmoid over the points (filled: used by the fit, crosses: below its cutoff),
  extended to `extend` x the largest compute; its band is the pointwise percentile interval
  of the bootstrap replicates (`intervals["draws"]`, at the fit's confidence). A record
  without replicates (an older fit.json) shows its A interval as a bar at the curve's end;
- an unconverged fit is drawn thin and faded over its data only, without band or extension;
- A is written at the right end of each converged curve.
Records sharing every key (seeds) share colour and style. The x axis (compute) is shared by
all panels, the y axis (reward) is per panel (tasks differ in pass rate).

Deliberately left out: interactive output, styling options, a panel per seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from scalerl.fit.curves.sigmoid import sigmoid  # noqa: E402
from scalerl.utils.io import atomic_path  # noqa: E402

__all__ = ["plot_panels", "curve_band", "STYLES"]

STYLES = ("-", "--", ":", "-.")  # line style per style_by value, shortest first
N_X = 300  # points per drawn curve


def _value(record: dict, key: str):
    return record.get("group", {}).get(key, record.get("meta", {}).get(key))


def _natural(value):
    """Numbers by value (gen_len 56 before 128), then strings, then missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (2, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def _ordered(values, given: Sequence | None) -> list:
    """Distinct values, those named in `given` first in its order, the rest naturally."""
    distinct = list(dict.fromkeys(values))
    given = [str(v) for v in (given or ())]
    ranked = sorted(distinct, key=lambda v: (given.index(str(v)) if str(v) in given
                                            else len(given), _natural(v)))
    return ranked


def curve_band(record: dict, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Pointwise (lo, hi) of the bootstrap replicates' curves at `xs`; None without draws."""
    intervals = record.get("intervals") or {}
    draws = np.asarray(intervals.get("draws") or [], float)  # [n_ok, (A, B, C_mid)]
    if draws.ndim != 2 or draws.shape[0] < 2 or draws.shape[1] != 3:
        return None
    alpha = (1.0 - float(intervals.get("confidence", 0.95))) / 2.0
    curves = sigmoid(xs[None, :], draws[:, :1], draws[:, 1:2], draws[:, 2:3],
                     record["R0"])  # [n_ok, X]
    lo, hi = np.quantile(curves, [alpha, 1.0 - alpha], axis=0)  # [X] each
    return lo, hi


def _grid(panels: list[tuple], main: list[int], ncols: int) -> dict[tuple, tuple[int, int]]:
    """(row, col) of each panel: a column per `main` value (task) and a row per value of the
    other panel keys (recipe, ...) when there are any; else `ncols` panels to a row."""
    def part(panel, idx):
        return tuple(panel[i] for i in idx)

    rest = [i for i in range(len(panels[0])) if i not in main]
    if not rest:
        ncols = max(1, min(ncols, len(panels)))
        return {p: (i // ncols, i % ncols) for i, p in enumerate(panels)}
    cols = list(dict.fromkeys(part(p, main) for p in panels))
    rows = list(dict.fromkeys(part(p, rest) for p in panels))
    return {p: (rows.index(part(p, rest)), cols.index(part(p, main))) for p in panels}


def _colours(n: int) -> list:
    cmap = plt.get_cmap("plasma")
    if n == 1:
        return [cmap(0.1)]
    return [cmap(0.72 - 0.62 * i / (n - 1)) for i in range(n)]  # light (small) -> dark (large)


def _label(key: str, value) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{key}={value}"


def _draw(ax, record: dict, colour, style: str, extend: float, shown: list[float]) -> None:
    pts = record["points"]
    c = np.asarray(pts["compute"], float)  # [N]
    y = np.asarray(pts["reward"], float)  # [N]
    status = np.asarray(pts["status"])
    used = status == "used"
    ax.scatter(c[used], y[used], s=14, color=colour, alpha=0.75, zorder=3, linewidths=0)
    ax.scatter(c[~used & (c > 0)], y[~used & (c > 0)], s=16, marker="x", color=colour,
               alpha=0.5, zorder=3, linewidths=1)
    shown += [float(y.min()), float(y.max())]
    pos = c[c > 0]
    if pos.size == 0:
        return
    converged = bool(record.get("converged", True))
    hi_x = pos.max() * (extend if converged else 1.0)
    xs = np.geomspace(pos.min() * 0.8, hi_x, N_X)  # [X]
    a, b, c_mid, r0 = record["A"], record["B"], record["C_mid"], record["R0"]
    curve = sigmoid(xs, a, b, c_mid, r0)  # [X]
    if not converged:
        ax.plot(xs, curve, color=colour, ls=style, lw=0.9, alpha=0.45)
        ax.annotate("not converged", (xs[-1], curve[-1]), xytext=(3, 0),
                    textcoords="offset points", fontsize=6, color=colour, va="center")
        return
    ax.plot(xs, curve, color=colour, ls=style, lw=1.8, zorder=2)
    band = curve_band(record, xs)
    if band is not None:
        ax.fill_between(xs, band[0], band[1], color=colour, alpha=0.16, lw=0, zorder=1)
        shown += [float(np.quantile(band[0], 0.05)), float(np.quantile(band[1], 0.95))]
    else:
        lo, hi = ((record.get("intervals") or {}).get("A") or [None, None])[:2]
        if lo is not None and hi is not None:
            # a bar, not yerr: a percentile interval need not contain the point estimate
            ax.plot([xs[-1]] * 2, [lo, hi], color=colour, lw=1.2, marker="_", ms=6, zorder=2)
            shown += [float(lo), float(hi)]
    shown.append(float(a))
    ax.annotate(f"A {a:.3f}", (xs[-1], curve[-1]), xytext=(3, 0), textcoords="offset points",
                fontsize=6.5, color=colour, va="center")


def plot_panels(records: Sequence[dict], path: str | Path, *, by: Sequence[str] | None = None,
                panel_by: Sequence[str] = ("task",), colour_by: str = "model",
                style_by: str = "gen_len", order: dict[str, Sequence] | None = None,
                extend: float = 4.0, title: str = "", ncols: int = 3) -> dict[str, tuple]:
    """Small multiples of `records` as a PNG at `path`; see the module docstring.

    Returns {panel title: (row, column)}, the layout drawn."""
    if not records:
        raise ValueError("plot_panels needs at least one fit record")
    order = order or {}
    keys = list(dict.fromkeys([*(by or ()), *panel_by, colour_by, style_by]))
    present = [k for k in keys if any(_value(r, k) is not None for r in records)]
    varying = [k for k in present if len({str(_value(r, k)) for r in records}) > 1]
    panel_keys = [k for k in present if k in panel_by
                  or (k in varying and k not in (colour_by, style_by))]
    constant = [_label(k, _value(records[0], k)) for k in present
                if k not in varying and k not in panel_keys]
    panels = _ordered([tuple(str(_value(r, k)) for k in panel_keys) for r in records], None)
    grid = _grid(panels, [i for i, k in enumerate(panel_keys) if k in panel_by], ncols)
    colour_values = _ordered([_value(r, colour_by) for r in records], order.get(colour_by))
    style_values = _ordered([_value(r, style_by) for r in records], order.get(style_by))
    colours = dict(zip(colour_values, _colours(len(colour_values))))
    styles = {v: STYLES[i % len(STYLES)] for i, v in enumerate(style_values)}

    nrows = max(row for row, _ in grid.values()) + 1
    ncols = max(col for _, col in grid.values()) + 1
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.3 * ncols, 3.3 * nrows), sharex=True,
                             squeeze=False)
    layout: dict[str, tuple] = {}
    for panel in panels:
        row, col = grid[panel]
        ax = axes[row][col]
        shown: list[float] = []  # y values the panel must show
        members = [r for r in records
                   if tuple(str(_value(r, k)) for k in panel_keys) == panel]
        for r in members:
            _draw(ax, r, colours[_value(r, colour_by)], styles[_value(r, style_by)], extend,
                  shown)
        pad = 0.08 * max(max(shown) - min(shown), 0.05)
        ax.set_ylim(min(shown) - pad, max(shown) + pad)
        ax.set_xscale("log")
        ax.grid(True, which="major", alpha=0.3)
        ax.grid(True, which="minor", alpha=0.1)
        name = ", ".join(_label(k, v) for k, v in zip(panel_keys, panel)) or "all fits"
        ax.set_title(name, fontsize=9.5)
        layout[name] = (row, col)
        ax.tick_params(labelsize=7.5)
        if col == 0 or (row, col - 1) not in grid.values():
            ax.set_ylabel(records[0].get("reward_col", "reward"), fontsize=8.5)
    pos = np.concatenate([np.asarray(r["points"]["compute"], float) for r in records])
    pos = pos[pos > 0]
    if pos.size:  # room on the right for the "A 0.512" labels
        axes[0][0].set_xlim(pos.min() * 0.6, pos.max() * extend * 3.0)
    used_cells = set(grid.values())
    for row in range(nrows):
        for col in range(ncols):
            if (row, col) not in used_cells:
                axes[row][col].set_visible(False)
            elif (row + 1, col) not in used_cells:  # the lowest panel of its column
                axes[row][col].set_xlabel(records[0].get("compute_col", "compute"),
                                          fontsize=8.5)
                axes[row][col].xaxis.set_tick_params(labelbottom=True)

    handles = [Line2D([], [], color=colours[v], lw=2.2, label=_label(colour_by, v))
               for v in colour_values if v is not None]
    handles += [Line2D([], [], color="0.25", ls=styles[v], lw=1.6, label=_label(style_by, v))
                for v in style_values if v is not None]
    handles += [Patch(color="0.5", alpha=0.3, label="bootstrap band"),
                Line2D([], [], color="0.4", marker="o", ls="none", ms=4, label="points fitted"),
                Line2D([], [], color="0.4", marker="x", ls="none", ms=4,
                       label="below cutoff"),
                Line2D([], [], color="0.4", lw=0.9, alpha=0.45, label="not converged")]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.93), fontsize=7.5,
               frameon=False)
    default = "fitted curves" + (f" ({', '.join(constant)})" if constant else "")
    fig.suptitle(title or default, fontsize=10.5)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return layout
