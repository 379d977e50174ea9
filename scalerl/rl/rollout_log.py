"""The rollouts Parquet schema: one row per training sample of one chunk (`rollouts.parquet`).

`ROLLOUT_SCHEMA` is the single definition of the `rollouts.parquet` file the trainer writes
into every chunk's checkpoint directory beside `steps.parquet` (docs/design.md, data
contracts; the eval counterpart is `scalerl.eval.schema`). A file carries, in its schema
metadata, the scalerl version, the run config hash, the chunk and the response cap
(`scalerl.*` keys), so a stale file is recognisable without reading its rows.

Columns (all non-null):

    run, chunk, step                  which run and training chunk (from 1, the checkpoint
                                      chunk{k} the sample trained towards, as in steps.parquet
                                      and the eval Parquet); the optimizer step that consumed
                                      the sample (as in steps.parquet: the first step is 1)
    prompt_id, task, group            which prompt; `group` = the issued prompt instance
    sample_idx                        the sample's run-unique index (group * G + j)
    version_started, version_finished policy versions that produced the sample's first and
                                      last tokens (PipelineRL switches weights mid-sequence)
    trainer_version                   the trainer's version when it trained on the sample
                                      (= step - 1)
    staleness                         trainer_version - version_started (0 on-policy); an
                                      upper bound where vLLM gives no per-token versions
                                      (scalerl.rollout.vllm_contract)
    prompt_tokens, n_tokens           prompt length; generated + inserted tokens
    truncated, interrupted            hit the cap without eos; interruption text inserted
    reward, correct                   the recipe's reward (length penalty included) and the
                                      verifier's verdict
    filter_reason                     "kept" (entered the loss) or "zero_variance" (dropped:
                                      every sample of its group got the same reward)
    npr_retired                       this step's verdicts retired the prompt under
                                      No-Positive-Resampling (not drawn in later epochs)
    response                          the decoded text, cut to `max_response_chars`
    response_chars                    the length of the full decoded text

No-Positive-Resampling does not drop a step's samples (it retires prompts from later epochs,
`scalerl.rl.curriculum`), hence a flag of its own rather than a third `filter_reason`.

`RolloutLog` accumulates a chunk's rows step by step, writes them atomically (`write`, called
by the trainer for the final checkpoint and for every intra-chunk save) and reads a partial
save's rows back on resume (`load`).

Deliberately left out: per-token data (log-probabilities, per-token versions) and the prompt
text (prompts.parquet has it, keyed by prompt_id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from scalerl.config import Config, field_
from scalerl.utils.io import atomic_path

__all__ = ["FILTER_REASONS", "ROLLOUTS_FILE", "ROLLOUT_SCHEMA", "RolloutLog", "RolloutLogConfig",
           "RolloutSchemaError", "read_rollouts", "rollout_rows", "validate_rollout_table"]

ROLLOUTS_FILE = "rollouts.parquet"
FILTER_REASONS = ("kept", "zero_variance")
META_KEYS = ("scalerl.version", "scalerl.config_hash", "scalerl.chunk",
             "scalerl.max_response_chars")

ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("run", pa.string(), nullable=False),
        pa.field("chunk", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("group", pa.int64(), nullable=False),
        pa.field("sample_idx", pa.int64(), nullable=False),
        pa.field("version_started", pa.int64(), nullable=False),
        pa.field("version_finished", pa.int64(), nullable=False),
        pa.field("trainer_version", pa.int64(), nullable=False),
        pa.field("staleness", pa.int64(), nullable=False),
        pa.field("prompt_tokens", pa.int32(), nullable=False),
        pa.field("n_tokens", pa.int32(), nullable=False),
        pa.field("truncated", pa.bool_(), nullable=False),
        pa.field("interrupted", pa.bool_(), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("correct", pa.bool_(), nullable=False),
        pa.field("filter_reason", pa.string(), nullable=False),
        pa.field("npr_retired", pa.bool_(), nullable=False),
        pa.field("response", pa.string(), nullable=False),
        pa.field("response_chars", pa.int32(), nullable=False),
    ]
)


@dataclasses.dataclass(frozen=True)
class RolloutLogConfig(Config):
    """Whether the trainer writes `rollouts.parquet` per chunk, and how much text it keeps."""

    enabled: bool = field_(True, "write rollouts.parquet (one row per sample) per chunk")
    max_response_chars: int = field_(
        2000, "characters of each response kept in the file (0 = no text)", ge=0)


class RolloutSchemaError(ValueError):
    """A rollouts table does not match ROLLOUT_SCHEMA or breaks one of its invariants."""


def rollout_rows(*, run: str, chunk: int, trainer_version: int, completions: Sequence[Any],
                 tasks: Sequence[str], rewards: Sequence[float], correct: Sequence[bool],
                 kept: Sequence[bool], npr_retired: Iterable[str],
                 max_response_chars: int) -> list[dict[str, Any]]:
    """The rows of one step's samples (`completions` in batch order, with their verdicts).

    `kept[i]`: sample i entered the loss; `npr_retired`: prompt ids this step's verdicts
    retired; `tasks[i]`: the task of sample i's prompt."""
    n = len(completions)
    if not (len(tasks) == len(rewards) == len(correct) == len(kept) == n):
        raise ValueError(f"{n} completions but {len(tasks)} tasks, {len(rewards)} rewards, "
                         f"{len(correct)} verdicts, {len(kept)} keep flags")
    retired = set(npr_retired)
    rows = []
    for c, task, reward, ok, keep in zip(completions, tasks, rewards, correct, kept):
        versions = c.versions or [trainer_version]  # an empty completion: the current policy
        rows.append({
            "run": run, "chunk": chunk, "step": trainer_version + 1,
            "prompt_id": str(c.request.prompt_id), "task": str(task),
            "group": int(c.request.tag), "sample_idx": int(c.request.sample_idx),
            "version_started": int(min(versions)), "version_finished": int(max(versions)),
            "trainer_version": trainer_version,
            "staleness": trainer_version - int(min(versions)),
            "prompt_tokens": len(c.request.prompt_ids), "n_tokens": c.n_tokens,
            "truncated": bool(c.truncated), "interrupted": bool(c.interrupted),
            "reward": float(reward), "correct": bool(ok),
            "filter_reason": "kept" if keep else "zero_variance",
            "npr_retired": str(c.request.prompt_id) in retired,
            "response": c.text[:max_response_chars], "response_chars": len(c.text),
        })
    return rows


def _table(rows: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any]) -> pa.Table:
    names = ROLLOUT_SCHEMA.names
    for i, row in enumerate(rows):
        if set(row) != set(names):
            raise RolloutSchemaError(f"row {i}: columns {sorted(row)} != expected {names}")
    try:
        table = pa.Table.from_pydict({n: [r[n] for r in rows] for n in names},
                                     schema=ROLLOUT_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as err:
        raise RolloutSchemaError(f"rollout rows do not fit ROLLOUT_SCHEMA: {err}") from None
    return table.replace_schema_metadata({k: str(v) for k, v in metadata.items()})


def validate_rollout_table(table: pa.Table) -> None:
    """Raise RolloutSchemaError unless `table` is a well-formed rollouts table.

    Checks: exactly ROLLOUT_SCHEMA's columns and types, no nulls, the META_KEYS metadata;
    one run and chunk per file; filter_reason in FILTER_REASONS; version_started <=
    version_finished <= trainer_version; staleness = trainer_version - version_started;
    step = trainer_version + 1; sample_idx unique."""
    if table.schema.names != ROLLOUT_SCHEMA.names:
        raise RolloutSchemaError(f"columns {table.schema.names} != expected {ROLLOUT_SCHEMA.names}")
    for field in ROLLOUT_SCHEMA:
        if table.schema.field(field.name).type != field.type:
            raise RolloutSchemaError(f"column {field.name!r} has type "
                                     f"{table.schema.field(field.name).type}, expected {field.type}")
        if table.column(field.name).null_count:
            raise RolloutSchemaError(f"column {field.name!r} has nulls")
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise RolloutSchemaError(f"schema metadata lacks {missing}; write files via RolloutLog")
    cols = table.to_pydict()
    for name in ("run", "chunk"):
        if len(set(cols[name])) > 1:
            raise RolloutSchemaError(f"column {name!r} must hold one value per file")
    bad = set(cols["filter_reason"]) - set(FILTER_REASONS)
    if bad:
        raise RolloutSchemaError(f"filter_reason has {sorted(bad)}; allowed {list(FILTER_REASONS)}")
    for i in range(table.num_rows):
        start, end, trained = (cols["version_started"][i], cols["version_finished"][i],
                               cols["trainer_version"][i])
        if not start <= end <= trained or cols["staleness"][i] != trained - start \
                or cols["step"][i] != trained + 1:
            raise RolloutSchemaError(
                f"row {i}: versions started {start} / finished {end} / trainer {trained}, "
                f"staleness {cols['staleness'][i]}, step {cols['step'][i]} are inconsistent")
    if len(set(cols["sample_idx"])) != table.num_rows:
        raise RolloutSchemaError("sample_idx is not unique")


def read_rollouts(path: str | Path) -> pa.Table:
    """Read and validate a rollouts.parquet (or the one inside a checkpoint directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / ROLLOUTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"rollouts file {path} does not exist")
    table = pq.read_table(path)
    try:
        validate_rollout_table(table)
    except RolloutSchemaError as err:
        raise RolloutSchemaError(f"{path}: {err}") from None
    return table


class RolloutLog:
    """A chunk's rollout rows: `add` per step, `write` into a checkpoint directory."""

    def __init__(self, cfg: RolloutLogConfig, *, run: str, chunk: int, config_hash: str):
        from scalerl import __version__

        self.cfg = cfg
        self.run, self.chunk = run, chunk
        self.rows: list[dict[str, Any]] = []
        self.metadata = {"scalerl.version": __version__, "scalerl.config_hash": config_hash,
                         "scalerl.chunk": chunk,
                         "scalerl.max_response_chars": cfg.max_response_chars}

    def add(self, trainer_version: int, completions: Sequence[Any], **verdicts: Any) -> None:
        """Append one step's rows (keyword arguments as in `rollout_rows`)."""
        if self.cfg.enabled:
            self.rows.extend(rollout_rows(
                run=self.run, chunk=self.chunk, trainer_version=trainer_version,
                completions=completions, max_response_chars=self.cfg.max_response_chars,
                **verdicts))

    def write(self, directory: str | Path) -> Path | None:
        """Write `directory/rollouts.parquet` atomically (nothing when disabled)."""
        if not self.cfg.enabled:
            return None
        table = _table(self.rows, self.metadata)
        validate_rollout_table(table)
        path = Path(directory) / ROLLOUTS_FILE
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        return path

    def load(self, directory: str | Path, up_to_step: int) -> None:
        """Resume: the rows of a partial save (those of steps <= `up_to_step`), if it has any."""
        path = Path(directory) / ROLLOUTS_FILE
        if self.cfg.enabled and path.is_file():
            self.rows = [r for r in read_rollouts(path).to_pylist() if r["step"] <= up_to_step]
