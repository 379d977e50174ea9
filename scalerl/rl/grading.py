"""Verdicts for the trainer's completions, and where they are computed.

In-process modes (on-policy, PPO) grade in the trainer: `grade(completions, source, workers)`
calls `scalerl.rewards.score_many` on the whole batch (code runs `workers` sandboxes at a
time, identical programs once).

PipelineRL grades in the generator processes, as PipelineRL's actors do: every generator
builds a `GeneratorGrader` (`make_generator_grader(prompts)`, picklable by reference, see
`scalerl.rl.pipeline.EngineSpec`) and attaches a `Score` to each completion it finishes
before it streams it to the trainer (`Completion.score`). Grading runs off the decode loop:
`GradedStream.put(finished)` hands the samples to the grader's worker threads
(`GeneratorGrader.submit`; the code sandbox is a subprocess and the math verifier a worker
process, so threads overlap them with decoding) and `GradedStream.ready()` gives back those
whose verdict is in, so the engine keeps decoding while programs run. The grader remembers
recent verdicts per (prompt id, text), and a sample identical to one still being graded waits
for that run: identical samples are checked once, as `score_many` does per batch. A verdict
is the same Score `score_many` gives for the sample alone (its result does not depend on the
batch), so threaded and serial grading agree (tests/rl/test_grading_pool.py).
`grade` takes verdicts that came with the completions and computes only what is missing.

Deliberately left out: a separate pool of grading processes (the sandboxes already are
processes; threads only wait on them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from scalerl.rewards import Score, score_many
from scalerl.rollout.base import Completion

__all__ = ["GeneratorGrader", "GradedStream", "grade", "make_generator_grader"]

DEFAULT_GRADE_WORKERS = 4  # grading threads per generator (each waits on a sandbox process)


class GeneratorGrader:
    """Grades a generator's finished completions against the train split of prompts.parquet.

    `grader(completions)` grades in the caller's thread (one `score_many` call for what is not
    cached); `grader.submit(completions)` returns one Future per completion, graded on
    `workers` threads."""

    def __init__(self, prompts: str | Path, cache_size: int = 4096,
                 workers: int = DEFAULT_GRADE_WORKERS):
        from scalerl.rl.prompts import load_prompt_table

        self.rows = {row["prompt_id"]: row for row in load_prompt_table(prompts, "train")}
        self.cache_size = cache_size
        self.workers = max(1, workers)
        self._cache: OrderedDict[tuple[str, str], Score] = OrderedDict()
        self._inflight: dict[tuple[str, str], Future] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def _check_known(self, keys: Sequence[tuple[str, str]]) -> None:
        unknown = [pid for pid, _ in keys if pid not in self.rows]
        if unknown:
            raise KeyError(f"prompt id {unknown[0]!r} is not in the train split the "
                           "generator's grader loaded")

    def _remember(self, key: tuple[str, str], score: Score) -> None:
        """Cache a verdict (caller holds the lock); the oldest ones beyond cache_size go."""
        self._cache[key] = score
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def __call__(self, completions: Sequence[Completion]) -> list[Score]:
        keys = [(c.request.prompt_id, c.text) for c in completions]
        with self._lock:
            todo = [k for k in dict.fromkeys(keys) if k not in self._cache]
        if todo:
            self._check_known(todo)
            scores = score_many([self.rows[pid] for pid, _ in todo], [t for _, t in todo],
                                workers=1)
            with self._lock:
                for key, s in zip(todo, scores):
                    self._cache[key] = s
        out = []
        with self._lock:
            for key in keys:
                self._cache.move_to_end(key)
                out.append(self._cache[key])
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def submit(self, completions: Sequence[Completion]) -> list[Future]:
        """A Future of each completion's Score, graded on the worker threads; a sample equal
        to a cached or in-flight one shares its verdict."""
        keys = [(c.request.prompt_id, c.text) for c in completions]
        self._check_known(keys)
        out: list[Future] = []
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="scalerl-grade")
            for key in keys:
                fut = self._inflight.get(key)
                if fut is None and key in self._cache:
                    fut = Future()
                    fut.set_result(self._cache[key])
                    self._cache.move_to_end(key)
                elif fut is None:
                    fut = self._pool.submit(self._grade_one, key)
                    self._inflight[key] = fut
                out.append(fut)
        return out

    def _grade_one(self, key: tuple[str, str]) -> Score:
        pid, text = key
        try:
            score = score_many([self.rows[pid]], [text], workers=1)[0]
        except BaseException:
            with self._lock:
                self._inflight.pop(key, None)
            raise
        with self._lock:
            self._remember(key, score)
            self._inflight.pop(key, None)
        return score

    def close(self) -> None:
        """Stop the worker threads (verdicts still running finish first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class GradedStream:
    """Finished completions in (`put`), graded ones out (`ready`): the decode loop never waits
    for a verifier. Graders without `submit` (a plain callable) grade inside `put`."""

    def __init__(self, grader: Any):
        self.grader = grader
        self._pending: deque[tuple[Completion, Future]] = deque()

    def put(self, completions: Sequence[Completion]) -> None:
        if not completions:
            return
        submit = getattr(self.grader, "submit", None)
        if submit is not None:
            futures = submit(completions)
        else:
            futures = []
            for verdict in self.grader(completions):
                fut: Future = Future()
                fut.set_result(verdict)
                futures.append(fut)
        self._pending.extend(zip(completions, futures))

    def ready(self) -> list[Completion]:
        """The completions whose verdict is in, `score` set (a grader's error is raised)."""
        out, waiting = [], deque()
        for completion, fut in self._pending:
            if fut.done():
                completion.score = fut.result()
                out.append(completion)
            else:
                waiting.append((completion, fut))
        self._pending = waiting
        return out

    def __len__(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self._pending.clear()
        close = getattr(self.grader, "close", None)
        if close is not None:
            close()


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
