"""Tables of points from files: Parquet and CSV (or directories of them), and the error every
reader of scalerl.fit raises.

- `InputError`: an input file or column is missing or unusable; the message lists what is
  available (raised by every reader: tables, `scalerl.fit.readers.logs`, `...inputs`);
- `table_files(paths)`: the files behind the paths (a directory: its *.parquet / *.csv files);
  `read_table(path)`: one file (a W&B chart's "Export CSV", columns `Step`, `<run> - <metric>`,
  `<run> - <metric>__MIN/__MAX`, is melted by `melt_wandb_chart` to one row per run and step:
  `run`, `step`, `<metric>`; the __MIN/__MAX columns of a smoothed or grouped chart are
  dropped); `read_tables(paths)`: all of them concatenated (union of columns);
- provenance: `concat_tables` records in the frame's `attrs` the (file, rows) of each source in
  concat order (`scalerl.sources`) and each file's `scalerl.config_hash` from its Parquet
  metadata (`scalerl.config_hashes`, None for a CSV or a file without it, `config_hash`), so an
  error can name a file and row (`row_source`) and `scalerl.fit.readers.inputs` can refuse to
  pool two runs' files into one curve;
- `resolve_column(df, requested, candidates, ...)`: the column to use, the requested one (which
  must exist) or the first candidate present (a name also matches the last `/` part of a
  column such as `eval/pass_rate`).

Deliberately left out: TensorBoard and MLflow (`scalerl.fit.readers.logs`), naming runs and
grouping rows into curves (`scalerl.fit.readers.inputs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

__all__ = ["InputError", "table_files", "read_table", "melt_wandb_chart", "read_tables",
           "concat_tables", "config_hash", "resolve_column", "row_source"]


class InputError(ValueError):
    """An input file or column is missing or unusable; the message lists what is available."""


def table_files(paths: Sequence[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if _kind(q))
            if not found:
                raise InputError(f"directory {p} holds no .parquet or .csv file (nor "
                                 "TensorBoard event files)")
            files.extend(found)
        elif not p.exists():
            raise FileNotFoundError(f"input {p} does not exist")
        else:
            files.append(p)
    if not files:
        raise InputError("no input files given")
    return files


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz", ".tsv")):
        return "csv"
    return None


def read_table(path: Path) -> pd.DataFrame:
    kind = _kind(path)
    if kind == "parquet":
        return pd.read_parquet(path)
    if kind == "csv":
        return melt_wandb_chart(pd.read_csv(path, sep="\t" if path.name.endswith(".tsv")
                                            else ","))
    raise InputError(f"{path}: unknown format; give .parquet or .csv files, a TensorBoard log "
                     "directory or an MLflow store")


def melt_wandb_chart(df: pd.DataFrame) -> pd.DataFrame:
    """A W&B chart export (`Step`, `<run> - <metric>`[__MIN|__MAX]) -> run, step, metric
    columns; any other table is returned as is."""
    if "Step" not in df.columns:
        return df
    series = [c for c in df.columns if " - " in str(c) and not str(c).endswith(("__MIN",
                                                                              "__MAX"))]
    if not series:
        return df
    parts = []
    for col in series:
        run, metric = str(col).rsplit(" - ", 1)
        part = pd.DataFrame({"run": run, "step": df["Step"], metric: df[col]})
        parts.append(part[part[metric].notna()])
    return pd.concat(parts, ignore_index=True)


def read_tables(paths: Sequence[str | Path]) -> pd.DataFrame:
    """Concatenate Parquet and CSV files (union of columns)."""
    frames, sources = [], []
    for path in table_files(paths):
        frames.append(read_table(path))
        sources.append((str(path), len(frames[-1])))
    return concat_tables(frames, sources, [config_hash(path) for path, _ in sources], paths)


def concat_tables(frames, sources, hashes, paths) -> pd.DataFrame:
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    df.attrs["scalerl.sources"] = sources  # (file, n rows) in concat order, for error messages
    df.attrs["scalerl.config_hashes"] = hashes  # per source: Parquet metadata, else None
    if df.empty:
        raise InputError(f"the input ({', '.join(map(str, paths))}) has no rows")
    return df


def config_hash(path: str) -> str | None:
    """The `scalerl.config_hash` of a Parquet file's metadata (None for CSV or without it)."""
    if _kind(Path(path)) != "parquet":
        return None
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    value = meta.get(b"scalerl.config_hash")
    return value.decode() if value else None


def resolve_column(df: pd.DataFrame, requested: str | None, candidates: Sequence[str],
                   what: str, flag: str) -> str:
    """The column to use: `requested` if given (must exist), else the first candidate found."""
    cols = [str(c) for c in df.columns]
    if requested is not None:
        if requested not in df.columns:
            raise InputError(f"{what} column {requested!r} not found; available columns: "
                             f"{', '.join(cols)}")
        return requested
    for name in candidates:
        if name in df.columns:
            return name
    for name in candidates:  # e.g. "eval/pass_rate" matches "pass_rate"
        hits = [c for c in cols if c.rsplit("/", 1)[-1] == name]
        if hits:
            return hits[0]
    raise InputError(f"no {what} column found (looked for {', '.join(candidates)}); pass "
                     f"{flag}; available columns: {', '.join(cols)}")


def row_source(df: pd.DataFrame, index: int) -> str:
    """'FILE row N' (0-based data row) for row `index` of a read_tables frame."""
    start = 0
    for path, n in df.attrs.get("scalerl.sources", []):
        if index < start + n:
            return f"{path} row {index - start}"
        start += n
    return f"row {index}"
