"""Does more scale raise the ceiling? The report's comparison along the sweep's scale axes.

`axes_markdown(df, by, order)` takes the `fits_frame` rows of a report and, for every scale
axis among `by` with at least two values (`model`, `gen_len`), compares the fitted ceiling A
from the smallest to the largest value with all other `by` columns held fixed (task, recipe,
the other axis, ...). The order of an axis comes from `order` (e.g. the sweep's model list,
smallest first); numbers (gen_len) are ordered numerically by default.

Verdict per comparison, with the paper's margin (§2.1: A values within 0.02 are a tie):
- every fit converged: "yes" when A(largest) − A(smallest) > margin, "no: lower A" when it is
  below −margin, else "no: same A within 0.02";
- a fit did not converge: its A is not determined by the points, so the verdict compares the
  observed final pass rates instead and says so ("not determined; final pass rate: ...").

Deliberately left out: significance tests over seeds (the per-cell spread table covers seeds)
and axes other than model and generation length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from scalerl.fit.compare import A_MARGIN

__all__ = ["SCALE_AXES", "axes_markdown", "verdict"]

SCALE_AXES = ("model", "gen_len")


def _ordered(values: Sequence, given: Sequence | None) -> list:
    """Values of an axis smallest first: the given order, else numeric, else as found."""
    if given:
        rank = {str(v): i for i, v in enumerate(given)}
        return sorted(values, key=lambda v: (rank.get(str(v), len(rank)), str(v)))
    if all(isinstance(v, int | float) for v in values):
        return sorted(values)
    return list(values)


def verdict(first: Mapping, last: Mapping, margin: float = A_MARGIN) -> str:
    """Compare the smallest-scale fit `first` with the largest-scale fit `last` (rows with A,
    converged and observed_final)."""
    if first["converged"] and last["converged"]:
        delta, what = last["A"] - first["A"], "A"
    else:
        f, g = first.get("observed_final"), last.get("observed_final")
        if pd.isna(f) or pd.isna(g):  # None or NaN
            return "not determined (a fit did not converge, no final pass rate)"
        delta, what = g - f, "final pass rate"
    if delta > margin:
        text = f"yes: {what} +{delta:.3f}"
    elif delta < -margin:
        text = f"no: lower {what} ({delta:+.3f})"
    else:
        text = f"no: same {what} within {margin} ({delta:+.3f})"
    if what != "A":
        text = f"A not determined (fit not converged); {text}"
    return text


def _cell(row: Mapping) -> str:
    final = row.get("observed_final")
    final_text = "–" if pd.isna(final) else f"{final:.3f}"
    a_text = f"A {row['A']:.3f}" if row["converged"] else "A –"
    return f"{a_text}, final {final_text}"


def axes_markdown(df: pd.DataFrame, by: Sequence[str],
                  order: Mapping[str, Sequence] | None = None) -> str:
    """The '## Does more scale raise the ceiling A?' section ('' when no axis varies)."""
    order = order or {}
    lines: list[str] = []
    for axis in SCALE_AXES:
        if axis not in by or df[axis].nunique() < 2:
            continue
        values = _ordered(list(dict.fromkeys(df[axis].tolist())), order.get(axis))
        held = [k for k in by if k != axis]
        lines += ["", f"### {axis}: {' < '.join(map(str, values))}", "",
                  "| " + " | ".join([*held, *map(str, values), f"larger {axis}, higher A?"])
                  + " |", "|" + "---|" * (len(held) + len(values) + 1)]
        groups = df.groupby(held, sort=False, dropna=False) if held else [((), df)]
        for key, sub in groups:
            key = key if isinstance(key, tuple) else (key,)
            rows = {v: sub[sub[axis] == v] for v in values}
            present = [v for v in values if len(rows[v]) == 1]
            cells = [_cell(rows[v].iloc[0]) if len(rows[v]) == 1 else
                     ("–" if rows[v].empty else f"{len(rows[v])} fits") for v in values]
            if len(present) >= 2:
                text = verdict(rows[present[0]].iloc[0], rows[present[-1]].iloc[0])
            else:
                text = "fewer than two single fits to compare"
            lines.append("| " + " | ".join([*map(str, key), *cells, text]) + " |")
    if not lines:
        return ""
    head = ["", "## Does more scale raise the ceiling A?", "",
            "Smallest against largest value of each axis, everything else fixed; A values "
            f"within {A_MARGIN} are a tie (paper §2.1). When a fit did not converge its A is not "
            "determined and the final pass rates are compared instead."]
    return "\n".join(head + lines) + "\n"
