"""The runs of a sweep: grid expansion, run ids, and each run's RunConfig.

`expand(sweep)` turns the grid into `Run`s keyed by a readable id
`{model}_L{gen_len}_{recipe}_b{prompts}x{generations}_s{seed}[_{mix}]` (the mix only when the
sweep has several). `run_recipe(sweep, run)` is the run's typed `RecipeConfig`, merged once
(`scalerl.rl.recipe.recipe_from_preset`) in the order its docstring lists; `run_config(sweep,
run, base=..., prompts=...)` builds the run's `RunConfig` around it. `train`'s further
RunConfig fields and the `eval` section are copied as they are.
`check_runs` builds every run's config and recipe, every model's BaseConfig and the
DataConfig, so a bad value fails before any job with the run and the keys to look at.

Deliberately left out: file layout (the workflow's `common.smk` names every path).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from typing import Any

from scalerl.config import ConfigError
from scalerl.rl.recipe import RecipeConfig, recipe_from_preset
from scalerl.rl.run_config import RunConfig
from scalerl.sweep.config import SweepConfig

__all__ = ["AXES", "Run", "check_runs", "expand", "run_config", "run_id", "run_recipe"]

# The sweep's coordinates of a run besides its seed: the report's columns, the cells whose
# seeds are raced and summarised together.
AXES = ("model", "gen_len", "recipe", "batch", "mix")


@dataclasses.dataclass(frozen=True)
class Run:
    """One point of the sweep."""

    id: str
    model: str
    gen_len: int
    recipe: str
    prompts: int
    generations: int
    seed: int
    mix: str

    def meta(self) -> dict[str, Any]:
        """The run's sweep coordinates (tags of its fits and report rows)."""
        return {"run": self.id, "model": self.model, "gen_len": self.gen_len,
                "recipe": self.recipe, "batch": f"{self.prompts}x{self.generations}",
                "seed": self.seed, "mix": self.mix}

    @property
    def cell(self) -> str:
        """The run's coordinates but its seed (`AXES`, joined by '_'): the seeds of one cell
        are raced together (`scalerl.sweep.options.race_options`)."""
        meta = self.meta()
        return "_".join(str(meta[axis]) for axis in AXES)


def run_id(model: str, gen_len: int, recipe: str, prompts: int, generations: int, seed: int,
           mix: str | None = None) -> str:
    """`{model}_L{gen_len}_{recipe}_b{prompts}x{generations}_s{seed}[_{mix}]`."""
    out = f"{model}_L{gen_len}_{recipe}_b{prompts}x{generations}_s{seed}"
    return f"{out}_{mix}" if mix else out


def expand(sweep: SweepConfig) -> dict[str, Run]:
    """Every combination of the grid as a Run, in grid order; ConfigError on a run-id clash."""
    grid = sweep.grid
    runs: dict[str, Run] = {}
    tag_mix = len(grid.mixes) > 1
    for model, gen_len, recipe, batch, seed, mix in itertools.product(
        grid.models, grid.gen_lens, grid.recipes, grid.batches, grid.seeds, grid.mixes,
    ):
        prompts, generations = (int(x) for x in batch.split("x"))
        rid = run_id(model, gen_len, recipe, prompts, generations, seed, mix if tag_mix else None)
        if rid in runs:
            raise ConfigError(f"invalid config: two runs of the sweep have the id {rid!r}; "
                              "make the sweep lists' entries distinct")
        runs[rid] = Run(rid, model, gen_len, recipe, prompts, generations, seed, mix)
    return runs


def run_recipe(sweep: SweepConfig, run: Run) -> RecipeConfig:
    """The run's recipe: its preset (`recipes.<recipe>.preset`, or the preset of that name)
    with these layers merged over it in this order, later winning (nested mappings merge):

    1. `train.recipe_overrides` (every run),
    2. `models.<model>.recipe_overrides` (that model's runs),
    3. `recipes.<recipe>.overrides` (that recipe's runs),
    4. the batch shape: `prompts_per_step`, `generations_per_prompt` from `sweep.batches`,
    5. the length budgets of the run's generation length by the `length` rules
       (`LengthConfig.recipe_fields`: think_budget, answer_budget, length_penalty).

    Layers 1-3 may not set the fields of 4 and 5 (`load_sweep` says so). The one merge of the
    run's recipe, typed here; run.yaml carries the result whole."""
    entry = sweep.recipe(run.recipe)
    batch = {"prompts_per_step": run.prompts, "generations_per_prompt": run.generations}
    return recipe_from_preset(entry.preset, sweep.recipe_overrides,
                              sweep.models[run.model].recipe_overrides, entry.overrides, batch,
                              sweep.length.recipe_fields(run.gen_len))


def run_config(sweep: SweepConfig, run: Run, *, base: str, prompts: str) -> RunConfig:
    """The run's RunConfig (written to runs/RUN/run.yaml by the workflow)."""
    steps = sweep.steps_per_chunk
    chunking = {"chunk_steps": list(steps)} if isinstance(steps, tuple) else {
        "steps_per_chunk": steps}
    data = {
        "run": run.id,
        "seed": run.seed,
        "model": run.model,
        "base": base,
        "prompts": prompts,
        "recipe_name": run.recipe,
        "recipe": run_recipe(sweep, run),
        **chunking,
        "task_weights": sweep.mixes[run.mix].to_dict(),
        "eval": sweep.eval.to_dict(),
        **copy.deepcopy(sweep.run_fields),
    }
    return RunConfig.from_dict(data)


def check_runs(sweep: SweepConfig, runs: dict[str, Run]) -> None:
    """Build every run's config and recipe, each model's BaseConfig and the DataConfig with
    the package's strict classes; one ConfigError listing every problem."""
    problems: list[str] = []
    failed_models: set[str] = set()
    for run in runs.values():
        if run.model in failed_models:
            continue  # one per model is enough: its runs share these keys
        try:
            run_config(sweep, run, base="base", prompts="prompts")
        except (ConfigError, ValueError) as err:
            problems.append(f"run {run.id} (train.recipe_overrides, models.{run.model}."
                            f"recipe_overrides, recipes.{run.recipe}, train, eval, length): {err}")
            failed_models.add(run.model)
    from scalerl.basemodel.cli import BaseConfig
    from scalerl.data.config import DataConfig

    for name in sweep.grid.models:
        try:
            BaseConfig.from_dict(sweep.models[name].config)
        except (ConfigError, ValueError) as err:
            problems.append(f"models.{name}.config: {err}")
    try:
        DataConfig.from_dict(sweep.data_config)
    except (ConfigError, ValueError) as err:
        problems.append(f"data.config: {err}")
    if problems:
        raise ConfigError("invalid config (see config/README.md):\n"
                          + "\n".join(f"  - {p}" for p in problems))
