"""Build the prompt set: load every source, filter, split, and report what was dropped and why.

`build_prompts(cfg, pass_rate_fn=None) -> (DataFrame, report)` runs, in order:
1. load each source (synthetic generators, files, hub); malformed rows raise a
   `MalformedRowError` naming the row and field, or are skipped and counted (`skip_malformed`);
2. prompt length (`prompt_length`), exact/normalised duplicates (`duplicate`; also repeated
   prompt ids: `duplicate_id`);
3. validity: math answers must parse - verified equal to themselves by the math verifier
   (`answer_unparseable`); reference solutions must pass (code: their own hidden tests in the
   sandbox; math: their boxed answer) (`solution_fails`);
4. deterministic train/val split (`val_size` allocated to sources in proportion to their size);
5. decontamination: train prompts sharing a word n-gram with val or eval-set prompts
   (`contaminated`); val rows are never dropped here, so val keeps exactly `val_size` rows;
6. optional difficulty filter: drops train prompts whose pass rate is outside
   [min_pass_rate, max_pass_rate] (`pass_rate`). The rate is the one the dataset records
   (`filters.dataset_pass_rate`: Polaris difficulty "6/8" -> 0.75, `TaskExample.pass_rate`)
   or, for the other rows, `pass_rate_fn(rows) -> list[float]` (e.g. the base model's pass
   rate measured by a rollout engine); rows with neither are kept. Not used by default.

The frame has the prompts.parquet columns (`scalerl.data.io.PROMPT_COLUMNS`): prompt_id, task,
source, split, prompt, answer, tests, difficulty, plus the extra `solution` column (synthetic:
the full worked target; loaded datasets: their reference solution as given, "" if none).

Deliberately left out: writing files (see `scalerl.data.io`) and rebalancing difficulty levels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pandas as pd

from scalerl.config import config_hash
from scalerl.data.config import DataConfig, FilterConfig, SourceConfig
from scalerl.data.filters import is_contaminated, ngram_index, normalize_prompt, split_by_hash
from scalerl.data.io import PROMPT_COLUMNS
from scalerl.rewards.code_verifier import check_code
from scalerl.rewards.extract import answer_part, extract_code, last_boxed
from scalerl.rewards.math_verifier import MathVerifierPool, check_math_many
from scalerl.tasks.base import TaskExample
from scalerl.tasks.loaders import LoadResult, load_file, load_hub, read_records
from scalerl.tasks.synthetic import generate_code, generate_math
from scalerl.utils.log import progress

__all__ = ["build_prompts", "load_source", "PassRateFn", "DROP_REASONS"]

PassRateFn = Callable[[list[dict[str, Any]]], Sequence[float]]
DROP_REASONS = ("malformed", "prompt_length", "duplicate", "duplicate_id", "answer_unparseable",
                "solution_fails", "contaminated", "pass_rate")


def load_source(src: SourceConfig, skip_malformed: bool) -> LoadResult:
    """The examples of one configured source."""
    if src.kind == "synthetic_math":
        return LoadResult(generate_math(src.n, src.seed, src.difficulties, src.families), [])
    if src.kind == "synthetic_code":
        return LoadResult(generate_code(src.n, src.seed, src.difficulties, src.code_variant), [])
    common = dict(task=src.task, source=src.name or None, columns=src.columns,
                  skip_malformed=skip_malformed, limit=src.limit, format=src.format)
    if src.kind == "file":
        return load_file(src.path, **common)
    return load_hub(src.dataset, split=src.split, config_name=src.config_name or None, **common)


def _reference_parts(e: TaskExample) -> str | None:
    """The gradable part of a reference solution: code for code rows, boxed answer for math.

    Synthetic solutions are full targets (`<think>..</think>` + answer); loaded datasets give
    bare code or worked text, so thinking is optional here and bare code is taken as is.
    """
    text = answer_part(e.solution)
    text = e.solution if text is None else text
    if e.task == "code":
        return extract_code(text) or text
    return last_boxed(text)


def _validity(examples: list[TaskExample], f: FilterConfig,
              dropped: Counter) -> list[TaskExample]:
    """Drop math rows with unparseable answers and rows whose reference solution fails."""
    keep = [True] * len(examples)
    pool = MathVerifierPool(workers=f.verify_workers, timeout_s=5.0)  # workers start lazily
    try:
        math_idx = [i for i, e in enumerate(examples) if e.task == "math"]
        if f.check_answers and math_idx:
            pairs = [(examples[i].answer, examples[i].answer) for i in math_idx]
            for i, (ok, _) in zip(math_idx, check_math_many(pairs, pool)):
                if not ok:
                    keep[i] = False
                    dropped["answer_unparseable"] += 1
        if f.check_solutions:
            idx = [i for i, e in enumerate(examples) if keep[i] and e.solution]
            parts = {i: _reference_parts(examples[i]) for i in idx}
            math_ids = [i for i in idx if examples[i].task == "math" and parts[i] is not None]
            verdicts = dict(zip(math_ids, (ok for ok, _ in check_math_many(
                [(examples[i].answer, parts[i]) for i in math_ids], pool))))
            code_ids = [i for i in idx if examples[i].task == "code"]
            with ThreadPoolExecutor(max_workers=f.verify_workers) as ex:
                verdicts.update(zip(code_ids, ex.map(
                    lambda i: check_code(parts[i], examples[i].tests)[0], code_ids)))
            for i in idx:
                if not verdicts.get(i, False):
                    keep[i] = False
                    dropped["solution_fails"] += 1
    finally:
        pool.close()
    return [e for e, k in zip(examples, keep) if k]


def _eval_prompts(paths: Sequence[str]) -> list[str]:
    prompts = []
    for path in paths:
        for i, row in enumerate(read_records(path)):
            text = row.get("prompt", row.get("problem"))
            if not isinstance(text, str):
                raise ValueError(f"eval set {path} row {i}: needs a string 'prompt' or "
                                 "'problem' column")
            prompts.append(text)
    return prompts


def build_prompts(cfg: DataConfig, pass_rate_fn: PassRateFn | None = None,
                  ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Generate/load, filter and split the prompt set; returns (frame, report)."""
    f = cfg.filters
    dropped: Counter = Counter({r: 0 for r in DROP_REASONS})
    sources: dict[str, int] = {}
    skipped_msgs: list[str] = []
    examples: list[TaskExample] = []
    for src in cfg.sources:
        loaded = load_source(src, cfg.skip_malformed)
        progress(f"data: {src.kind} source gave {len(loaded.examples)} rows "
                 f"({len(loaded.skipped)} malformed skipped)")
        dropped["malformed"] += len(loaded.skipped)
        skipped_msgs += loaded.skipped
        for e in loaded.examples:
            sources[e.source] = sources.get(e.source, 0) + 1
        examples += loaded.examples
    n_input = len(examples) + dropped["malformed"]

    kept = []
    for e in examples:
        if not f.min_prompt_chars <= len(e.prompt) <= f.max_prompt_chars:
            dropped["prompt_length"] += 1
        else:
            kept.append(e)
    if f.dedupe:
        seen_text: set[str] = set()
        seen_id: set[str] = set()
        unique = []
        for e in kept:
            key = normalize_prompt(e.prompt)
            if key in seen_text:
                dropped["duplicate"] += 1
            elif e.prompt_id in seen_id:
                dropped["duplicate_id"] += 1
            else:
                seen_text.add(key)
                seen_id.add(e.prompt_id)
                unique.append(e)
        kept = unique
    progress(f"data: verifying {len(kept)} answers / reference solutions")
    kept = _validity(kept, f, dropped)

    recorded = ({e.prompt_id: e.pass_rate for e in kept if e.pass_rate is not None}
                if f.dataset_pass_rate else {})
    split = split_by_hash([e.prompt_id for e in kept], [e.source for e in kept], cfg.val_size,
                          cfg.split_seed)
    rows = [{**e.to_row(), "split": s} for e, s in zip(kept, split)]
    if f.decontaminate:
        refs = [r["prompt"] for r in rows if r["split"] == "val"] + _eval_prompts(f.eval_sets)
        index = ngram_index(refs, f.ngram_n)
        before = len(rows)
        rows = [r for r in rows if r["split"] == "val" or not is_contaminated(r["prompt"], index)]
        dropped["contaminated"] += before - len(rows)
    if pass_rate_fn is not None or recorded:
        train = [r for r in rows if r["split"] == "train"]
        rates: list[float | None] = [recorded.get(r["prompt_id"]) for r in train]
        if pass_rate_fn is not None:
            ask = [r for r, p in zip(train, rates) if p is None]
            measured = list(pass_rate_fn(ask))
            if len(measured) != len(ask):
                raise ValueError(f"pass_rate_fn returned {len(measured)} rates for {len(ask)} "
                                 "rows")
            fill = iter(measured)
            rates = [next(fill) if p is None else p for p in rates]
        drop = {id(r) for r, p in zip(train, rates)
                if p is not None and not f.min_pass_rate <= p <= f.max_pass_rate}
        dropped["pass_rate"] += len(drop)
        rows = [r for r in rows if id(r) not in drop]

    frame = pd.DataFrame(rows, columns=list(PROMPT_COLUMNS))
    frame["difficulty"] = frame["difficulty"].astype("int64")
    counts = frame.groupby(["split", "task"]).size()
    report = {
        "config_hash": config_hash(cfg),
        "input_rows": n_input,
        "sources": sources,
        "dropped": dict(dropped),
        "dropped_total": sum(dropped.values()),
        "output_rows": {"total": len(frame), "train": int((frame["split"] == "train").sum()),
                        "val": int((frame["split"] == "val").sum())},
        "by_split_task": {f"{s}/{t}": int(n) for (s, t), n in counts.items()},
        "malformed_examples": skipped_msgs[:20],
    }
    progress(f"data: {len(frame)} prompts ({report['output_rows']['train']} train, "
             f"{report['output_rows']['val']} val); dropped {dict(dropped)}")
    return frame, report
