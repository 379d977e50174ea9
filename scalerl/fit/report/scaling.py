"""The scaling report: many `fit.json` records -> one table, Markdown and a combined plot.

`collect_records(paths)` reads fit.json files (a directory is searched recursively for files
named `fit.json`). `fits_frame(records, by)` flattens them to one row per fit: the `by` columns
(taken from each record's `group`, then `meta`), A/B/C_mid with their bootstrap intervals
(`*_lo`, `*_hi`), R0, R², SSE, point counts, the extrapolation errors, the power law, the budget
to 90 % of the gain, `converged` and the warnings. `write_report(records, out, by, order)`
writes `scaling.parquet`, `scaling.md` (with the comparison along the scale axes of
`scalerl.fit.report.axes`) and `curves.png` atomically (small multiples,
`scalerl.fit.report.panels`: a panel per task, colour by model, line style by gen_len, bootstrap
bands). Fits sharing all `by` values (seeds) are also summarised per cell with the spread of A
against the paper's 0.02 margin. With `predictions` (rows of predictions.parquet, `scalerl
predict`) the report adds a prediction backtest (`scalerl.fit.forecast.backtest`, shown by
`scalerl.fit.report.backtest`): a section of scaling.md and backtest.png; with `racing` the
racing section (`scalerl.fit.report.racing`), with `steps` the mismatch section
(`scalerl.fit.report.mismatch`). Every report along a scale axis gets the forecast across
scale (`scalerl.fit.report.across`: the largest value predicted from the smaller ones, the next
size up), with model sizes from `sizes`.

Deliberately left out: re-fitting (the report trusts the records) and HTML output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from scalerl.fit.curves.compare import A_MARGIN
from scalerl.fit.forecast.backtest import backtest_table, finals_from_records
from scalerl.fit.report.across import across_markdown
from scalerl.fit.report.axes import axes_markdown
from scalerl.fit.report.backtest import backtest_markdown, plot_backtest
from scalerl.fit.report.mismatch import mismatch_frame, mismatch_markdown, plot_mismatch
from scalerl.fit.report.panels import plot_panels
from scalerl.fit.report.plots import record_label
from scalerl.fit.report.racing import racing_markdown
from scalerl.utils.io import atomic_path, write_text_atomic

__all__ = ["collect_records", "fits_frame", "fits_markdown", "write_report", "DEFAULT_BY"]

DEFAULT_BY = ("model", "gen_len", "recipe", "task")
PARAMS = ("A", "B", "C_mid")


def collect_records(paths: Sequence[str | Path]) -> list[dict]:
    """Load fit.json records from files or directories (searched recursively), sorted by path."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.rglob("fit.json")))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p} does not exist")
    if not files:
        raise FileNotFoundError(f"no fit.json found under {', '.join(map(str, paths))}")
    records = []
    for f in sorted(set(files)):
        try:
            record = json.loads(f.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{f}: not valid JSON ({err})") from None
        missing = [k for k in (*PARAMS, "R0", "points") if k not in record]
        if missing:
            raise ValueError(f"{f}: not a fit.json record (missing {', '.join(missing)})")
        record["path"] = str(f)
        records.append(record)
    return records


def _value(record: dict, key: str):
    return record.get("group", {}).get(key, record.get("meta", {}).get(key))


def fits_frame(records: Sequence[dict], by: Sequence[str] = ()) -> pd.DataFrame:
    """One row per fit record; see the module docstring for the columns."""
    rows = []
    for r in records:
        row = {k: _value(r, k) for k in by}
        for p in PARAMS:
            row[p] = r[p]
            lo, hi = (r.get("intervals") or {}).get(p, [None, None])
            row[f"{p}_lo"], row[f"{p}_hi"] = lo, hi
        ex = r.get("extrapolation") or {}
        pl = r.get("power_law") or {}
        row.update(
            R0=r["R0"], r2=r.get("r2"), sse=r.get("sse"), n_points=r.get("n_points"),
            n_excluded=r.get("n_excluded"), cutoff=r.get("cutoff"),
            converged=bool(r.get("converged", False)), status=r.get("status", "ok"),
            extrap_fraction=ex.get("fraction"), extrap_max_abs_error=ex.get("max_abs_error"),
            extrap_mean_abs_error=ex.get("mean_abs_error"),
            predicted_final=ex.get("predicted_final"), observed_final=ex.get("observed_final"),
            power_law_A=pl.get("A"), power_law_B=pl.get("B"), power_law_D=pl.get("D"),
            power_law_r2=pl.get("r2"), C_90=(r.get("budget") or {}).get("C_90"),
            compute_col=r.get("compute_col"), reward_col=r.get("reward_col"),
            label=record_label(r, by or None), warnings=" | ".join(r.get("warnings", [])),
            group=json.dumps(r.get("group", {}), sort_keys=True, default=str),
            meta=json.dumps(r.get("meta", {}), sort_keys=True, default=str),
            path=r.get("path", ""),
        )
        rows.append(row)
    for k in by:  # one type per column, so the Parquet schema holds (e.g. seed 0 and "a")
        kinds = {type(row[k]) for row in rows if row[k] is not None}
        if len(kinds) > 1 and not kinds <= {int, float}:
            for row in rows:
                row[k] = None if row[k] is None else str(row[k])
    df = pd.DataFrame(rows)
    if by and len(df):
        order = sorted(range(len(rows)), key=lambda i: tuple(_natural(rows[i][k]) for k in by))
        df = df.iloc[order]
    return df.reset_index(drop=True)


def _natural(value):
    """Sort key: numbers numerically (gen_len 64 before 128), then strings, then missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (2, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def _num(v, fmt: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return format(v, fmt)


def _cell(value) -> str:
    """A by-column value for Markdown: missing -> '–', 64.0 (pandas upcast) -> '64'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _with_interval(row, p: str, fmt: str) -> str:
    lo, hi = row.get(f"{p}_lo"), row.get(f"{p}_hi")
    text = _num(row[p], fmt)
    if lo is not None and hi is not None and not (pd.isna(lo) or pd.isna(hi)):
        text += f" [{_num(lo, fmt)}, {_num(hi, fmt)}]"
    return text


def fits_markdown(df: pd.DataFrame, by: Sequence[str] = (), *, title: str = "Fits") -> str:
    """A Markdown table of `fits_frame` rows (intervals in brackets, flagged fits marked)."""
    head = [*by, "A", "B", "C_mid", "R0", "R²", "points (excl.)", "extrap. max err",
            "pred./obs. final", "power-law A", "ok"]
    lines = [f"# {title}", "",
             "A, B, C_mid: fitted value [bootstrap interval]. extrap.: fit on compute <= the "
             "extrapolation fraction of the maximum, error on the later points. ok: converged "
             "without warnings on the sigmoid.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, row in df.iterrows():
        cells = [_cell(row[k]) for k in by]
        pred, obs = row["predicted_final"], row["observed_final"]
        cells += [_with_interval(row, "A", ".3f"), _with_interval(row, "B", ".2f"),
                  _with_interval(row, "C_mid", ".4g"), _num(row["R0"]), _num(row["r2"]),
                  f"{row['n_points']} ({row['n_excluded']})", _num(row["extrap_max_abs_error"]),
                  f"{_num(pred)} / {_num(obs)}", _num(row["power_law_A"]),
                  "yes" if row["converged"] else "NO"]
        lines.append("| " + " | ".join(cells) + " |")
    flagged = df[~df["converged"] | (df["warnings"] != "")]
    if len(flagged):
        lines += ["", "## Warnings", ""]
        for _, row in flagged.iterrows():
            lines.append(f"- {row['label'] or row['path']}: {row['warnings'] or 'not converged'}")
    return "\n".join(lines) + "\n"


def _cells_markdown(df: pd.DataFrame, by: Sequence[str]) -> str:
    """Per-cell summary when several fits share all `by` values (e.g. seeds)."""
    if not by:
        return ""
    keyed = df.assign(_key=df[list(by)].astype(str).agg("|".join, axis=1))
    cells = keyed.groupby("_key", sort=False)
    if cells.size().max() < 2:
        return ""
    lines = ["", "## Cells with several fits", "",
             f"A spread = max - min over the cell; within margin: spread <= {A_MARGIN} (paper "
             "§2.1: then compare B at a common A, "
             "`scalerl.fit.curves.compare.refit_common_a`).", "",
             "| " + " | ".join([*by, "fits", "mean A", "A spread", "within margin",
                                "mean B", "mean C_mid"]) + " |",
             "|" + "---|" * (len(by) + 6)]
    for _, sub in cells:
        first = sub.iloc[0]
        spread = float(sub["A"].max() - sub["A"].min())
        lines.append("| " + " | ".join([*(_cell(first[k]) for k in by), str(len(sub)),
                                        _num(sub["A"].mean()), _num(spread),
                                        "yes" if spread <= A_MARGIN else "no",
                                        _num(sub["B"].mean(), ".2f"),
                                        _num(sub["C_mid"].mean(), ".4g")]) + " |")
    return "\n".join(lines) + "\n"


def write_report(records: Sequence[dict], out: str | Path, by: Sequence[str] = DEFAULT_BY,
                 order: dict[str, Sequence] | None = None,
                 predictions: pd.DataFrame | None = None,
                 racing: Sequence[str | Path] | None = None,
                 steps: Sequence[str | Path] | None = None,
                 sizes: Mapping[str, float] | None = None) -> dict:
    """scaling.parquet, scaling.md and curves.png under `out`; returns their paths.
    `predictions`: also the backtest section and backtest.png (when any run matches);
    `racing`: decision files of `scalerl race`, listed in a racing section;
    `steps`: steps.parquet files or checkpoint directories, for the generator–trainer mismatch
    section and mismatch.png (`scalerl.fit.report.mismatch`);
    `sizes`: {model: parameters} for the forecast across scale (`scalerl.fit.report.across`).

    `order`: values of a scale axis smallest first (e.g. {"model": ["tiny-s", "tiny-m"]}) for
    the "does more scale raise the ceiling" section (`scalerl.fit.report.axes`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    present = [k for k in by if any(_value(r, k) is not None for r in records)]
    df = fits_frame(records, present)
    paths = {"parquet": out / "scaling.parquet", "markdown": out / "scaling.md",
             "plot": out / "curves.png"}
    with atomic_path(paths["parquet"]) as tmp:
        df.to_parquet(tmp, index=False)
    text = fits_markdown(df, present, title="Scaling report")
    absent = [k for k in by if k not in present]
    if absent:
        text += f"\nColumns without values in any fit (not shown): {', '.join(absent)}.\n"
    backtest_text = ""
    racing_text = ""
    if racing:
        racing_text = racing_markdown(racing)
    if predictions is not None and len(predictions):
        table = backtest_table(predictions, finals_from_records(records))
        if len(table):
            backtest_text = backtest_markdown(table)
            paths["backtest"] = out / "backtest.png"
            plot_backtest(table, paths["backtest"])
    mismatch_text = ""
    if steps:
        frame = mismatch_frame(steps)
        if len(frame):
            mismatch_text = mismatch_markdown(frame)
            paths["mismatch"] = out / "mismatch.png"
            plot_mismatch(frame, paths["mismatch"])
    write_text_atomic(paths["markdown"], text + axes_markdown(df, present, order)
                      + across_markdown(records, present, sizes) + _cells_markdown(df, present)
                      + backtest_text + racing_text + mismatch_text)
    plot_panels(list(records), paths["plot"], by=present, order=order)
    return paths
