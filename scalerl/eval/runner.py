"""Evaluate one checkpoint: k samples per held-out prompt, scored, into one Parquet file.

`run_eval(...)` is what `scalerl eval` does:

1. read the run's `RunConfig` (run.yaml) and resolve its recipe: the evaluation uses the
   run's own generation settings (engine, generation cap, forced-interruption budgets and
   text) with the evaluation temperature and sample count of `RunConfig.eval`
   (`EvalSettings.from_run`);
2. pick the prompts: the `val` split of prompts.parquet (or every row of a downstream file:
   prompts.parquet columns, or with `format` a dataset in an upstream layout such as
   `humaneval`, `mbpp`, `acecode`, `kodcode`, `deepcoder`, converted by
   `scalerl.tasks.loaders`), the tasks the run trains on (of a downstream set: those of them
   it has), the first `max_prompts` of each task in file order (`select_prompts`);
3. generate `samples_per_prompt` completions per prompt with the run's engine
   (`scalerl.rollout.factory.make_engine` of `RunConfig.engine_config`; the whole set
   submitted at once, graded on worker threads as samples finish: `evaluate_rows`); every sample has its own seed derived from
   (run seed, prompt_id, sample_idx), so all checkpoints of a run see the same random numbers
   (common random numbers make the chunk-to-chunk differences less noisy);
4. score each completion with `scalerl.rewards` and write one row per completion
   (`scalerl.eval.schema.EVAL_SCHEMA`, with the prompt's test type), with the checkpoint's
   step and compute counters copied from its trainer summary (a base model directory gives
   step 0 and compute 0: R0).

The pass rate of a checkpoint is the mean of `correct` over all rows (mean@k).

Deliberately left out: pass@k estimators beyond mean@k, and any aggregation across
checkpoints (that is `scalerl fit`).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from scalerl.eval.schema import build_eval_table, pass_rates, write_eval_table
from scalerl.rollout.base import Completion, Request
from scalerl.rollout.budget import GenerationBudget
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
    interruption_text: str
    seed: int
    budget: GenerationBudget  # the run's per-sample limits, exactly as in training

    @classmethod
    def from_run(cls, run_cfg: Any, n_interrupt_tokens: int) -> EvalSettings:
        """Settings of `run_cfg` (a RunConfig) and its recipe; the budget is
        `GenerationBudget.from_recipe`, the one the trainer uses."""
        recipe = run_cfg.recipe
        return cls(
            samples_per_prompt=run_cfg.eval.samples_per_prompt,
            max_prompts=run_cfg.eval.max_prompts,
            temperature=run_cfg.eval.temperature,
            interruption_text=recipe.interruption_text,
            seed=run_cfg.seed,
            budget=GenerationBudget.from_recipe(recipe, n_interrupt_tokens, run_cfg.max_new_tokens),
        )


def load_eval_prompts(path: str | Path, split: str, format: str = "") -> list[dict[str, Any]]:
    """Rows of a prompts file (Parquet or JSONL) with `split == split`, or all rows for "all".

    `format` (a `scalerl.tasks.loaders.FORMATS` name): the file is a dataset in that upstream
    layout; every row is converted (`load_file`) and used, whatever `split`.
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompts file {path} does not exist")
    if format:
        from scalerl.tasks.loaders import FORMATS, load_file

        if format not in FORMATS:
            raise ValueError(f"--format {format!r}: unknown dataset format; known: "
                             f"{sorted(FORMATS)}")
        examples = load_file(path, task=FORMATS[format][0], format=format).examples
        return [{**e.to_row(), "split": "all"} for e in examples]
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
                   settings: EvalSettings) -> list[Request]:
    """`samples_per_prompt` requests per row; thinking budgets drawn per (seed, prompt, sample).

    The budget of a sample is uniform on [lo, hi] of the recipe (paper: 10k-12k), drawn from a
    generator seeded by (seed, prompt_id, sample_idx), so it is the same for every checkpoint.
    """
    from scalerl.rollout.config import draw_think_budget, sample_seed

    budget = settings.budget
    requests = []
    for row in rows:
        ids = tuple(int(i) for i in tokenize(row["prompt"]))
        for k in range(settings.samples_per_prompt):
            think = None
            if budget.think_budget is not None:
                rng = random.Random(sample_seed(settings.seed, str(row["prompt_id"]), k))
                think = draw_think_budget(rng, *budget.think_budget)
            requests.append(Request(
                prompt_id=str(row["prompt_id"]), prompt_ids=ids, sample_idx=k,
                max_new_tokens=budget.max_new_tokens, think_budget=think,
                answer_budget=budget.answer_budget,
            ))
    return requests


def evaluate_rows(
    engine: Any,
    rows: Sequence[Mapping[str, Any]],
    requests: Sequence[Request],
    score_batch: Callable[[list[Mapping[str, Any]], list[str]], list[Any]],
    *,
    rewards: tuple[float, float] = (1.0, -1.0),
    prompts_per_batch: int = 0,
    grade_workers: int = 4,
) -> list[dict[str, Any]]:
    """Generate and score; one dict per completion (in `requests` order) with the per-sample
    eval columns.

    The requests go to the engine all at once (`prompts_per_batch` 0; else that many prompts
    at a time), so the engine's own batching keeps the device busy; each completion is graded
    on `grade_workers` threads as soon as the engine returns it (`score_batch([row], [text])`,
    e.g. `scalerl.rewards.score_many`: a sample's verdict does not depend on its batch, so the
    rows equal serial grading's), identical (prompt, text) pairs once. `reward` is the run's
    training reward of the outcome, `rewards = (reward_correct, reward_incorrect)` (paper:
    +1 / -1). Progress on stderr about every 5% of the samples.
    """
    by_id = {str(r["prompt_id"]): r for r in rows}
    k = max(1, len(requests) // max(1, len(rows)))
    step = len(requests) if prompts_per_batch <= 0 else prompts_per_batch * k
    index = {id(r): i for i, r in enumerate(requests)}
    finished: list[tuple[Completion, Future] | None] = [None] * len(requests)
    verdicts: dict[tuple[str, str], Future] = {}
    report_every = max(1, len(requests) // 20)
    n_done = 0
    line = ProgressLine("eval:", len(requests), "sample")  # one updating line on a terminal

    def grade_one(prompt_id: str, text: str) -> Any:
        return score_batch([by_id[prompt_id]], [text])[0]

    with ThreadPoolExecutor(max(1, grade_workers), thread_name_prefix="scalerl-eval") as pool:
        for lo in range(0, len(requests), max(1, step)):
            batch = list(requests[lo:lo + step])
            engine.submit(batch)
            left = len(batch)
            while left:
                for comp in engine.step():
                    left -= 1
                    key = (comp.request.prompt_id, comp.text)
                    if key not in verdicts:
                        verdicts[key] = pool.submit(grade_one, *key)
                    finished[index[id(comp.request)]] = (comp, verdicts[key])
                    n_done += 1
                    if n_done % report_every == 0 or n_done == len(requests):
                        _report(line, finished, n_done)
        out = [_sample_row(comp, by_id[comp.request.prompt_id], fut.result(), rewards)
               for comp, fut in finished]  # type: ignore[misc]
    line.close()
    return out


def _sample_row(comp: Completion, row: Mapping[str, Any], grade: Any,
                rewards: tuple[float, float]) -> dict[str, Any]:
    from scalerl.tasks.code_tests import spec_type

    correct = bool(grade.correct)
    return {
        "task": row["task"],
        "test_type": spec_type(row.get("tests")) if row["task"] == "code" else "answer",
        "prompt_id": comp.request.prompt_id,
        "sample_idx": comp.request.sample_idx,
        "reward": float(rewards[0] if correct else rewards[1]),
        "correct": correct,
        "n_tokens": comp.n_tokens,
        "truncated": bool(comp.truncated),
        "interrupted": bool(comp.interrupted),
        "response": comp.text,
    }


def _report(line: ProgressLine, finished: Sequence[tuple[Completion, Future] | None],
            done: int) -> None:
    graded = [item[1].result() for item in finished if item is not None and item[1].done()]
    rate = sum(bool(g.correct) for g in graded) / len(graded) if graded else float("nan")
    line.update(done, f"{len(graded)} graded, pass rate so far {rate:.3f}")


def _labels(run_cfg: Any, settings: EvalSettings, overrides: Mapping[str, str]) -> dict[str, Any]:
    labels: dict[str, Any] = {
        "run": run_cfg.run, "model": run_cfg.model,
        "gen_len": settings.budget.gen_len,
        "recipe": run_cfg.recipe_name, "seed": run_cfg.seed,
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
    format: str = "",
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
    from scalerl.rollout.config import encode_text
    from scalerl.rollout.factory import make_engine

    hf_logging.disable_progress_bar()  # no weight-loading bars in the job logs
    checkpoint = Path(checkpoint)
    summary = _checkpoint_summary(checkpoint, chunk)
    recipe = run_cfg.recipe
    tokenizer = load_tokenizer(checkpoint)
    settings = EvalSettings.from_run(run_cfg, len(encode_text(tokenizer, recipe.interruption_text)))
    if max_prompts is not None:
        settings = dataclasses.replace(settings, max_prompts=max_prompts)
    if samples is not None:
        settings = dataclasses.replace(settings, samples_per_prompt=samples)
    meta_labels = _labels(run_cfg, settings, labels or {})
    dataset = dataset or ("val" if split == "val" else Path(prompts).stem)

    rows = load_eval_prompts(prompts, split, format)
    tasks = list(run_cfg.task_weights.as_dict())
    if dataset != "val":  # a downstream set covers the run's tasks it has (HumanEval: code)
        tasks = [t for t in tasks if any(r["task"] == t for r in rows)] or tasks
    rows = select_prompts(rows, tasks, settings.max_prompts)
    if model_cfg is None:
        from scalerl.models.loading import load_model_config

        model_cfg = load_model_config(None, checkpoint)
    # As in training: the checkpoint directory itself, the recipe's FP32-head switch.
    model_cfg = model_cfg.replace(name=str(checkpoint.resolve()),
                                  fp32_lm_head=recipe.fp32_lm_head)
    progress(f"eval {meta_labels['run']} chunk {chunk}: {len(rows)} prompts x "
             f"{settings.samples_per_prompt} samples, engine {run_cfg.engine}, {checkpoint}")
    requests = build_requests(rows, lambda text: format_prompt(tokenizer, text, model_cfg),
                              settings)
    vllm = None
    if run_cfg.engine == "vllm":  # context: the longest eval prompt + the cap
        from scalerl.rollout.vllm_settings import resolve_max_model_len

        vllm = resolve_max_model_len(run_cfg.vllm, max(r.max_new_tokens for r in requests),
                                     max(len(r.prompt_ids) for r in requests)
                                     ).for_blocking_use()  # reproducible: the sync engine
    engine = make_engine(checkpoint, model_cfg,
                         run_cfg.engine_config(temperature=settings.temperature, vllm=vllm))
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
    from scalerl.tracking import make_tracker  # backend none (the default): nothing happens

    with make_tracker(run_cfg.tracking, run=run_cfg.run) as tracker:
        tracker.log_eval({f"{dataset}/{k}": v for k, v in rates.items()}, step=common["step"],
                         flops=common["compute_flops"],
                         device_hours=common["compute_device_hours"])
    return rates
