"""Evaluate one checkpoint: k samples per held-out prompt, scored, into one Parquet file.

`run_eval(...)` is what `scalerl eval` does:

1. read the run's `RunConfig` (run.yaml) and resolve its recipe: the evaluation uses the
   run's own generation settings (engine, generation cap, forced-interruption budgets and
   text) with the evaluation temperature and sample count of `RunConfig.eval`
   (`EvalSettings.from_run`);
2. pick the prompts: the `val` split of prompts.parquet (or every row of a downstream file),
   the tasks the run trains on, the first `max_prompts` of each task in file order
   (`select_prompts`);
3. generate `samples_per_prompt` completions per prompt with the run's engine
   (`scalerl.rollout.config.make_engine`); every sample has its own seed derived from
   (run seed, prompt_id, sample_idx), so all checkpoints of a run see the same random numbers
   (common random numbers make the chunk-to-chunk differences less noisy);
4. score each completion with `scalerl.rewards` and write one row per completion
   (`scalerl.eval.schema.EVAL_SCHEMA`), with the checkpoint's step and compute counters copied
   from its trainer summary (a base model directory gives step 0 and compute 0: R0).

The pass rate of a checkpoint is the mean of `correct` over all rows (mean@k).

Deliberately left out: pass@k estimators beyond mean@k, and any aggregation across
checkpoints (that is `scalerl fit`).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scalerl.eval.schema import build_eval_table, pass_rates, write_eval_table
from scalerl.rollout.base import Completion, Request
from scalerl.utils.log import ProgressLine, progress

__all__ = [
    "EvalSettings",
    "build_requests",
    "evaluate_rows",
    "load_eval_prompts",
    "run_eval",
    "select_prompts",
]

LABEL_KEYS = ("run", "model", "gen_len", "recipe", "seed")
_INT_LABELS = ("gen_len", "seed")


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """Resolved generation settings of an evaluation (from the run's RunConfig + recipe)."""

    samples_per_prompt: int
    max_prompts: int  # per task, 0 = all
    temperature: float
    gen_len: int  # the run's generation length L (thinking hi + answer budget, or L_max)
    think_budget: tuple[int, int] | None  # None: no forced interruption
    answer_budget: int
    interruption_text: str
    seed: int
    cap: int | None = None  # RunConfig.max_new_tokens: a hard cap replacing the derived one

    @classmethod
    def from_run(cls, run_cfg: Any, recipe: Any) -> EvalSettings:
        interruption = recipe.length_control == "interruption"
        return cls(
            samples_per_prompt=run_cfg.eval.samples_per_prompt,
            max_prompts=run_cfg.eval.max_prompts,
            temperature=run_cfg.eval.temperature,
            gen_len=int(recipe.max_new_tokens),
            think_budget=tuple(recipe.think_budget) if interruption else None,
            answer_budget=recipe.answer_budget if interruption else 0,
            interruption_text=recipe.interruption_text,
            seed=run_cfg.seed,
            cap=run_cfg.max_new_tokens,
        )

    def max_new_tokens(self, n_interrupt_tokens: int) -> int:
        """Hard cap per sample, as in training (`scalerl.rl.trainer`): with interruptions
        thinking hi + the inserted text + answer budget, else L; `cap` replaces it when set."""
        if self.think_budget is None:
            return min(self.gen_len, self.cap) if self.cap else self.gen_len
        return self.cap or self.gen_len + n_interrupt_tokens


def load_eval_prompts(path: str | Path, split: str) -> list[dict[str, Any]]:
    """Rows of a prompts file (Parquet or JSONL) with `split == split`, or all rows for "all"."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompts file {path} does not exist")
    if path.suffix in (".jsonl", ".json"):
        frame = pd.read_json(path, lines=path.suffix == ".jsonl")
    elif path.suffix == ".parquet":
        frame = pd.read_parquet(path)
    else:
        raise ValueError(f"{path}: prompts must be .parquet or .jsonl, got {path.suffix!r}")
    from scalerl.data.io import prompt_rows

    return prompt_rows(frame, path, split, ("prompt_id", "task", "prompt"))


def select_prompts(rows: Sequence[Mapping[str, Any]], tasks: Sequence[str],
                   max_prompts: int) -> list[dict[str, Any]]:
    """The first `max_prompts` rows of each task in `tasks` (0 = all), in file order."""
    out, counts = [], dict.fromkeys(tasks, 0)
    for row in rows:
        task = row["task"]
        if task in counts and (max_prompts == 0 or counts[task] < max_prompts):
            counts[task] += 1
            out.append(dict(row))
    empty = [t for t, n in counts.items() if n == 0]
    if empty:
        raise ValueError(f"no evaluation prompts for task(s) {empty}; the prompt file lacks them "
                         "(or give the run weight 0 for them)")
    return out


def build_requests(rows: Sequence[Mapping[str, Any]], tokenize: Callable[[str], Sequence[int]],
                   settings: EvalSettings, n_interrupt_tokens: int) -> list[Request]:
    """`samples_per_prompt` requests per row; thinking budgets drawn per (seed, prompt, sample).

    The budget of a sample is uniform on [lo, hi] of the recipe (paper: 10k-12k), drawn from a
    generator seeded by (seed, prompt_id, sample_idx), so it is the same for every checkpoint.
    """
    from scalerl.rollout.config import draw_think_budget, sample_seed

    max_new = settings.max_new_tokens(n_interrupt_tokens)
    requests = []
    for row in rows:
        ids = tuple(int(i) for i in tokenize(row["prompt"]))
        for k in range(settings.samples_per_prompt):
            budget = None
            if settings.think_budget is not None:
                rng = random.Random(sample_seed(settings.seed, str(row["prompt_id"]), k))
                budget = draw_think_budget(rng, *settings.think_budget)
            requests.append(Request(
                prompt_id=str(row["prompt_id"]), prompt_ids=ids, sample_idx=k,
                max_new_tokens=max_new, think_budget=budget,
                answer_budget=settings.answer_budget,
            ))
    return requests


def evaluate_rows(
    engine: Any,
    rows: Sequence[Mapping[str, Any]],
    requests: Sequence[Request],
    score_batch: Callable[[list[Mapping[str, Any]], list[str]], list[Any]],
    *,
    rewards: tuple[float, float] = (1.0, -1.0),
    prompts_per_batch: int = 32,
) -> list[dict[str, Any]]:
    """Generate and score; one dict per completion with the per-sample eval columns.

    Requests go to the engine `prompts_per_batch` prompts at a time (progress on stderr);
    `score_batch(rows, texts)` returns one object with `correct` per text
    (`scalerl.rewards.score_many`). `reward` is the run's training reward of the outcome,
    `rewards = (reward_correct, reward_incorrect)` (paper: +1 / -1).
    """
    by_id = {str(r["prompt_id"]): r for r in rows}
    k = max(1, len(requests) // max(1, len(rows)))
    step = max(1, prompts_per_batch) * k
    out: list[dict[str, Any]] = []
    n_correct = 0
    line = ProgressLine("eval:", len(requests), "sample")  # one updating line on a terminal
    for lo in range(0, len(requests), step):
        batch = list(requests[lo:lo + step])
        completions: list[Completion] = engine.generate(batch)
        batch_rows = [by_id[c.request.prompt_id] for c in completions]
        grades = score_batch(batch_rows, [c.text for c in completions])
        for comp, row, grade in zip(completions, batch_rows, grades):
            correct = bool(grade.correct)
            n_correct += correct
            out.append({
                "task": row["task"],
                "prompt_id": comp.request.prompt_id,
                "sample_idx": comp.request.sample_idx,
                "reward": float(rewards[0] if correct else rewards[1]),
                "correct": correct,
                "n_tokens": comp.n_tokens,
                "truncated": bool(comp.truncated),
                "interrupted": bool(comp.interrupted),
                "response": comp.text,
            })
        line.update(lo + len(batch), f"pass rate so far {n_correct / len(out):.3f}")
    line.close()
    return out


def _labels(run_cfg: Any, settings: EvalSettings, overrides: Mapping[str, str]) -> dict[str, Any]:
    labels: dict[str, Any] = {
        "run": run_cfg.run, "model": run_cfg.model, "gen_len": settings.gen_len,
        "recipe": run_cfg.recipe.preset, "seed": run_cfg.seed,
    }
    for key, value in overrides.items():
        if key not in LABEL_KEYS:
            raise ValueError(f"--label {key}=...: unknown label; choose from {list(LABEL_KEYS)}")
        if key in _INT_LABELS:
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"--label {key}={value!r}: expected an integer") from None
        labels[key] = value
    return labels


def _checkpoint_summary(checkpoint: Path, chunk: int) -> dict[str, Any]:
    """step, compute_* of the checkpoint; chunk 0 must be a base model (step 0, compute 0)."""
    from scalerl.rl.checkpoint import read_trainer_summary

    summary = read_trainer_summary(checkpoint)
    if chunk == 0 and int(summary.get("step", 0)) != 0:
        raise ValueError(f"chunk 0 is the base model, but {checkpoint} is a trainer checkpoint at "
                         f"step {summary['step']}; pass the base model directory")
    if chunk > 0 and "compute_flops" not in summary:
        raise ValueError(f"{checkpoint} has no compute counters in its trainer summary")
    return summary


def run_eval(
    run_cfg: Any,
    checkpoint: str | Path,
    chunk: int,
    prompts: str | Path,
    out: str | Path,
    *,
    split: str = "val",
    dataset: str | None = None,
    max_prompts: int | None = None,
    samples: int | None = None,
    labels: Mapping[str, str] | None = None,
    model_cfg: Any = None,
) -> dict[str, float]:
    """Evaluate `checkpoint` (see the module docstring); returns pass rates per dataset/task."""
    from transformers.utils import logging as hf_logging

    from scalerl import __version__
    from scalerl.config import config_hash
    from scalerl.models.loading import format_prompt, load_tokenizer
    from scalerl.rewards import score_many
    from scalerl.rollout.config import EngineConfig, encode_text, make_engine

    hf_logging.disable_progress_bar()  # no weight-loading bars in the job logs
    checkpoint = Path(checkpoint)
    recipe = run_cfg.recipe.build()
    settings = EvalSettings.from_run(run_cfg, recipe)
    if max_prompts is not None:
        settings = dataclasses.replace(settings, max_prompts=max_prompts)
    if samples is not None:
        settings = dataclasses.replace(settings, samples_per_prompt=samples)
    summary = _checkpoint_summary(checkpoint, chunk)
    meta_labels = _labels(run_cfg, settings, labels or {})
    dataset = dataset or ("val" if split == "val" else Path(prompts).stem)

    rows = select_prompts(load_eval_prompts(prompts, split), list(run_cfg.task_weights.as_dict()),
                          settings.max_prompts)
    if model_cfg is None:
        from scalerl.models.loading import load_model_config

        model_cfg = load_model_config(None, checkpoint)
    # As in training: the checkpoint directory itself, the recipe's FP32-head switch.
    model_cfg = model_cfg.replace(name=str(checkpoint.resolve()),
                                  fp32_lm_head=recipe.fp32_lm_head)
    engine_cfg = EngineConfig(
        backend=run_cfg.engine, temperature=settings.temperature, seed=settings.seed,
        interruption_text=settings.interruption_text, device=run_cfg.device,
        threads=run_cfg.threads, max_batch=run_cfg.gen_batch or recipe.samples_per_step,
    )
    progress(f"eval {meta_labels['run']} chunk {chunk}: {len(rows)} prompts x "
             f"{settings.samples_per_prompt} samples, engine {run_cfg.engine}, {checkpoint}")
    tokenizer = load_tokenizer(checkpoint)
    requests = build_requests(rows, lambda text: format_prompt(tokenizer, text, model_cfg),
                              settings, len(encode_text(tokenizer, settings.interruption_text)))
    engine = make_engine(checkpoint, model_cfg, engine_cfg)
    try:
        samples_out = evaluate_rows(engine, rows, requests, score_many,
                                    rewards=(recipe.reward_correct, recipe.reward_incorrect))
    finally:
        engine.close()

    common = {
        **meta_labels,
        "chunk": int(chunk),
        "step": int(summary.get("step", 0)),
        "compute_flops": float(summary.get("compute_flops", 0.0)),
        "compute_device_hours": float(summary.get("compute_device_hours", 0.0)),
        "dataset": dataset,
    }
    metadata = {
        "scalerl.version": __version__,
        "scalerl.config_hash": config_hash(run_cfg),
        "scalerl.checkpoint": str(checkpoint),
        "scalerl.k": str(settings.samples_per_prompt),
        "scalerl.eval_settings": json.dumps(dataclasses.asdict(settings), sort_keys=True),
        "scalerl.policy_version": str(summary.get("version", 0)),
    }
    table = build_eval_table([{**common, **s} for s in samples_out], metadata)
    write_eval_table(table, out)
    rates = pass_rates(table)
    progress(f"eval {meta_labels['run']} chunk {chunk}: wrote {table.num_rows} rows to {out}; "
             + ", ".join(f"{k} {v:.3f}" for k, v in rates.items()))
    return rates
