"""No-Positive-Resampling (NPR) and the epoch sampler over training prompts.

ScaleRL paper §3.2 (after Polaris, An et al. 2025): keep a history of every prompt's pass
rate and permanently remove prompts whose pass rate is >= 0.9 from subsequent epochs; this
"improves scalability and the asymptotic reward". The paper's objective (§4) writes it as the
constraint pass_rate(x) < 0.9.

`NoPositiveResampling` is the one prompt sampler the trainer uses, with or without NPR:

- `update(prompt_ids, correct)` records one entry per graded completion.
- The pass rate of a prompt is its historical (all epochs) fraction of correct completions.
  A prompt is *retired* once it has at least `min_samples` graded completions and its pass
  rate is >= `threshold`; retirement is permanent, even if later samples would lower the
  rate. `threshold=None` disables retirement (history is still recorded and reported).
- `next_batch(n)` walks a shuffled epoch of the active prompts. Each new epoch shuffles the
  prompts still active, with a generator seeded by (seed, epoch), so the order depends only on
  the seed, the epoch and the retirement history. A prompt retired after its epoch was drawn
  (PipelineRL delivers results late) is skipped when its turn comes. A batch that reaches
  the end of an epoch continues into the next, so with fewer active prompts than `n` a batch
  may hold a prompt twice.
- `state_dict()` / `load_state_dict()`: the whole state (history, retired set, epoch, order
  and position) as plain JSON-serialisable data; continuing after a load yields the same
  batches as an uninterrupted run.
- When every prompt is retired, `next_batch` raises `AllPromptsRetired`.

Prompt ids are ints or strings (anything JSON keeps as-is), unique.

Deliberately left out: difficulty-weighted sampling, re-admitting retired prompts, and the
zero-variance batch filter (that is `scalerl.rl.filters`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["AllPromptsRetired", "NoPositiveResampling"]

PromptId = int | str
_STATE_VERSION = 1


class AllPromptsRetired(RuntimeError):
    """Every training prompt has been retired by No-Positive-Resampling."""


def _plain_ids(values: Iterable[Any]) -> list[PromptId]:
    out: list[PromptId] = []
    for v in values:
        if hasattr(v, "item"):  # tensor / numpy scalar
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise ValueError(f"prompt ids must be int or str, got {v!r} ({type(v).__name__})")
        out.append(v)
    return out


class NoPositiveResampling:
    """Per-prompt pass-rate history, retirement at `threshold`, and a resumable epoch sampler."""

    def __init__(
        self,
        prompt_ids: Sequence[PromptId],
        threshold: float | None = 0.9,
        min_samples: int = 1,
        seed: int = 0,
    ) -> None:
        ids = _plain_ids(prompt_ids)
        if not ids:
            raise ValueError("NoPositiveResampling needs at least one prompt id")
        if len(set(ids)) != len(ids):
            raise ValueError("prompt ids must be unique")
        if threshold is not None and not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold = {threshold} must be in (0, 1], or None to disable")
        if min_samples < 1:
            raise ValueError(f"min_samples = {min_samples} must be >= 1")
        self.prompt_ids: list[PromptId] = ids
        self.threshold = threshold
        self.min_samples = int(min_samples)
        self.seed = int(seed)
        self._known = set(ids)
        self._n_seen: dict[PromptId, int] = {}
        self._n_correct: dict[PromptId, int] = {}
        self._retired: set[PromptId] = set()
        self.epoch = -1  # no epoch drawn yet
        self._order: list[PromptId] = []
        self._pos = 0

    # -- history --------------------------------------------------------------------------
    def update(self, prompt_ids: Iterable[Any], correct: Iterable[Any]) -> list[PromptId]:
        """Record graded completions (one prompt id per completion); return newly retired ids."""
        ids = _plain_ids(prompt_ids)
        flags = [bool(c.item() if hasattr(c, "item") else c) for c in correct]
        if len(ids) != len(flags):
            raise ValueError(f"{len(ids)} prompt ids but {len(flags)} correctness flags")
        unknown = sorted({str(i) for i in ids if i not in self._known})
        if unknown:
            raise ValueError(f"unknown prompt id(s) {unknown[:5]}: not in this sampler's set")
        for pid, ok in zip(ids, flags):
            self._n_seen[pid] = self._n_seen.get(pid, 0) + 1
            self._n_correct[pid] = self._n_correct.get(pid, 0) + int(ok)
        newly = []
        if self.threshold is not None:
            for pid in dict.fromkeys(ids):
                if pid in self._retired or self._n_seen[pid] < self.min_samples:
                    continue
                if self._n_correct[pid] / self._n_seen[pid] >= self.threshold:
                    self._retired.add(pid)
                    newly.append(pid)
        return newly

    def pass_rate(self, prompt_id: PromptId) -> float | None:
        """Historical pass rate of one prompt, or None if it was never graded."""
        n = self._n_seen.get(prompt_id, 0)
        return self._n_correct[prompt_id] / n if n else None

    def is_retired(self, prompt_id: PromptId) -> bool:
        return prompt_id in self._retired

    @property
    def n_retired(self) -> int:
        return len(self._retired)

    @property
    def n_active(self) -> int:
        return len(self.prompt_ids) - len(self._retired)

    # -- sampling -------------------------------------------------------------------------
    def _new_epoch(self) -> None:
        active = [p for p in self.prompt_ids if p not in self._retired]
        if not active:
            raise AllPromptsRetired(
                f"all {len(self.prompt_ids)} training prompts have a historical pass rate >= "
                f"{self.threshold} and were retired by No-Positive-Resampling; add harder "
                "prompts, raise npr_threshold, or disable it (npr_threshold: null)"
            )
        self.epoch += 1
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        rng.shuffle(active)
        self._order = active
        self._pos = 0

    def next_batch(self, n: int) -> list[PromptId]:
        """The next `n` prompt ids of the shuffled epoch walk (crossing epochs as needed)."""
        if n < 1:
            raise ValueError(f"batch size n = {n} must be >= 1")
        batch: list[PromptId] = []
        while len(batch) < n:
            if self._pos >= len(self._order):
                self._new_epoch()
            pid = self._order[self._pos]
            self._pos += 1
            if pid not in self._retired:
                batch.append(pid)
        return batch

    # -- checkpointing --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, as JSON-serialisable lists and numbers."""
        return {
            "version": _STATE_VERSION,
            "prompt_ids": list(self.prompt_ids),
            "threshold": self.threshold,
            "min_samples": self.min_samples,
            "seed": self.seed,
            "history": [[p, self._n_seen[p], self._n_correct[p]] for p in self._n_seen],
            "retired": [p for p in self.prompt_ids if p in self._retired],
            "epoch": self.epoch,
            "order": list(self._order),
            "position": self._pos,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; the prompt set and settings must match this sampler."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported NPR state version {state.get('version')!r}")
        for key in ("threshold", "min_samples", "seed"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"NPR state has {key}={state[key]!r} but this sampler has "
                    f"{getattr(self, key)!r}; resume with the run's original settings"
                )
        if list(state["prompt_ids"]) != self.prompt_ids:
            raise ValueError(
                "NPR state was saved for a different prompt set (ids or order differ); "
                "resume with the run's original training prompts"
            )
        self._n_seen = {p: int(n) for p, n, _ in state["history"]}
        self._n_correct = {p: int(c) for p, _, c in state["history"]}
        self._retired = set(state["retired"])
        self.epoch = int(state["epoch"])
        self._order = list(state["order"])
        self._pos = int(state["position"])
        if not 0 <= self._pos <= len(self._order):
            raise ValueError(f"NPR state position {self._pos} outside its epoch order")
