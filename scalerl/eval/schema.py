"""The evaluation Parquet schema: one row per sampled completion of one checkpoint.

`EVAL_SCHEMA` is the single definition of `eval/chunk{k}.parquet` (docs/design.md, "Data contracts").
Every file also carries, in its schema metadata, the hash of the run config that produced it,
the scalerl version and the evaluated checkpoint (`scalerl.*` keys below), so a stale file is
recognisable without reading its rows.

Columns (all non-null):

    run, model, gen_len, recipe, seed          which run of the sweep (copied from run.yaml)
    chunk, step                                which checkpoint: chunk 0 = the base model (step
                                               0), k = training chunk k's (the chunk of its
                                               steps.parquet and rollouts.parquet rows)
    compute_flops, compute_device_hours        compute spent by the run up to this checkpoint
    task                                       math | code
    test_type                                  how the sample was graded: answer (math),
                                               function | stdio | program (code tests,
                                               scalerl.tasks.code_tests)
    dataset                                    "val" for the held-out split of prompts.parquet,
                                               otherwise the name of a downstream set
    prompt_id, sample_idx                      which prompt and which of its k samples
    reward, correct                            verifier reward and correctness of the sample
    n_tokens, truncated, interrupted           generated tokens, hit the cap, was interrupted
    response                                   the decoded generated text

`dataset` keeps a row self-describing when files are concatenated: downstream sets (AIME-style,
LiveCodeBench-, HumanEval- or MBPP-style files) use the same schema in their own files.
`test_type` says which grader decided `correct` (a HumanEval set is graded by test programs,
LiveCodeBench by function calls or stdin/stdout).

Deliberately left out: per-token data (log-probabilities live in the trainer's steps) and
aggregates (pass rates are computed by readers: `pass_rates(table)`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from scalerl.utils.io import atomic_path

__all__ = [
    "EVAL_SCHEMA",
    "EvalSchemaError",
    "MEASURED_COLUMNS",
    "META_KEYS",
    "build_eval_table",
    "pass_rates",
    "read_eval_table",
    "table_digest",
    "validate_eval_table",
    "write_eval_table",
]

EVAL_SCHEMA = pa.schema(
    [
        pa.field("run", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("gen_len", pa.int32(), nullable=False),
        pa.field("recipe", pa.string(), nullable=False),
        pa.field("seed", pa.int32(), nullable=False),
        pa.field("chunk", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("compute_flops", pa.float64(), nullable=False),
        pa.field("compute_device_hours", pa.float64(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("test_type", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("sample_idx", pa.int32(), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("correct", pa.bool_(), nullable=False),
        pa.field("n_tokens", pa.int32(), nullable=False),
        pa.field("truncated", pa.bool_(), nullable=False),
        pa.field("interrupted", pa.bool_(), nullable=False),
        pa.field("response", pa.string(), nullable=False),
    ]
)

# Columns measured on the machine (wall-clock device-hours), not computed from the run: they
# differ between two runs of one config even when everything else is reproducible.
MEASURED_COLUMNS = ("compute_device_hours",)
# Schema-metadata keys every eval file carries (values are strings).
META_KEYS = ("scalerl.version", "scalerl.config_hash", "scalerl.checkpoint", "scalerl.k")
TASKS = ("math", "code")
TEST_TYPES = {"math": ("answer",), "code": ("function", "stdio", "program")}


class EvalSchemaError(ValueError):
    """An eval table does not match EVAL_SCHEMA or breaks one of its invariants."""


def build_eval_table(rows: Sequence[Mapping[str, Any]], metadata: Mapping[str, str]) -> pa.Table:
    """Rows (dicts keyed by the schema's column names) -> a validated table with metadata."""
    names = EVAL_SCHEMA.names
    for i, row in enumerate(rows):
        missing = [n for n in names if n not in row]
        extra = sorted(set(row) - set(names))
        if missing or extra:
            raise EvalSchemaError(
                f"row {i}: missing columns {missing} / unknown columns {extra}; "
                f"expected exactly {names}"
            )
    columns = {n: [row[n] for row in rows] for n in names}
    try:
        table = pa.Table.from_pydict(columns, schema=EVAL_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as err:
        raise EvalSchemaError(f"eval rows do not fit EVAL_SCHEMA: {err}") from None
    table = table.replace_schema_metadata({k: str(v) for k, v in metadata.items()})
    validate_eval_table(table)
    return table


def validate_eval_table(table: pa.Table) -> None:
    """Raise EvalSchemaError unless `table` is a well-formed eval table.

    Checks: exactly EVAL_SCHEMA's columns, types and order; no nulls; the metadata keys
    META_KEYS; one run/model/gen_len/recipe/seed/chunk/step/compute per file; task in
    {math, code} and test_type one of the task's (`TEST_TYPES`); chunk, step, compute,
    n_tokens >= 0; (dataset, prompt_id, sample_idx) unique; every prompt of a dataset has the
    same number of samples.
    """
    schema = table.schema
    if schema.names != EVAL_SCHEMA.names:
        hint = (" (a file written before the test_type column: evaluate the checkpoint again)"
                if "test_type" not in schema.names else "")
        raise EvalSchemaError(f"columns {schema.names} != expected {EVAL_SCHEMA.names}{hint}")
    for field in EVAL_SCHEMA:
        got = schema.field(field.name).type
        if got != field.type:
            raise EvalSchemaError(f"column {field.name!r} has type {got}, expected {field.type}")
        if table.column(field.name).null_count:
            raise EvalSchemaError(f"column {field.name!r} has nulls")
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise EvalSchemaError(f"schema metadata lacks {missing}; write files via write_eval_table")
    if table.num_rows == 0:
        raise EvalSchemaError("eval table has no rows")
    cols = table.to_pydict()
    for name in ("run", "model", "gen_len", "recipe", "seed", "chunk", "step", "compute_flops",
                 "compute_device_hours"):
        values = set(cols[name])
        if len(values) != 1:
            raise EvalSchemaError(f"column {name!r} must hold one value per file, got {values}")
    bad_tasks = set(cols["task"]) - set(TASKS)
    if bad_tasks:
        raise EvalSchemaError(f"column 'task' has {sorted(bad_tasks)}; allowed: {list(TASKS)}")
    bad_types = {(t, k) for t, k in zip(cols["task"], cols["test_type"])
                 if k not in TEST_TYPES[t]}
    if bad_types:
        raise EvalSchemaError(f"(task, test_type) pairs {sorted(bad_types)} are not allowed; "
                              f"allowed: {TEST_TYPES}")
    for name in ("chunk", "step", "compute_flops", "compute_device_hours", "n_tokens",
                 "sample_idx"):
        if min(cols[name]) < 0:
            raise EvalSchemaError(f"column {name!r} has negative values")
    keys = list(zip(cols["dataset"], cols["prompt_id"], cols["sample_idx"]))
    if len(set(keys)) != len(keys):
        raise EvalSchemaError("(dataset, prompt_id, sample_idx) is not unique")
    per_prompt: dict[tuple[str, str], int] = {}
    for dataset, prompt_id, _ in keys:
        per_prompt[(dataset, prompt_id)] = per_prompt.get((dataset, prompt_id), 0) + 1
    for dataset in set(cols["dataset"]):
        counts = {n for (d, _), n in per_prompt.items() if d == dataset}
        if len(counts) != 1:
            raise EvalSchemaError(
                f"dataset {dataset!r}: prompts have different sample counts {sorted(counts)}"
            )


def write_eval_table(table: pa.Table, path: str | Path) -> Path:
    """Validate and write `table` atomically to `path` (Parquet, zstd)."""
    validate_eval_table(table)
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


def read_eval_table(path: str | Path) -> pa.Table:
    """Read and validate one eval file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"eval file {path} does not exist")
    table = pq.read_table(path)
    try:
        validate_eval_table(table)
    except EvalSchemaError as err:
        raise EvalSchemaError(f"{path}: {err}") from None
    return table


def pass_rates(table: pa.Table) -> dict[str, float]:
    """Mean correctness per `dataset/task` (mean@k over prompts and samples) plus "all"."""
    cols = table.to_pydict()
    sums: dict[str, list[int]] = {}
    for dataset, task, correct in zip(cols["dataset"], cols["task"], cols["correct"]):
        for key in (f"{dataset}/{task}", "all"):
            s = sums.setdefault(key, [0, 0])
            s[0] += int(correct)
            s[1] += 1
    return {k: s[0] / s[1] for k, s in sorted(sums.items())}


def table_digest(table: pa.Table, exclude: Sequence[str] = MEASURED_COLUMNS) -> str:
    """SHA-256 of a table's columns and rows (not its metadata, which names paths), without
    the columns `exclude`: equal for two runs of one config on the fixed PipelineRL schedule
    (`RunConfig.pipeline_fixed_lag`)."""
    kept = [n for n in table.column_names if n not in exclude]
    payload = json.dumps({n: table.column(n).to_pylist() for n in kept}, sort_keys=False)
    return hashlib.sha256(payload.encode()).hexdigest()


def metadata_of(table: pa.Table) -> dict[str, Any]:
    """The schema metadata as a str -> str dict (JSON values left as strings)."""
    return {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}


def dumps_meta(value: Any) -> str:
    """Serialise a metadata value (JSON for anything that is not a string)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
