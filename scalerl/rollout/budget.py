"""GenerationBudget: how many tokens one completion may have, computed in one place.

The trainer (`scalerl.rl.trainer`), evaluation (`scalerl.eval.runner`) and the memory planner
(`scalerl.plan.adapters`) all build their per-sample limits with
`GenerationBudget.from_recipe`, so training and evaluation cannot disagree (docs/design.md,
"Generation budget"). With forced interruption (ScaleRL §3.2) a sample thinks for a budget
drawn from `think_budget = [lo, hi]`, then the interruption text (n tokens) is appended and
`answer_budget` more tokens are allowed:

    max_new_tokens = hi + n_interrupt_tokens + answer_budget

With `length_penalty` (DAPO Eq. 9) or no length control the cap is L_max
(`length_penalty.max_len`) resp. hi + answer_budget. A run's `max_new_tokens` (RunConfig)
may lower the cap; with interruption it must still hold hi + n + answer, or the inserted
text would be cut.

Deliberately left out: the prompt's own length (the engines check prompt + cap against the
model context in `scalerl.rollout.config.check_request`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scalerl.config import ConfigError

__all__ = ["GenerationBudget"]


@dataclasses.dataclass(frozen=True)
class GenerationBudget:
    """Per-sample generation limits of a run (see the module docstring)."""

    max_new_tokens: int  # hard cap on generated tokens (thinking + inserted text + answer)
    gen_len: int  # the run's generation length L: hi + answer budget, or L_max
    think_budget: tuple[int, int] | None  # [lo, hi] when interruption is on, else None
    answer_budget: int  # tokens after </think> or the interruption (0 without interruption)

    @classmethod
    def from_recipe(cls, recipe: Any, n_interrupt_tokens: int,
                    cap: int | None = None) -> GenerationBudget:
        """The budget of `recipe` (a RecipeConfig) whose interruption text is
        `n_interrupt_tokens` tokens long, under an optional hard `cap` (RunConfig.max_new_tokens)."""
        hi = int(recipe.think_budget[1])
        if recipe.length_control == "interruption":
            need = hi + n_interrupt_tokens + recipe.answer_budget
            if cap is not None and cap < need:
                raise ConfigError(
                    f"max_new_tokens = {cap} is below think_budget hi {hi} + "
                    f"{n_interrupt_tokens} interruption tokens + answer_budget "
                    f"{recipe.answer_budget} = {need}; lower the recipe budgets or raise it")
            return cls(max_new_tokens=cap or need, gen_len=hi + recipe.answer_budget,
                       think_budget=(int(recipe.think_budget[0]), hi),
                       answer_budget=int(recipe.answer_budget))
        if recipe.length_control == "length_penalty":
            gen_len = int(recipe.length_penalty.max_len)
        else:
            gen_len = hi + int(recipe.answer_budget)
        return cls(max_new_tokens=gen_len if cap is None else min(gen_len, cap),
                   gen_len=gen_len, think_budget=None, answer_budget=0)
