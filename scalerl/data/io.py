"""prompts.parquet: its columns, an atomic writer and a validating reader.

Columns (docs/design.md, "Data contracts", in this order): prompt_id, task (math|code), source,
split (train|val), prompt, answer (math, else null), tests (code: canonical JSON, else null),
difficulty (int64), plus the extra column `solution` (the worked target text of synthetic
rows, used for the SFT warm start; "" when unknown). The file's metadata carries the config
hash and the scalerl version.

Deliberately left out: sharding; prompt sets fit in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from scalerl.utils.io import atomic_path

__all__ = ["PROMPT_COLUMNS", "PROMPTS_SCHEMA", "write_prompts", "read_prompts", "prompt_rows",
           "prompts_metadata"]

PROMPT_COLUMNS = ("prompt_id", "task", "source", "split", "prompt", "answer", "tests",
                  "difficulty", "solution")


def _schema():
    import pyarrow as pa

    return pa.schema([("prompt_id", pa.string()), ("task", pa.string()), ("source", pa.string()),
                      ("split", pa.string()), ("prompt", pa.string()), ("answer", pa.string()),
                      ("tests", pa.string()), ("difficulty", pa.int64()),
                      ("solution", pa.string())])


PROMPTS_SCHEMA = _schema()


def write_prompts(frame: pd.DataFrame, path: str | Path,
                  metadata: dict[str, str] | None = None) -> None:
    """Write the frame atomically with the fixed schema (+ string metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scalerl import __version__

    missing = [c for c in PROMPT_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"prompts frame lacks column(s) {missing}")
    table = pa.Table.from_pandas(frame[list(PROMPT_COLUMNS)], schema=PROMPTS_SCHEMA,
                                 preserve_index=False)
    meta = {b"scalerl_version": __version__.encode()}
    meta.update({k.encode(): str(v).encode() for k, v in (metadata or {}).items()})
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def pa_errors() -> type[Exception]:
    """pyarrow's error base class (ArrowException), imported lazily."""
    import pyarrow as pa

    return pa.ArrowException


def read_prompts(path: str | Path, split: str | None = None,
                 task: str | None = None) -> pd.DataFrame:
    """Read prompts.parquet, check its columns, optionally keep one split and/or task."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"prompts file {path} does not exist; build it with `scalerl data`")
    try:
        frame = pq.read_table(path).to_pandas()
    except (OSError, pa_errors()) as err:
        raise ValueError(f"{path}: unreadable prompts file ({err}); it is truncated or not "
                         "Parquet: delete it and rebuild it with `scalerl data`") from err
    missing = [c for c in PROMPT_COLUMNS[:8] if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a prompts file, missing column(s) {missing}")
    if split is not None:
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        frame = frame[frame["split"] == split]
    if task is not None:
        if task not in ("math", "code"):
            raise ValueError(f"task must be 'math' or 'code', got {task!r}")
        frame = frame[frame["task"] == task]
    return frame.reset_index(drop=True)


def prompt_rows(frame: pd.DataFrame, path: str | Path, split: str,
                need: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of `frame` (read from `path`) with `split == split` ("all": every row) as
    dicts with NaN turned into None, after checking the columns in `need`, that some row is
    left, that prompt_ids are unique and that tasks are math or code; errors name the file."""
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; a prompts file needs "
                         f"{list(need)} (plus answer for math, tests for code)")
    if split != "all":
        if "split" not in frame.columns:
            raise ValueError(f"{path}: no 'split' column; use split 'all' for this file")
        frame = frame[frame["split"] == split]
    if frame.empty:
        raise ValueError(f"{path}: no prompts with split {split!r}")
    if frame["prompt_id"].duplicated().any():
        dup = frame.loc[frame["prompt_id"].duplicated(), "prompt_id"].iloc[0]
        raise ValueError(f"{path}: duplicate prompt_id {dup!r} in split {split!r}")
    bad = sorted(set(frame["task"]) - {"math", "code"})
    if bad:
        raise ValueError(f"{path}: task values {bad} are not math or code")
    return [{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")]


def prompts_metadata(path: str | Path) -> dict[str, Any]:
    """The key/value metadata stored in a prompts file."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if not k.startswith(b"pandas")}
