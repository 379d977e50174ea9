"""Loaders for real math and code datasets: local Parquet / JSONL / JSON, or a Hugging Face id.

Rows are mapped to `TaskExample`s through a column mapping (canonical key -> dataset column):
- math (Polaris-53K, MATH style): `prompt` <- "problem", `answer` <- "answer";
- code (DeepCoder / LiveCodeBench / TACO style): `prompt` <- "problem", `tests` <- "tests"
  (converted to the canonical format by `scalerl.tasks.code_tests.normalize_tests`),
  `fn_name` <- "metadata.func_name" (a dotted path reads into a dict or a JSON string column).
Optional keys for both: `id`, `difficulty`, `solution`. A mapped column that a row lacks is an
error naming the row and the field (`MalformedRowError`), or, with `skip_malformed=True`, the
row is skipped and its message kept in `LoadResult.skipped`.

Hugging Face datasets load only when asked (`load_hub`), through the optional `datasets`
package (imported lazily; a clear error says how to install it) - never in tests.

Deliberately left out: prompt templates (prompts are stored as given) and streaming of
datasets larger than memory.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from scalerl.tasks.base import MalformedRowError, TaskExample, make_prompt_id
from scalerl.tasks.code_tests import TestSpecError, normalize_tests

__all__ = ["DEFAULT_COLUMNS", "LoadResult", "read_records", "rows_to_examples", "load_file",
           "load_hub"]

DEFAULT_COLUMNS: dict[str, dict[str, str]] = {
    "math": {"prompt": "problem", "answer": "answer"},
    "code": {"prompt": "problem", "tests": "tests", "fn_name": "metadata.func_name"},
}
_KEYS = {"prompt", "answer", "tests", "fn_name", "id", "difficulty", "solution"}
_OPTIONAL = {"fn_name", "id", "difficulty", "solution"}


@dataclasses.dataclass
class LoadResult:
    examples: list[TaskExample]
    skipped: list[str]  # one message per malformed row that was skipped


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .parquet, .jsonl or .json (a list of objects) file as dicts."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".jsonl":
        rows = []
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise MalformedRowError(f"{path}:{lineno}: not valid JSON: {err}") from None
        return rows
    if suffix == ".json":
        data = json.loads(path.read_text())
        if not isinstance(data, list):
            raise MalformedRowError(f"{path}: expected a JSON list of row objects")
        return data
    raise ValueError(f"{path}: unsupported file type {suffix!r}; use .parquet, .jsonl or .json")


def _get(row: Mapping[str, Any], column: str) -> Any:
    """row[column], following a dotted path into dicts or JSON-encoded strings."""
    if column in row:
        return row[column]
    head, _, rest = column.partition(".")
    if not rest or head not in row:
        raise KeyError(column)
    value = row[head]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise KeyError(column) from None
    if not isinstance(value, Mapping):
        raise KeyError(column)
    return _get(value, rest)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or value == ""


def _difficulty(value: Any, where: str) -> int:
    if _missing(value):
        return 0
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise MalformedRowError(f"{where}: field 'difficulty' must be a number, got {value!r}; "
                                "map another column or drop 'difficulty' from columns") from None
    if not as_float.is_integer():
        raise MalformedRowError(f"{where}: field 'difficulty' must be an integer, got {value!r}")
    return int(as_float)


def _example(row: Mapping[str, Any], i: int, task: str, source: str,
             columns: Mapping[str, str]) -> TaskExample:
    where = f"{source} row {i}"
    values: dict[str, Any] = {}
    for key, column in columns.items():
        try:
            values[key] = _get(row, column)
        except KeyError:
            if key in _OPTIONAL:
                continue
            raise MalformedRowError(f"{where}: missing column {column!r} (field {key!r}); "
                                    f"columns present: {sorted(row)[:12]}") from None
    prompt = values.get("prompt")
    if _missing(prompt) or not isinstance(prompt, str):
        raise MalformedRowError(f"{where}: field 'prompt' ({columns['prompt']!r}) is empty or "
                                f"not a string: {prompt!r:.60}")
    answer = tests = None
    if task == "math":
        answer = values.get("answer")
        if _missing(answer) or isinstance(answer, list | dict):
            raise MalformedRowError(f"{where}: field 'answer' ({columns.get('answer')!r}) is "
                                    f"missing or not a scalar: {answer!r:.60}")
        answer = str(answer).strip()
    else:
        if _missing(values.get("tests")):
            raise MalformedRowError(f"{where}: field 'tests' ({columns.get('tests')!r}) is empty")
        fn_name = values.get("fn_name")
        try:
            tests = normalize_tests(values["tests"], None if _missing(fn_name) else str(fn_name))
        except TestSpecError as err:
            raise MalformedRowError(f"{where}: field 'tests': {err}") from None
        tests = tests.to_json()
    raw_id = values.get("id")
    prompt_id = make_prompt_id(source, prompt) if _missing(raw_id) else f"{source}-{raw_id}"
    solution = values.get("solution")
    return TaskExample(prompt_id=prompt_id, task=task, source=source, prompt=prompt,
                       answer=answer, tests=tests,
                       difficulty=_difficulty(values.get("difficulty"), where),
                       solution="" if _missing(solution) else str(solution))


def rows_to_examples(rows: Iterable[Mapping[str, Any]], *, task: str, source: str,
                     columns: Mapping[str, str] | None = None, skip_malformed: bool = False,
                     limit: int = 0) -> LoadResult:
    """Map raw rows to examples (see module docstring); `limit` > 0 keeps the first `limit`."""
    if task not in DEFAULT_COLUMNS:
        raise ValueError(f"task must be 'math' or 'code', got {task!r}")
    mapping = {**DEFAULT_COLUMNS[task], **(columns or {})}
    unknown = set(mapping) - _KEYS
    if unknown:
        raise ValueError(f"unknown column-mapping key(s) {sorted(unknown)}; valid: {sorted(_KEYS)}")
    examples, skipped = [], []
    for i, row in enumerate(rows):
        if limit and len(examples) >= limit:
            break
        try:
            examples.append(_example(row, i, task, source, mapping))
        except MalformedRowError as err:
            if not skip_malformed:
                raise MalformedRowError(f"{err} (set skip_malformed: true to skip such rows)") \
                    from None
            skipped.append(str(err))
    return LoadResult(examples, skipped)


def load_file(path: str | Path, *, task: str, source: str | None = None,
              columns: Mapping[str, str] | None = None, skip_malformed: bool = False,
              limit: int = 0) -> LoadResult:
    """Load a local Parquet / JSONL / JSON dataset file."""
    return rows_to_examples(read_records(path), task=task, source=source or Path(path).stem,
                            columns=columns, skip_malformed=skip_malformed, limit=limit)


def load_hub(dataset_id: str, *, task: str, split: str = "train", config_name: str | None = None,
             source: str | None = None, columns: Mapping[str, str] | None = None,
             skip_malformed: bool = False, limit: int = 0) -> LoadResult:
    """Load a Hugging Face dataset (needs the `datasets` package and network or a local cache)."""
    try:
        import datasets
    except ImportError:
        raise ImportError("loading from the Hugging Face hub needs the `datasets` package: "
                          "`pip install datasets`, or download the data and use kind: file") \
            from None
    ds = datasets.load_dataset(dataset_id, config_name or None, split=split)
    return rows_to_examples(iter(ds), task=task, source=source or dataset_id.split("/")[-1],
                            columns=columns, skip_malformed=skip_malformed, limit=limit)
