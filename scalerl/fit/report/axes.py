"""Does more scale raise the ceiling? The report's comparison along the sweep's scale axes.

`axes_markdown(df, by, order)` takes the `fits_frame` rows of a report and, for every scale
axis among `by` with at least two values (`model`, `gen_len`), compares the fitted ceiling A
from the smallest to the largest value with all other `by` columns held fixed (task, recipe,
the other axis, ...). The order of an axis comes from `order` (e.g. the sweep's model list,
smallest first); numbers (gen_len) are ordered numerically by default.

Verdict per comparison (`verdict`), with the paper's margin (§2.1: A values within 0.02 are a
tie):
- every fit converged: "yes" when A(largest) − A(smallest) > margin, "no: lower A" when it is
  below −margin, else "no: same A within 0.02";
- a fit did not converge: its A is not determined by the points, so the verdict compares the
  observed final pass rates instead and says so ("A not determined; ... final pass rate").
`basis` says what was compared and why in words a reader can check against the figure: both
A values, or the final pass rates with the reason each flagged fit gives (`flag_reason`: C_mid
at the end of its range means the run had not reached its midpoint, B at its bound a step
between two checkpoints, ...). Each axis ends with one answer per task (how many of its
comparisons say yes, and on what), and the section points at curves.png, where every
compared curve is drawn (an unconverged fit thin and faded, over its data only).

Deliberately left out: significance tests over seeds (the per-cell spread table covers seeds)
and axes other than model and generation length.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pandas as pd

from scalerl.fit.curves.compare import A_MARGIN

__all__ = ["SCALE_AXES", "axes_markdown", "basis", "flag_reason", "verdict"]

SCALE_AXES = ("model", "gen_len")

# (pattern in a fit warning, what it means for the comparison), first match wins
_REASONS = (
    (r"C_mid = \S+ sits on the upper end", "C_mid at the upper end of its range: the run had "
     "not reached its midpoint, so its ceiling is open"),
    (r"C_mid = \S+ sits on the lower end", "C_mid at the lower end of its range: the rise was "
     "over before the first checkpoint"),
    (r"\bB = \S+ sits on the upper end", "B at its bound: a step between two checkpoints, not "
     "a gradual rise"),
    (r"\bB = \S+ sits on the lower end", "B at its lower bound: no curvature to fit"),
    (r"\bA = \S+ sits on the upper end", "A at the upper end of its range: still rising at "
     "the last checkpoint"),
    (r"\bA = \S+ sits on the lower end", "A at the lower end of its range"),
    (r"reward is flat", "no rise in log compute beyond the eval noise"),
    (r"reward is decreasing", "the pass rate falls with compute"),
    (r"is not above R0", "no gain over the base model"),
    (r"polish did not converge", "the least-squares fit did not converge"),
)


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


def flag_reason(row: Mapping) -> str:
    """Why a fit is flagged, in a few words (from its warnings); '' for a clean fit."""
    if row.get("converged") and not row.get("warnings"):
        return ""
    warnings = str(row.get("warnings") or "")
    for pattern, meaning in _REASONS:
        if re.search(pattern, warnings):
            return meaning
    first = warnings.split(" | ")[0].strip()
    return first or "not converged"


def basis(first: Mapping, last: Mapping, names: tuple[str, str]) -> str:
    """What `verdict` compared for this pair and why (`names`: the two axis values)."""
    if first["converged"] and last["converged"]:
        return "A of both fits"
    flagged = [f"{name}: {flag_reason(row)}" for name, row in zip(names, (first, last))
               if not row["converged"]]
    return ("final pass rates at the last checkpoint (same RL steps, not the same compute), "
            "because A is not determined for " + "; ".join(flagged))


def _cell(row: Mapping) -> str:
    final = row.get("observed_final")
    final_text = "–" if pd.isna(final) else f"{final:.3f}"
    a_text = f"A {row['A']:.3f}" if row["converged"] else "A –"
    return f"{a_text}, final {final_text}"


def _answer(results: list[tuple[str, str]]) -> str:
    """One task's answer over its comparisons: [(verdict, compared-on), ...]."""
    yes = sum(v.split(": ")[0] == "yes" or "; yes:" in v for v, _ in results)
    on = sorted({what for _, what in results})
    return f"yes in {yes} of {len(results)} comparison(s) (compared on {' and '.join(on)})"


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
                  "| " + " | ".join([*held, *map(str, values), f"larger {axis}, higher A?",
                                     "compared"]) + " |",
                  "|" + "---|" * (len(held) + len(values) + 2)]
        groups = df.groupby(held, sort=False, dropna=False) if held else [((), df)]
        by_task: dict[str, list[tuple[str, str]]] = {}
        for key, sub in groups:
            key = key if isinstance(key, tuple) else (key,)
            rows = {v: sub[sub[axis] == v] for v in values}
            present = [v for v in values if len(rows[v]) == 1]
            cells = [_cell(rows[v].iloc[0]) if len(rows[v]) == 1 else
                     ("–" if rows[v].empty else f"{len(rows[v])} fits") for v in values]
            if len(present) >= 2:
                first, last = rows[present[0]].iloc[0], rows[present[-1]].iloc[0]
                text = verdict(first, last)
                why = basis(first, last, (str(present[0]), str(present[-1])))
                task = str(first.get("task", "all"))
                by_task.setdefault(task, []).append(
                    (text, "A" if why == "A of both fits" else "final pass rate"))
            else:
                text = "fewer than two single fits to compare"
                why = "–"
            lines.append("| " + " | ".join([*map(str, key), *cells, text, why]) + " |")
        if by_task:
            lines += [""] + [f"- {task}: {_answer(results)}."
                             for task, results in by_task.items()]
    if not lines:
        return ""
    head = ["", "## Does more scale raise the ceiling A?", "",
            "Smallest against largest value of each axis, everything else fixed; A values "
            f"within {A_MARGIN} are a tie (paper §2.1). When a fit did not converge its A is not "
            "determined and the final pass rates are compared instead; the last column says "
            "which, and why. Every compared curve is in curves.png (one panel per task, colour "
            "= model, line style = generation length; an unconverged fit is drawn thin and "
            "faded, over its data only)."]
    return "\n".join(head + lines) + "\n"
