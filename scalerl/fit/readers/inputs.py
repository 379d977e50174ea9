"""Curves from any run's logs: tables, TensorBoard event files, MLflow stores -> `PointGroup`s.

Accepted inputs (an input = a file, a directory, or a store; several are concatenated):
- TensorBoard log directories (any directory holding `events.out.tfevents.*` files, at any
  depth) and MLflow tracking stores (a `.db` file, an `mlruns` directory or a tracking URI),
  read by `scalerl.fit.readers.logs` into the same tables: one row per run and step, columns
  `run`, `step`, `wall_time` (seconds since the run's first value) and one per metric
  (`--metric` picks the reward, `--compute-col` step, wall_time or another metric);
- Parquet/CSV files, or a directory of them (its *.parquet/*.csv files, concatenated; read by
  `scalerl.fit.readers.tables`):
- one row per evaluation point (any framework): a compute column and a reward column;
- the per-sample eval Parquet of scalerl (`scalerl/eval/schema.py`: run, model, gen_len,
  recipe, seed, chunk, step, compute_flops, compute_device_hours, task, prompt_id, sample_idx,
  reward, correct, ...), detected by a `sample_idx` or `prompt_id` column: samples are averaged
  to the pass rate (mean of `correct`) per group and compute value;
- a CSV exported from other logs, e.g. a W&B history with `_step` and an eval metric that is
  only logged every k steps: rows without a reward value are dropped (and counted in a note).
  W&B's wall-time columns can be the compute axis: `_runtime` (seconds since the run
  started) is used as is, `_timestamp` (Unix seconds) as seconds since its first value in the
  group. A metric that rises and then falls (a collapsed run) is read like any other; the fit
  reports it (`scalerl.fit.curves.collapse`);
- a W&B chart's "Export CSV": melted to one row per run and step
  (`scalerl.fit.readers.tables.melt_wandb_chart`).

Runs: each input is one named run unless its rows say otherwise: a table without a `run`
column gets one, named `NAME` for an input given as `NAME=PATH`, else the file's stem or the
directory's name (a TensorBoard directory of several runs: each sub-directory's relative
path, `NAME/<path>` when named; an MLflow store: its runs' names, `NAME/<run>` when named).
Two inputs with the same name are an error naming both. `Inputs` holds the readers, so
`scalerl watch` re-reads TensorBoard logs incrementally.

Noise: every point carries `stderr`, the binomial standard error sqrt(p (1 - p) / n) of its
pass rate (n = samples averaged, `scalerl.fit.curves.noise`), when the reward is 0/1 per
sample (a per-sample eval's `correct`); otherwise NaN (a point CSV does not say how it was
measured).

Column auto-detection (first present wins; a name also matches the last `/` part of a column
such as `eval/pass_rate`): compute from `COMPUTE_COLUMNS`, reward from `REWARD_COLUMNS`
(per-sample evals: `correct`, then `reward`). Unknown or missing columns raise `InputError`
listing the available ones. Several rows at one compute value within a group are averaged.
Grouping: the given columns; by default `run` and `task` when they take several values (a
sweep's eval files together, or the math and code curves of one run, are never pooled).
Files pooled into one curve must come from one run: when they disagree on the `run` column or
on the `scalerl.config_hash` of their Parquet metadata (an eval file of another run, or of an
older config of this one, given by mistake), `InputError` names both files and the fix.

Every curve also carries the step of each point (`PointGroup.step`) when the table has a
step column (`STEP_COLUMNS`), so a final step can be turned into a final compute.

Deliberately left out: reading W&B's own run files directly (export a CSV), and fitting or
forecasting the curves (the `curves` and `forecast` layers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from scalerl.fit.curves.noise import binomial_se
from scalerl.fit.readers import logs
from scalerl.fit.readers.tables import (
    InputError,
    concat_tables,
    config_hash,
    read_table,
    resolve_column,
    row_source,
    table_files,
)

__all__ = ["PointGroup", "Inputs", "load_groups", "group_slug", "COMPUTE_COLUMNS",
           "REWARD_COLUMNS", "META_COLUMNS", "STEP_COLUMNS"]

COMPUTE_COLUMNS = ("compute", "compute_device_hours", "compute_gpu_hours", "gpu_hours",
                   "device_hours", "compute_flops", "flops", "step", "_step", "global_step",
                   "_runtime", "_timestamp", "wall_time")
STEP_COLUMNS = ("step", "_step", "global_step", "trainer/global_step")
WALL_CLOCK_COLUMNS = ("_timestamp", "wall_time")  # made relative to each group's first value
REWARD_COLUMNS = ("pass_rate", "correct", "accuracy", "acc", "reward_mean", "mean_reward",
                  "reward")
SAMPLE_REWARD_COLUMNS = ("correct", "reward")
META_COLUMNS = ("run", "model", "gen_len", "recipe", "seed", "task", "batch")
DEFAULT_GROUP_COLUMNS = ("run", "task")


@dataclasses.dataclass(frozen=True)
class PointGroup:
    """One curve: its group key, points sorted by compute, and descriptive metadata."""

    key: dict  # {group column: value}
    compute: np.ndarray  # [N]
    reward: np.ndarray  # [N] mean reward per compute value
    n_rows: np.ndarray  # [N] rows (samples or log lines) averaged into each point
    meta: dict  # constant values of META_COLUMNS within the group
    notes: tuple[str, ...]
    stderr: np.ndarray | None = None  # [N] binomial se of each point; NaN where unknown
    step: np.ndarray | None = None  # [N] step of each point (largest), None without a step


def _plain(v):
    """numpy / pandas scalars -> JSON-friendly Python values."""
    if isinstance(v, np.generic):
        return v.item()
    if v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    return v


def _split_name(spec: str) -> tuple[str | None, str]:
    """'NAME=PATH' -> (NAME, PATH) when PATH exists (or is a URI) and spec itself does not."""
    name, sep, rest = str(spec).partition("=")
    if sep and name and not Path(spec).exists() and "/" not in name and ":" not in name \
            and (Path(rest).exists() or "://" in rest or rest.startswith(("sqlite:", "file:"))):
        return name, rest
    return None, str(spec)


class Inputs:
    """The inputs of one command (see the module docstring), each read by its own reader.

    `experiments`, `run_ids`: which runs of an MLflow store (default: all of its runs)."""

    def __init__(self, specs: Sequence[str | Path], *, experiments: Sequence[str] = (),
                 run_ids: Sequence[str] = ()):
        if not specs:
            raise InputError("no input files given")
        self.specs = [str(s) for s in specs]
        self.sources: list[tuple[str, str, str, object]] = []  # (spec, name, kind, reader)
        for spec in self.specs:
            name, target = _split_name(spec)
            self.sources.append(self._source(spec, name, target, experiments, run_ids))

    @staticmethod
    def _source(spec, name, target, experiments, run_ids):
        uri = logs.mlflow_uri(target)
        if uri is not None:
            return spec, name or "", "mlflow", logs.MlflowStore(
                uri, name or "", experiments=experiments, run_ids=run_ids)
        path = Path(target)
        if not path.exists():
            raise FileNotFoundError(f"input {target} does not exist")
        default = path.name.split(".")[0] if path.is_file() else path.resolve().name
        if path.is_dir() and logs.tensorboard_runs(path):
            return spec, name or default, "tensorboard", logs.TensorBoardLog(path, name)
        return spec, name or default, "table", table_files([path])

    def read(self, wanted: Sequence[str] | None = None) -> pd.DataFrame:
        """All inputs as one table; tables get a `run` column from their input's name.
        `wanted`: the metric columns needed (trackers then read only those, when present)."""
        frames, sources, hashes, owner = [], [], [], {}
        for spec, name, kind, reader in self.sources:
            if kind == "table":
                for path in reader:
                    frame = read_table(path)
                    if "run" not in frame.columns:
                        frame = frame.assign(run=name)
                        _claim(owner, name, spec)
                    frames.append(frame)
                    sources.append((str(path), len(frame)))
                    hashes.append(config_hash(str(path)))
                continue
            frame = reader.read(wanted)
            for run in frame["run"].unique():
                _claim(owner, str(run), spec)
            frames.append(frame)
            sources.append((spec, len(frame)))
            hashes.append(None)
        return concat_tables(frames, sources, hashes, self.specs)


def _claim(owner: dict, run: str, spec: str) -> None:
    other = owner.setdefault(run, spec)
    if other != spec:
        raise InputError(f"inputs {other} and {spec} both give run {run!r}; name them "
                         f"apart: NAME=PATH (e.g. {run}-2={spec})")


def _check_one_run(df: pd.DataFrame, rows: np.ndarray, key: dict) -> None:
    """InputError when the files behind `rows` (one curve) disagree on run or config hash
    (a value a file does not record, e.g. a CSV's config hash, is not compared)."""
    sources = df.attrs.get("scalerl.sources", [])
    hashes = df.attrs.get("scalerl.config_hashes", [None] * len(sources))
    if len(sources) < 2:
        return
    file_of = np.repeat(np.arange(len(sources)), [n for _, n in sources])
    runs = df["run"].to_numpy() if "run" in df.columns and "run" not in key else None
    known: dict[str, tuple[int, object]] = {}  # "run" / "config hash" -> (file, value)
    for i in np.unique(file_of[rows]):
        labels = {"run": set(runs[rows[file_of[rows] == i]].tolist())} if runs is not None \
            else {}
        labels["config hash"] = {hashes[i]}
        for what, values in labels.items():
            for value in values - {None}:
                a, seen = known.setdefault(what, (int(i), value))
                if seen == value:
                    continue
                curve = ", ".join(f"{k}={v}" for k, v in key.items()) or "all rows"
                raise InputError(
                    f"{sources[a][0]} and {sources[i][0]} fall into one curve ({curve}) but "
                    f"come from different runs ({what} {seen!r} vs {value!r}); pass only one "
                    "run's eval files (remove the other run's or the stale file, or re-run its "
                    "evaluation), or group by run (--group-by run,...)")


def group_slug(key: dict) -> str:
    """A directory name for a group: 'model=tiny-s_gen_len=64' (safe characters only)."""
    if not key:
        return "all"
    text = "_".join(f"{k}={v}" for k, v in key.items())
    return "".join(ch if ch.isalnum() or ch in "._=-" else "-" for ch in text)


def load_groups(paths: Sequence[str | Path] | Inputs, *, compute_col: str | None = None,
                reward_col: str | None = None, group_by: Sequence[str] | None = None,
                ) -> tuple[list[PointGroup], dict]:
    """Read inputs (specs, or an `Inputs` to re-read) and return one `PointGroup` per curve
    plus {compute_col, reward_col, ...}."""
    inputs = paths if isinstance(paths, Inputs) else Inputs(paths)
    df = inputs.read([c for c in (reward_col, compute_col) if c] or None)
    per_sample = "sample_idx" in df.columns or "prompt_id" in df.columns
    ccol = resolve_column(df, compute_col, COMPUTE_COLUMNS, "compute", "--compute-col")
    rcol = resolve_column(df, reward_col, SAMPLE_REWARD_COLUMNS if per_sample else REWARD_COLUMNS,
                          "reward", "--metric")
    if group_by is None:
        group_by = [c for c in DEFAULT_GROUP_COLUMNS if c in df.columns
                    and df[c].nunique(dropna=False) > 1]
    missing = [c for c in group_by if c not in df.columns]
    if missing:
        raise InputError(f"--group-by column(s) {', '.join(missing)} not found; available "
                         f"columns: {', '.join(map(str, df.columns))}")
    notes = []
    reward = df[rcol]
    if reward.dtype == bool or str(reward.dtype) == "boolean":
        reward = reward.astype(float)
    reward = pd.to_numeric(reward, errors="coerce")
    if reward.isna().all():
        raise InputError(f"reward column {rcol!r} has no numeric values")
    compute = pd.to_numeric(df[ccol], errors="coerce")
    if compute[df[ccol].notna()].isna().any():
        raise InputError(f"compute column {ccol!r} holds non-numeric values")
    for name, values in ((rcol, reward), (ccol, compute)):
        bad = np.flatnonzero(np.isinf(values.to_numpy(float)))
        if len(bad):
            raise InputError(f"{name!r} is infinite at {row_source(df, int(bad[0]))}; repair or "
                             "re-run the step that wrote it, or drop the row")
    if reward.isna().any():
        n_missing = int(reward.isna().sum())
        if per_sample:
            raise InputError(f"reward column {rcol!r} has {n_missing} empty value(s) in a "
                             "per-sample eval; repair or re-run that evaluation")
        notes.append(f"dropped {n_missing} row(s) without a {rcol!r} value (metric logged at "
                     "other steps)")
    keep = reward.notna().to_numpy()
    if compute[keep].isna().any():
        raise InputError(f"compute column {ccol!r} has {int(compute[keep].isna().sum())} empty "
                         "value(s) in rows that have a reward; NaN compute cannot be placed")
    table = df.loc[keep, list(dict.fromkeys([*group_by, *[c for c in META_COLUMNS
                                                            if c in df.columns]]))].copy()
    table["_compute"] = compute[keep].to_numpy(float)
    table["_reward"] = reward[keep].to_numpy(float)
    table["_row"] = np.flatnonzero(keep)  # position in df (its sources), for _check_one_run
    scol = ccol if ccol in STEP_COLUMNS else next((c for c in STEP_COLUMNS if c in df.columns),
                                                  None)
    if scol is not None:
        table["_step_value"] = pd.to_numeric(df.loc[keep, scol], errors="coerce").to_numpy(float)
    binary = bool(table["_reward"].isin((0.0, 1.0)).all())
    groups = []
    grouped = table.groupby(list(group_by), dropna=False, sort=True) if group_by else [((), table)]
    for key_values, sub in grouped:
        key_values = key_values if isinstance(key_values, tuple) else (key_values,)
        key = {c: _plain(v) for c, v in zip(group_by, key_values)}
        _check_one_run(df, sub["_row"].to_numpy(), key)
        if ccol in WALL_CLOCK_COLUMNS:  # clock seconds -> seconds since the group's first row
            sub = sub.assign(_compute=sub["_compute"] - sub["_compute"].min())
        points = sub.groupby("_compute", sort=True)["_reward"].agg(["mean", "size"])
        step = sub.groupby("_compute", sort=True)["_step_value"].max().to_numpy(float) \
            if scol is not None else None
        if binary and per_sample:
            stderr = binomial_se(points["mean"].to_numpy(float), points["size"].to_numpy(float))
        else:
            stderr = np.full(len(points), np.nan)
        meta = {c: _plain(sub[c].iloc[0]) for c in META_COLUMNS
                if c in sub.columns and sub[c].nunique(dropna=False) == 1}
        groups.append(PointGroup(key=key, compute=points.index.to_numpy(float),
                                 reward=points["mean"].to_numpy(float),
                                 n_rows=points["size"].to_numpy(int), meta=meta,
                                 notes=tuple(notes), stderr=stderr, step=step))
    info = {"compute_col": ccol, "reward_col": rcol, "per_sample": per_sample,
            "group_by": list(group_by), "n_rows": int(len(df)), "step_col": scol}
    return groups, info
