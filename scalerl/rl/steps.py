"""steps.parquet: one row per optimizer step of a training chunk (docs/design.md, "Data contracts").

Columns (`STEPS_SCHEMA`, all non-null; NaN marks "not measured"):

    run, chunk, step            which run; training chunk (from 1: the checkpoint chunk{k}
                                this step leads to, the eval Parquet's chunk of it; chunk 0
                                is the base model); global optimizer step (1-based: the
                                step count after this update; the base model is step 0)
    compute_flops               cumulative FLOP estimate of the run after this step
                                (`scalerl.rl.compute`: 2·N per forward token, 6·N per trained)
    compute_device_hours        cumulative wall-clock × devices held, / 3600
    tokens                      cumulative generated tokens consumed by the trainer
    reward_mean, pass_rate      mean reward (after any length penalty) and fraction correct of
                                this step's B×G samples
    truncation_rate             fraction that hit the token cap without eos
    interruption_rate           fraction whose thinking was cut by the interruption text
    zero_variance_fraction      fraction of prompts whose G rewards were identical
    npr_retired                 prompts retired so far by No-Positive-Resampling
    loss, grad_norm             loss of the step (0 when nothing was kept) and the global
                                gradient norm before clipping
    entropy                     mean token entropy of the trainer's policy on loss tokens
                                (NaN when every prompt was filtered)
    is_ratio_mean, clip_fraction  mean IS ratio π_train/π_gen and clipped/capped token share
    is_ratio_max, is_ratio_min  the extremes of ρ = π_train/π_gen over the step's loss tokens
                                (after the loss's log-ratio clamp)
    mismatch_kl                 generator–trainer mismatch: the k3 estimate of
                                KL(π_gen ‖ π_train), mean of ρ − 1 − log ρ over the loss
                                tokens (>= 0; what the FP32 head and staleness move;
                                `scalerl.rl.losses`)
    seq_ratio_mean              GSPO's sequence-level ratio (geometric mean of ρ per sequence)
                                averaged over sequences; NaN for the other losses
    (the four are NaN when no token was trained; files from before them read as NaN)
    staleness_mean, staleness_max policy lag (trainer version − oldest token version); exact
                                with per-token versions (HF engine, vLLM's synchronous
                                engine, vLLM >= 0.32's weight_versions spans), an upper bound
                                without spans (each phase labelled with its first version:
                                scalerl.rollout.vllm_contract)
    gen_tokens_per_s            generator throughput while decoding, since the last step
    train_tokens_per_s          trained tokens / time of forward + backward + optimizer
    lr                          learning rate used by this step
    padding_fraction            padding share of the trainer's micro-batch tokens (rows ×
                                longest row per micro-batch; 0 when nothing was trained)
    time_*_s                    wall-clock seconds of the step's phases in the trainer process
                                (`TIME_COLUMNS`; NaN where not measured, e.g. data-parallel
                                ranks): time_generate_s in-process generation (on-policy,
                                PPO; 0 for PipelineRL), time_wait_s the trainer blocked on the
                                PipelineRL generators (0 in-process), time_grade_s verdicts,
                                time_batch_s rewards + filter + advantages + tensors + the
                                rollout log, time_logprob_s trainer log-probabilities (forward),
                                time_backward_s loss + backward, time_optimizer_s grad clip +
                                AdamW + LR step, time_push_s new weights to the generators

The file's schema metadata carries the config hash and the scalerl version.

Deliberately left out: per-sample data (that is evaluation's Parquet).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from scalerl.utils.io import atomic_path

__all__ = ["MISMATCH_COLUMNS", "STEPS_SCHEMA", "STEP_COLUMNS", "TIME_COLUMNS", "read_steps",
           "with_time_columns", "write_steps"]

_INT = {"chunk": pa.int32(), "step": pa.int64(), "tokens": pa.int64(),
        "npr_retired": pa.int64(), "staleness_max": pa.int32()}
STEP_COLUMNS = (
    "run", "chunk", "step", "compute_flops", "compute_device_hours", "tokens", "reward_mean",
    "pass_rate", "truncation_rate", "interruption_rate", "zero_variance_fraction",
    "npr_retired", "loss", "grad_norm", "entropy", "is_ratio_mean", "clip_fraction",
    "is_ratio_max", "is_ratio_min", "mismatch_kl", "seq_ratio_mean", "staleness_mean",
    "staleness_max", "gen_tokens_per_s", "train_tokens_per_s", "lr", "padding_fraction",
)
MISMATCH_COLUMNS = ("is_ratio_max", "is_ratio_min", "mismatch_kl", "seq_ratio_mean")
TIME_COLUMNS = ("time_generate_s", "time_wait_s", "time_grade_s", "time_batch_s",
                "time_logprob_s", "time_backward_s", "time_optimizer_s", "time_push_s")
STEP_COLUMNS = STEP_COLUMNS + TIME_COLUMNS
STEPS_SCHEMA = pa.schema([
    pa.field(name, pa.string() if name == "run" else _INT.get(name, pa.float64()),
             nullable=False)
    for name in STEP_COLUMNS
])


def write_steps(rows: Sequence[dict[str, Any]], path: str | Path, cfg: Any = None) -> Path:
    """Write the rows atomically with `STEPS_SCHEMA` (+ config hash / version metadata)."""
    from scalerl import __version__
    from scalerl.config import config_hash

    for i, row in enumerate(rows):
        if set(row) != set(STEP_COLUMNS):
            raise ValueError(f"steps row {i}: columns {sorted(set(row) ^ set(STEP_COLUMNS))} "
                             "differ from STEP_COLUMNS")
    table = pa.Table.from_pylist([dict(r) for r in rows], schema=STEPS_SCHEMA)
    meta = {"scalerl.version": __version__}
    if cfg is not None:
        meta["scalerl.config_hash"] = config_hash(cfg)
    table = table.replace_schema_metadata(meta)
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def with_time_columns(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with the time_* columns it lacks as NaN (rows of a scalerl from before them,
    e.g. in a partial save being resumed)."""
    return {**{col: float("nan") for col in TIME_COLUMNS}, **row}


def read_steps(path: str | Path):
    """steps.parquet as a pandas DataFrame (columns checked; time_* and mismatch columns
    that a file from before them lacks read as NaN)."""
    table = pq.read_table(path)
    later = (*MISMATCH_COLUMNS, *TIME_COLUMNS)
    missing = [c for c in STEP_COLUMNS if c not in table.column_names and c not in later]
    if missing:
        raise ValueError(f"{path}: missing steps column(s) {missing}")
    df = table.to_pandas()
    for col in later:
        if col not in df.columns:
            df[col] = float("nan")
    return df[list(STEP_COLUMNS)]
