"""The trainer's prompt source: train split of prompts.parquet, task mix, NPR, resumable order.

`PromptSource` draws the prompts of each step:

- each prompt slot picks its task (math/code) with a seeded NumPy generator, by the run's
  `task_weights` (tasks with weight 0 never appear);
- within a task, prompts come from that task's `NoPositiveResampling` epoch sampler
  (`scalerl.rl.curriculum`): shuffled epochs, and with NPR on, prompts whose historical pass
  rate reached the threshold are retired from later epochs. A task whose prompts are all
  retired drops out of the mix (the others keep their relative weights); when every task is
  exhausted `AllPromptsRetired` ends training with a clear message;
- `state_dict()` holds both samplers and the task generator, so a resumed run draws the same
  prompts as an uninterrupted one.

Prompts are tokenized once (`format_prompt` of the model helper) and cached.

Deliberately left out: the verifier (the trainer calls `scalerl.rewards`) and any filtering of
the prompt set (that is `scalerl data`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scalerl.data.io import PROMPT_COLUMNS as _FILE_COLUMNS
from scalerl.data.io import prompt_rows
from scalerl.rl.curriculum import AllPromptsRetired, NoPositiveResampling

__all__ = ["PROMPT_COLUMNS", "PromptSource", "load_prompt_table"]

PROMPT_COLUMNS = _FILE_COLUMNS[:8]  # every column but the optional `solution`
_TASK_SEED_OFFSET = {"math": 0, "code": 1}


def load_prompt_table(path: str | Path, split: str = "train") -> list[dict[str, Any]]:
    """Rows of one split of prompts.parquet as plain dicts (file order)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompts file {path} does not exist (make it with `scalerl data`)")
    return prompt_rows(pd.read_parquet(path), path, split, PROMPT_COLUMNS)


class PromptSource:
    """Task-mixed, NPR-filtered, resumable prompt draws (see the module docstring)."""

    def __init__(
        self,
        rows: Sequence[Mapping[str, Any]],
        weights: Mapping[str, float],
        tokenize: Callable[[str], Sequence[int]],
        *,
        npr_threshold: float | None,
        npr_min_samples: int,
        seed: int,
    ) -> None:
        self.rows = {str(r["prompt_id"]): dict(r) for r in rows}
        self.tasks = [t for t, w in weights.items() if w > 0]
        if not self.tasks:
            raise ValueError("task weights: at least one task needs a positive weight")
        self.weights = {t: float(weights[t]) for t in self.tasks}
        self.samplers: dict[str, NoPositiveResampling] = {}
        for task in self.tasks:
            ids = [pid for pid, r in self.rows.items() if r["task"] == task]
            if not ids:
                raise ValueError(
                    f"task_weights gives {task!r} weight {weights[task]} but the prompt set has "
                    f"no train prompts of that task; set its weight to 0 or add {task} prompts"
                )
            self.samplers[task] = NoPositiveResampling(
                ids, threshold=npr_threshold, min_samples=npr_min_samples,
                seed=seed * 7 + _TASK_SEED_OFFSET.get(task, 2),
            )
        self.exhausted: set[str] = set()
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self._tokenize = tokenize
        self._tokens: dict[str, tuple[int, ...]] = {}

    # -- drawing --------------------------------------------------------------------------
    def draw(self, n: int) -> list[str]:
        """`n` prompt ids for the next step (tasks by weight, prompts by NPR epoch order)."""
        out: list[str] = []
        while len(out) < n:
            active = [t for t in self.tasks if t not in self.exhausted]
            if not active:
                raise AllPromptsRetired(
                    "No-Positive-Resampling retired every training prompt of every task "
                    f"({', '.join(self.tasks)}); add harder prompts or raise npr_threshold"
                )
            p = np.array([self.weights[t] for t in active])
            task = active[int(self.rng.choice(len(active), p=p / p.sum()))]
            try:
                out.append(str(self.samplers[task].next_batch(1)[0]))
            except AllPromptsRetired:
                self.exhausted.add(task)
        return out

    def row(self, prompt_id: str) -> dict[str, Any]:
        return self.rows[prompt_id]

    def prompt_tokens(self, prompt_id: str) -> tuple[int, ...]:
        if prompt_id not in self._tokens:
            self._tokens[prompt_id] = tuple(int(i) for i in
                                            self._tokenize(self.rows[prompt_id]["prompt"]))
        return self._tokens[prompt_id]

    # -- No-Positive-Resampling -----------------------------------------------------------
    def update(self, prompt_ids: Iterable[str], correct: Iterable[bool]) -> list[str]:
        """Record graded completions in their task's pass-rate history; returns the prompt ids
        this update retired."""
        by_task: dict[str, tuple[list[str], list[bool]]] = {}
        for pid, ok in zip(prompt_ids, correct):
            task = self.rows[pid]["task"]
            ids, oks = by_task.setdefault(task, ([], []))
            ids.append(pid)
            oks.append(bool(ok))
        retired: list[str] = []
        for task, (ids, oks) in by_task.items():
            retired.extend(str(p) for p in self.samplers[task].update(ids, oks))
        return retired

    @property
    def n_retired(self) -> int:
        return sum(s.n_retired for s in self.samplers.values())

    # -- checkpointing --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "samplers": {t: s.state_dict() for t, s in self.samplers.items()},
            "exhausted": sorted(self.exhausted),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if sorted(state["samplers"]) != sorted(self.samplers):
            raise ValueError(
                f"sampler state has tasks {sorted(state['samplers'])} but this run samples "
                f"{sorted(self.samplers)}; resume with the run's original task_weights"
            )
        for task, s in state["samplers"].items():
            self.samplers[task].load_state_dict(s)
        self.exhausted = set(state["exhausted"])
        self.rng.bit_generator.state = state["rng"]
