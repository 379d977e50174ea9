"""Verdicts for the trainer's completions, and where they are computed.

In-process modes (on-policy, PPO) grade in the trainer: `grade(completions, source, workers)`
calls `scalerl.rewards.score_many` on the whole batch (code runs `workers` sandboxes at a
time, identical programs once).

PipelineRL grades in the generator processes, as PipelineRL's actors do: every generator
builds a `GeneratorGrader` (`make_generator_grader(prompts)`, picklable by reference, see
`scalerl.rl.pipeline.EngineSpec`) and attaches a `Score` to each completion it finishes
before it streams it to the trainer (`Completion.score`). The sandboxed code runs (tens of ms
per program) then overlap the trainer's optimizer step instead of sitting between steps on
the trainer's critical path. The grader runs one verification at a time, in the generator's
own time slice, so a generator process still uses one core's worth of work; samples of one
prompt finish at different decode steps, so it remembers recent verdicts per
(prompt id, text) and identical samples are checked once, as `score_many` does per batch.
`grade` takes verdicts that came with the completions and computes only what is missing.

Deliberately left out: a separate pool of grading processes (on 2 cores it would only
oversubscribe them).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scalerl.rewards import Score, score_many
from scalerl.rollout.base import Completion

__all__ = ["GeneratorGrader", "grade", "make_generator_grader"]


class GeneratorGrader:
    """Grades a generator's finished completions against the train split of prompts.parquet."""

    def __init__(self, prompts: str | Path, cache_size: int = 4096):
        from scalerl.rl.prompts import load_prompt_table

        self.rows = {row["prompt_id"]: row for row in load_prompt_table(prompts, "train")}
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], Score] = OrderedDict()

    def __call__(self, completions: Sequence[Completion]) -> list[Score]:
        keys = [(c.request.prompt_id, c.text) for c in completions]
        todo = [k for k in dict.fromkeys(keys) if k not in self._cache]
        if todo:
            unknown = [pid for pid, _ in todo if pid not in self.rows]
            if unknown:
                raise KeyError(f"prompt id {unknown[0]!r} is not in the train split the "
                               "generator's grader loaded")
            scores = score_many([self.rows[pid] for pid, _ in todo], [t for _, t in todo],
                                workers=1)
            for key, s in zip(todo, scores):
                self._cache[key] = s
        out = []
        for key in keys:
            self._cache.move_to_end(key)
            out.append(self._cache[key])
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out


def make_generator_grader(prompts: str) -> GeneratorGrader:
    """Grader factory run inside a generator process (module-level: picklable)."""
    return GeneratorGrader(prompts)


def grade(completions: Sequence[Completion], source: Any, workers: int) -> list[Score]:
    """The Score of every completion: the generator's verdict when it came along, else
    `score_many` against `source.row(prompt_id)` (the trainer's prompt table)."""
    missing = [i for i, c in enumerate(completions) if c.score is None]
    scores: list[Any] = [c.score for c in completions]
    if missing:
        fresh = score_many([source.row(completions[i].request.prompt_id) for i in missing],
                           [completions[i].text for i in missing], workers=workers)
        for i, s in zip(missing, fresh):
            scores[i] = s
    return scores
