"""Forecast across scale in the report and in `scalerl across`: can the sweep's smaller runs
predict its larger ones, and what would the next size up reach?

`across_markdown(records, by, sizes)` is the report's "Forecast across scale" section. For each
scale axis among `by` with at least two values (`model`: the parameter count from `sizes`, the
report's `--size MODEL=...`, else a size the model's name states; `gen_len`: the length
itself), every other `by` column held fixed (task, recipe, the other axis, ...), it runs
`scalerl.fit.forecast.across.predict_across` (docs/design.md, "Forecast across scale") on the
points of the fit.json records:

- leave-largest-out: the run of the largest value, predicted from the smaller ones to its
  final compute, from its measured base score (its compute-0 eval: evaluating a base model is
  cheap), beside what it reached; the naive forecast is the last eval of the largest smaller
  run ("same as the next size down"). The laws need three distinct values each, so this needs
  four values along the axis;
- next size up, a `scalerl plan`-style line: the predicted A of a run one step beyond the
  largest value, the step being the sweep's own ratio between consecutive values (geometric
  mean: (largest / smallest)^(1 / (values - 1))), from all values; its final at the compute the
  sweep's schedule would give it (the runs' final computes extrapolated log-linearly in size:
  FLOPs grow with the model, a step axis stays put), with the base score from the law. Needs
  three values.
Refusals are stated with `predict_across`'s reason (how many values each law has), and every
run a law left out is listed with why (its own fit did not determine the parameter).

Each record's points (compute, reward; the compute-0 point is the base model) are refitted by
`predict_across` with the records' `FitConfig` (the sweep's; binomial weighting becomes none:
a fit.json keeps no sample counts). `estimate_lines(prediction, names)` is the per-run table
that `scalerl across` prints, `law_warnings(prediction)` the warnings that are not one run's.

Deliberately left out: a figure, correlations across tasks, and axes other than model size and
generation length (a recipe is not a scale).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from scalerl.config import ConfigError
from scalerl.fit.curves.sigmoid import FitConfig
from scalerl.fit.forecast.across import AXES, MIN_SIZES, predict_across
from scalerl.fit.forecast.predict import Prediction
from scalerl.fit.readers.sizes import format_size, size_in_name

__all__ = ["across_markdown", "estimate_lines", "law_warnings", "next_size_up", "AXIS_OF"]

AXIS_OF = {"model": "size", "gen_len": "gen_len"}  # report column -> predict_across axis
_UNIT = {"model": "parameters", "gen_len": "tokens"}


def _value(record: Mapping, key: str):
    return record.get("group", {}).get(key, record.get("meta", {}).get(key))


def _num(v: float, fmt: str = ".3f") -> str:
    return "–" if v is None or not np.isfinite(v) else format(v, fmt)


def _interval(v: float, lo: float, hi: float, fmt: str = ".3f") -> str:
    if not np.isfinite(v):
        return "–"
    text = format(v, fmt)
    return text + (f" [{lo:{fmt}}, {hi:{fmt}}]" if np.isfinite(lo) and np.isfinite(hi) else "")


def _reason(pred: Prediction) -> str:
    """The status in words: 'ok', or 'refused: <why>'."""
    if pred.status == "ok":
        return "ok"
    why = pred.warnings[0].removeprefix("no forecast: ") if pred.warnings else pred.status
    return f"refused: {why}"


def law_warnings(pred: Prediction) -> list[str]:
    """The warnings of a forecast but the refusal's reason (`pred.status` says it) and each
    run's own (`estimate_lines` lists them per run)."""
    word = AXES[(pred.params or {}).get("axis", "size")]
    runs = {f"{word} {e['size']:.4g}: {e['reason']}" for e in (pred.params or {}).get("runs", ())}
    rest = pred.warnings[1:] if pred.status != "ok" else pred.warnings
    return [w for w in rest if w not in runs]


def next_size_up(values: Sequence[float]) -> tuple[float, float]:
    """(next value, ratio): the largest value times the geometric mean ratio between
    consecutive values of the sweep (its distinct `values`, two or more)."""
    v = sorted(set(float(x) for x in values))
    ratio = (v[-1] / v[0]) ** (1.0 / (len(v) - 1))
    return v[-1] * ratio, ratio


def _config(records: Sequence[Mapping]) -> FitConfig:
    """The FitConfig of the records (the sweep's), known fields only; binomial -> none."""
    fields = {f.name for f in dataclasses.fields(FitConfig)}
    data = {k: v for k, v in (records[0].get("config") or {}).items() if k in fields}
    if data.get("weighting") == "binomial":
        data["weighting"] = "none"
    try:
        return FitConfig.from_dict(data)
    except ConfigError:
        return FitConfig()


def _points(record: Mapping) -> tuple[np.ndarray, np.ndarray]:
    points = record["points"]
    return np.asarray(points["compute"], float), np.asarray(points["reward"], float)


def _base_score(records: Sequence[Mapping]) -> float | None:
    """Mean compute-0 eval of `records` (the base model), None when none has one."""
    scores = [y[c == 0].mean() for c, y in map(_points, records) if (c == 0).any()]
    return float(np.mean(scores)) if scores else None


def _last(records: Sequence[Mapping]) -> float:
    return float(np.mean([_points(r)[1][-1] for r in records]))


def _final_compute(runs: Sequence[tuple[float, Mapping]], target: float) -> float:
    """The compute the sweep's schedule gives a run of `target`: log final compute linear in
    log size over the runs (a constant with one size)."""
    x = np.log([s for s, _ in runs])
    y = np.log([_points(r)[0].max() for _, r in runs])
    if np.unique(x).size < 2:
        return float(np.exp(y.mean()))
    slope, icpt = np.polyfit(x, y, 1)
    return float(np.exp(icpt + slope * np.log(target)))


def estimate_lines(pred: Prediction, names: Sequence[str], axis: str = "size") -> list[str]:
    """Text table of the per-run estimates behind `pred` (one line per run, in the order the
    runs were given; `names` theirs): size, points, A, B, C_mid, R0, the laws it entered and
    why it left the others."""
    word = "length" if axis == "gen_len" else "size"
    header = ["run", word, "points", "A", "B", "C_mid", "R0", "laws", "note"]
    rows = []
    for name, e in zip(names, (pred.params or {}).get("runs", [])):
        laws = [u for u in ("A", "C_mid", "B") if u in e["uses"]]
        rows.append([name, format_size(e["size"]), str(e["n_points"]), _num(e["A"]),
                     _num(e["B"], ".2f"), _num(e["C_mid"], ".4g"), _num(e["R0"]),
                     ", ".join(laws) or "none", e["reason"] or ""])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip()
            for line in [header, *rows]]


def _plain(value) -> str:
    """64.0 (a pandas upcast) -> '64'."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _position(axis: str, value, sizes: Mapping[str, float]) -> float | None:
    if axis == "gen_len":
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return number if math.isfinite(number) and number > 0 else None
    return sizes.get(str(value), size_in_name(str(value)))


def _axis_section(axis: str, records: Sequence[Mapping], by: Sequence[str],
                  sizes: Mapping[str, float]) -> list[str]:
    values = list(dict.fromkeys(_value(r, axis) for r in records if _value(r, axis) is not None))
    if len(values) < 2:
        return []
    pos = {str(v): _position(axis, v, sizes) for v in values}
    unknown = [str(v) for v in values if pos[str(v)] is None]
    if unknown:
        return ["", f"### {axis}", "", f"No forecast: the size of {', '.join(unknown)} is not "
                "known. Give each model's parameters: `scalerl report --size MODEL=0.6B` or "
                "`--size MODEL=MODEL_DIR` (the workflow passes each base model directory)."]
    values.sort(key=lambda v: pos[str(v)])
    distinct = sorted(set(pos.values()))
    nxt, ratio = next_size_up(distinct)
    unit, kind = _UNIT[axis], AXIS_OF[axis]
    label = {str(v): f"{v} ({format_size(pos[str(v)])})" if axis == "model" else _plain(v)
             for v in values}
    held = [k for k in by if k != axis]
    groups: dict[tuple, list[Mapping]] = {}
    for r in records:
        if _value(r, axis) is not None:
            groups.setdefault(tuple(str(_value(r, k)) for k in held), []).append(r)
    largest = label[str(values[-1])]
    level = f"{_config(records).confidence:.0%}"
    table = ["| " + " | ".join([*held, f"predicted final [{level}, one eval]", "reached",
                                "error", f"naive ({values[-2]})", "naive error",
                                f"A [{level}]", "status"]) + " |",
             "|" + "---|" * (len(held) + 7)]
    plan, notes = [], []
    for key, group in groups.items():
        config = _config(group)
        runs = sorted(((pos[str(_value(r, axis))], r) for r in group), key=lambda t: t[0])
        top = max(s for s, _ in runs)
        target = [r for s, r in runs if s == top]
        smaller = [(s, r) for s, r in runs if s < top]
        where = ", ".join(f"{k}={v}" for k, v in zip(held, key)) or "all"
        final_next = _final_compute(runs, nxt)
        pred = predict_across([(s, *_points(r)) for s, r in runs], nxt, final_next, None,
                              config, axis=kind)
        # each run's own fit is the same in both forecasts: why it left a law, listed once
        notes += [f"- {where}: {label[str(_value(r, axis))]}: {e['reason']}"
                  for (_, r), e in zip(runs, (pred.params or {}).get("runs", []))
                  if e["reason"]]
        compute_col = group[0].get("compute_col") or "compute"
        if pred.status == "ok":
            final_text = _interval(pred.predicted_final, pred.observed_final_lo,
                                   pred.observed_final_hi)
            plan.append(f"- {where}: next {axis} up {format_size(nxt)} {unit}: predicted A "
                        f"{_interval(pred.A, pred.A_lo, pred.A_hi)}, C_mid "
                        f"{_interval(pred.C_mid, pred.C_mid_lo, pred.C_mid_hi, '.3g')}; final "
                        f"{final_text} at {final_next:.3g} {compute_col} (the sweep's "
                        "schedule)")
            notes += [f"- {where}, next {axis} up: {w}" for w in law_warnings(pred)
                      if not w.startswith("R0 of the target")]
        else:
            plan.append(f"- {where}: next {axis} up {format_size(nxt)} {unit}: {_reason(pred)}")
        if not smaller:
            continue
        final = max(_points(r)[0].max() for r in target)
        pred = predict_across([(s, *_points(r)) for s, r in smaller], top, final,
                              _base_score(target), config, axis=kind)
        reached = _last(target)
        naive = _last([r for s, r in smaller if s == smaller[-1][0]])
        table.append("| " + " | ".join([
            *key, _interval(pred.predicted_final, pred.observed_final_lo,
                            pred.observed_final_hi), _num(reached),
            _num(pred.predicted_final - reached, "+.3f"), _num(naive),
            _num(naive - reached, "+.3f"), _interval(pred.A, pred.A_lo, pred.A_hi),
            _reason(pred)]) + " |")
        if pred.status == "ok":
            notes += [f"- {where}, leave-largest-out: {w}" for w in law_warnings(pred)]
    order = " < ".join(label[str(v)] for v in values)
    lines = ["", f"### {axis}: {order}", "",
             f"Leave-largest-out: {largest} predicted from the {len(distinct) - 1} smaller "
             f"{axis} value(s) (the laws need {MIN_SIZES} distinct values each).", "",
             *table, "",
             f"Next {axis} up: {format_size(nxt)} {unit} = {format_size(distinct[-1])} x "
             f"{ratio:.3g}, the sweep's ratio between consecutive {axis} values, predicted "
             f"from all {len(distinct)} (R0 from the law across {axis} values):", "", *plan]
    if notes:
        lines += ["", "Why runs were left out of a law (their own fit does not determine the "
                  "parameter), and other warnings:", "",
                  *dict.fromkeys(notes)]
    return lines


def across_markdown(records: Sequence[Mapping], by: Sequence[str],
                    sizes: Mapping[str, float] | None = None) -> str:
    """The '## Forecast across scale' section ('' when no scale axis varies); see the module
    docstring. `sizes`: {model name: parameters}."""
    lines = []
    for axis in AXIS_OF:
        if axis in by:
            lines += _axis_section(axis, records, by, sizes or {})
    if not lines:
        return ""
    head = ["", "## Forecast across scale", "",
            "Can the smaller runs predict the larger ones? Along each scale axis, everything "
            "else fixed, `scalerl.fit.predict_across` fits laws across the runs (a power law of "
            "the gap 1 - A and of C_mid in size, a shared B; docs/design.md, \"Forecast across "
            "scale\") and predicts a run it did not see: the largest (leave-largest-out, from "
            "its measured base score, against the naive forecast: the next size down's last "
            "eval) and the next size up. error = predicted - reached. A law needs three "
            "distinct values along the axis: a sweep of two values is refused, and "
            "leave-largest-out needs four."]
    return "\n".join(head + lines) + "\n"
