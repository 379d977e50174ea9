"""The task record shared by generators, loaders, the dataset builder and the verifiers.

A `TaskExample` is one prompt with what is needed to score an answer to it:
- math: `answer` holds the reference final answer (the text that would go in `\\boxed{}`);
- code: `tests` holds a JSON string in the canonical test format of `scalerl.tasks.code_tests`
  (function-call or stdin/stdout cases), never shown to the model.

`solution` is a full worked target the model could produce after the prompt
(`<think>...</think>` followed by the answer); synthetic tasks always have one (the SFT warm start
of tiny models uses it), loaded datasets usually do not (empty string).

Rows of prompts.parquet carry the same fields plus `split`; `TaskExample.to_row()` gives the
plain dict used everywhere a "task row" (a Mapping) is expected, e.g. `scalerl.rewards.score`.

`pass_rate` is the solve rate a dataset records for the prompt (Polaris-53K: `difficulty`
"6/8" -> 0.75), read by the build's difficulty filter; None when unknown. It is not a
prompts.parquet column, so `to_row()` leaves it out.

Deliberately left out: chat templates and system prompts (prompts stay raw text; formatting for
instruction-tuned models belongs to the rollout side).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from scalerl.text import BOXED_OPEN, THINK_CLOSE, THINK_OPEN

__all__ = ["TaskExample", "TaskKind", "THINK_OPEN", "THINK_CLOSE", "BOXED_OPEN", "make_prompt_id",
           "MalformedRowError"]

TaskKind = Literal["math", "code"]

ROW_FIELDS = ("prompt_id", "task", "source", "prompt", "answer", "tests", "difficulty", "solution")


class MalformedRowError(ValueError):
    """A loaded or constructed row is missing a field or has a wrong value; names both."""


def make_prompt_id(source: str, prompt: str) -> str:
    """A stable id from the source name and the prompt text (same prompt -> same id)."""
    digest = hashlib.sha1(f"{source}\x00{prompt}".encode()).hexdigest()[:12]
    return f"{source}-{digest}"


@dataclasses.dataclass(frozen=True)
class TaskExample:
    """One prompt of a math or code task with its reference answer / hidden tests."""

    prompt_id: str
    task: TaskKind
    source: str
    prompt: str
    answer: str | None  # math: reference final answer; code: None
    tests: str | None  # code: JSON test spec (scalerl.tasks.code_tests); math: None
    difficulty: int
    solution: str = ""  # full worked target "<think>...</think>answer"; "" when unknown
    pass_rate: float | None = None  # recorded solve rate in [0, 1] (Polaris "k/n"); None: unknown

    def __post_init__(self) -> None:
        where = f"row {self.prompt_id!r}"
        if self.task not in ("math", "code"):
            raise MalformedRowError(f"{where}: task must be 'math' or 'code', got {self.task!r}")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise MalformedRowError(f"{where}: field 'prompt' is empty or not a string")
        if self.task == "math" and (not isinstance(self.answer, str) or not self.answer.strip()):
            raise MalformedRowError(f"{where}: math row needs a non-empty string 'answer', "
                                    f"got {self.answer!r}")
        if self.task == "code" and (not isinstance(self.tests, str) or not self.tests.strip()):
            raise MalformedRowError(f"{where}: code row needs a JSON string 'tests', "
                                    f"got {self.tests!r}")
        if isinstance(self.difficulty, bool) or not isinstance(self.difficulty, int):
            raise MalformedRowError(f"{where}: field 'difficulty' must be an int, "
                                    f"got {self.difficulty!r}")
        if self.pass_rate is not None and not 0.0 <= self.pass_rate <= 1.0:
            raise MalformedRowError(f"{where}: field 'pass_rate' must be in [0, 1] or None, "
                                    f"got {self.pass_rate!r}")

    def to_row(self) -> dict[str, Any]:
        """The plain dict form (prompts.parquet columns except `split`; no `pass_rate`)."""
        row = dataclasses.asdict(self)
        del row["pass_rate"]
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TaskExample:
        """Build from a Mapping with the `ROW_FIELDS` keys (extra keys such as `split` ignored)."""
        missing = [k for k in ROW_FIELDS[:7] if k not in row]
        if missing:
            raise MalformedRowError(f"row {row.get('prompt_id')!r}: missing field(s) {missing}")

        def opt(v: Any) -> Any:
            return None if v is None or (isinstance(v, float) and v != v) else v

        return cls(prompt_id=str(row["prompt_id"]), task=row["task"], source=str(row["source"]),
                   prompt=row["prompt"], answer=opt(row["answer"]), tests=opt(row["tests"]),
                   difficulty=int(row["difficulty"]), solution=opt(row.get("solution")) or "")
