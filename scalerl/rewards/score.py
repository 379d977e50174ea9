"""The reward entry point: `score(task_row, completion_text) -> Score`.

`task_row` is any Mapping with `task` ("math" | "code") plus `answer` (math) or `tests` (code,
canonical JSON), e.g. a prompts.parquet row or `TaskExample.to_row()`. The completion is the
generated text after the prompt (special tokens kept). Grading:
- the answer part is what follows the last `</think>`; no `</think>` -> incorrect;
- math: the last `\\boxed{}` of the answer part against `answer` (fast integer path, else
  math-verify in killable workers with a wall-clock timeout);
- code: the last fenced code block of the answer part against the hidden tests in the sandbox.

Reward is the paper's binary training reward: +1 correct, -1 incorrect (ScaleRL, Sec. 2);
`correct` is the 0/1 evaluation outcome. `score_many` grades a batch in parallel: math through
the worker pool, code runs through a bounded thread pool of sandbox children (each child is its
own process, so threads only wait); identical (program, tests) pairs in a batch run once.

Deliberately left out: format or length shaping of the reward (length control lives in the
trainer: forced interruption or the DAPO length penalty).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scalerl.rewards.code_verifier import check_code
from scalerl.rewards.extract import answer_part, extract_code, last_boxed
from scalerl.rewards.math_verifier import MathVerifierPool, check_math_many
from scalerl.rewards.sandbox import SandboxLimits

__all__ = ["Score", "score", "score_many", "REWARD_CORRECT", "REWARD_INCORRECT"]

REWARD_CORRECT = 1.0
REWARD_INCORRECT = -1.0


@dataclasses.dataclass(frozen=True)
class Score:
    """The grade of one completion."""

    correct: bool  # evaluation outcome (0/1)
    reward: float  # training reward: +1 correct, -1 incorrect
    detail: str  # why, e.g. "integer: equal", "no </think>", "case 2: wrong answer", "timeout"


def _make(correct: bool, detail: str) -> Score:
    return Score(correct=correct, reward=REWARD_CORRECT if correct else REWARD_INCORRECT,
                 detail=detail)


def _field(row: Mapping[str, Any], key: str) -> Any:
    value = row.get(key)
    if value is None or (isinstance(value, float) and value != value):  # None / NaN
        return None
    return value


def _prepare(row: Mapping[str, Any], text: str) -> tuple[str, Any] | Score:
    """('math', (gold, boxed)) / ('code', (code, tests)) to verify, or a final Score."""
    task = row.get("task")
    if task not in ("math", "code"):
        raise ValueError(f"task row {row.get('prompt_id')!r}: task must be 'math' or 'code', "
                         f"got {task!r}")
    answer = answer_part(text)
    if answer is None:
        return _make(False, "no </think>: the answer part is missing")
    if task == "math":
        gold = _field(row, "answer")
        if gold is None:
            raise ValueError(f"math row {row.get('prompt_id')!r} has no 'answer'")
        boxed = last_boxed(answer)
        if boxed is None:
            return _make(False, "no \\boxed{} in the answer part")
        return "math", (str(gold), boxed)
    tests = _field(row, "tests")
    if tests is None:
        raise ValueError(f"code row {row.get('prompt_id')!r} has no 'tests'")
    code = extract_code(answer)
    if code is None:
        return _make(False, "no fenced code block in the answer part")
    return "code", (code, tests)


def score(task_row: Mapping[str, Any], completion_text: str, *,
          pool: MathVerifierPool | None = None, limits: SandboxLimits | None = None) -> Score:
    """Grade one completion (see module docstring)."""
    return score_many([task_row], [completion_text], workers=1, pool=pool, limits=limits)[0]


def score_many(task_rows: Sequence[Mapping[str, Any]], completions: Sequence[str], *,
               workers: int | None = None, pool: MathVerifierPool | None = None,
               limits: SandboxLimits | None = None) -> list[Score]:
    """Grade `completions[i]` against `task_rows[i]` for all i, in parallel.

    workers: concurrent sandbox runs for code (default: the CPU count); math uses `pool`
    (default: the process-wide `default_pool()`).
    """
    if len(task_rows) != len(completions):
        raise ValueError(f"score_many: {len(task_rows)} task rows but {len(completions)} "
                         "completions")
    out: list[Score | None] = [None] * len(completions)
    math_jobs: list[tuple[int, tuple[str, str]]] = []
    code_jobs: list[tuple[int, tuple[str, Any]]] = []
    for i, (row, text) in enumerate(zip(task_rows, completions)):
        prepared = _prepare(row, text)
        if isinstance(prepared, Score):
            out[i] = prepared
        elif prepared[0] == "math":
            math_jobs.append((i, prepared[1]))
        else:
            code_jobs.append((i, prepared[1]))
    if math_jobs:
        verdicts = check_math_many([pair for _, pair in math_jobs], pool)
        for (i, _), (ok, detail) in zip(math_jobs, verdicts):
            out[i] = _make(ok, detail)
    if code_jobs:
        # identical programs for the same tests (common among the G samples of a prompt) run once
        unique = list(dict.fromkeys((code, str(tests)) for _, (code, tests) in code_jobs))
        n = max(1, min(workers or os.cpu_count() or 1, len(unique)))

        def run(job: tuple[str, str]) -> tuple[bool, str]:
            return check_code(job[0], job[1], limits)

        if n == 1:
            verdicts = dict(zip(unique, map(run, unique)))
        else:
            with ThreadPoolExecutor(max_workers=n) as ex:
                verdicts = dict(zip(unique, ex.map(run, unique)))
        for i, (code, tests) in code_jobs:
            out[i] = _make(*verdicts[(code, str(tests))])
    return out  # type: ignore[return-value]
