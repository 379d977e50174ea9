"""RunConfig: everything that defines one training run of the sweep (one YAML file per run).

A run is one point of the sweep (DESIGN.md): model × generation length × recipe × batch ×
seed × task mix. Its RunConfig is written by the workflow into `run.yaml` and read by
`scalerl train` (every chunk) and `scalerl eval` (every checkpoint). The objective and its
alternatives live in the `recipe` section: a preset name (`scalerl`, `loo-*`, `deepseek-grpo`,
`qwen25-dapo`, `magistral`, `minimax-m1`) plus overrides of any `RecipeConfig` field, resolved
by `scalerl.rl.recipe.recipe_from_preset`. The batch shape (prompts × generations), the
off-policy mode, length control (hence the generation length) and optimizer settings are
recipe fields; `max_new_tokens` here only caps them further.

Example (`run.yaml`):

    run: tiny-m_L48_scalerl_b16x8_s0
    seed: 0
    model: tiny-m
    recipe: {preset: scalerl, overrides: {prompts_per_step: 16, generations_per_prompt: 8}}
    steps_per_chunk: 50          # or chunk_steps: [3, 3, 6, 10, 18, 20] (one per chunk)
    save_every: 10
    task_weights: {math: 1.0, code: 0.0}
    eval: {samples_per_prompt: 4, max_prompts: 200}

Paths (`base`, `prompts`) may be given here or on the `scalerl train` command line (the
command line wins).

Deliberately left out: anything about the sweep (which runs exist) and the workflow layout;
those belong to config/config.yaml and the Snakefile.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from scalerl.config import Config, ConfigError, field_, load_mapping
from scalerl.rl.rollout_log import RolloutLogConfig
from scalerl.tracking.config import TrackingConfig

__all__ = ["EvalConfig", "RecipeSpec", "RunConfig", "TaskWeights", "load_run_config"]


@dataclasses.dataclass(frozen=True)
class RecipeSpec(Config):
    """A recipe preset plus overrides of its `RecipeConfig` fields."""

    preset: str = field_("scalerl", "recipe preset: scalerl, loo-*, deepseek-grpo, qwen25-dapo, "
                         "magistral, minimax-m1 (see scalerl.rl.recipe)")
    overrides: dict[str, Any] = field_(
        default_factory=dict,
        doc="RecipeConfig fields that replace the preset's values (nested mappings merge)",
    )

    def build(self) -> Any:
        """The resolved `scalerl.rl.recipe.RecipeConfig` (unknown keys raise ConfigError)."""
        from scalerl.rl.recipe import recipe_from_preset

        return recipe_from_preset(self.preset, dict(self.overrides))


@dataclasses.dataclass(frozen=True)
class TaskWeights(Config):
    """Sampling weights of the task families; each prompt of a step draws its task by weight."""

    math: float = field_(1.0, "weight of math prompts", ge=0)
    code: float = field_(0.0, "weight of code prompts", ge=0)

    def validate(self) -> None:
        super().validate()
        if self.math + self.code <= 0:
            raise ConfigError("task_weights: at least one of math, code must be > 0")

    def as_dict(self) -> dict[str, float]:
        """Only the tasks with positive weight."""
        return {k: v for k, v in (("math", self.math), ("code", self.code)) if v > 0}


@dataclasses.dataclass(frozen=True)
class EvalConfig(Config):
    """How `scalerl eval` measures a checkpoint (validation pass rate, paper: mean@16)."""

    samples_per_prompt: int = field_(4, "samples per validation prompt (paper: 16)", ge=1)
    max_prompts: int = field_(200, "validation prompts used per task (0 = all)", ge=0)
    temperature: float = field_(1.0, "sampling temperature for evaluation", gt=0)


@dataclasses.dataclass(frozen=True)
class RunConfig(Config):
    """One training run: model, recipe, chunking, task mix, engine and device."""

    run: str = field_("run", "run id, used in file names and every output row")
    seed: int = field_(0, "seed of data order, sampling and initialisation", ge=0)
    model: str = field_("tiny-m", "model label written into outputs (eval `model` column)")
    base: str | None = field_(None, "base model directory (HF format) for chunk 0; "
                              "`scalerl train --init` overrides it")
    prompts: str | None = field_(None, "prompts.parquet; `scalerl train --prompts` overrides it")
    recipe: RecipeSpec = field_(default_factory=RecipeSpec, doc="recipe preset + overrides")
    steps_per_chunk: int = field_(50, "optimizer steps per training chunk", ge=1)
    chunk_steps: tuple[int, ...] = field_(
        (), "optimizer steps of each chunk when chunks differ in length: chunk k (from 0) "
        "trains chunk_steps[k]; empty = every chunk trains steps_per_chunk. Growing chunks "
        "(e.g. 3, 3, 6, 10, 18, 20) spread the checkpoints evenly over log compute, the "
        "fit's axis",
    )
    save_every: int = field_(
        10, "intra-chunk resume save every N steps (0 = only the chunk's final checkpoint)", ge=0
    )
    task_weights: TaskWeights = field_(default_factory=TaskWeights, doc="math/code mix")
    max_new_tokens: int | None = field_(
        None, "hard cap on generated tokens per sample; null = the recipe's cap (think_budget "
        "hi + answer_budget, or length_penalty.max_len)", ge=1,
    )
    temperature: float = field_(1.0, "sampling temperature of the generators", gt=0)
    engine: str = field_("hf", "generation engine: hf (torch) or vllm", choices=("hf", "vllm"))
    device: str = field_("auto", "auto (cuda when present), cpu or cuda",
                         choices=("auto", "cpu", "cuda"))
    threads: int = field_(
        0, "torch threads per process (0 = the machine's cores split between the trainer and "
        "the generator processes)", ge=0,
    )
    generators: int = field_(
        1, "generator processes in pipeline mode (on CUDA each takes its own device when "
        "enough devices exist)", ge=1,
    )
    gen_batch: int = field_(
        0, "sequences each generator decodes together (KV-cache rows); 0 = one step's B×G", ge=0
    )
    train_micro_batch: int = field_(
        0, "prompts (groups) per trainer forward/backward; 0 = the whole batch at once", ge=0
    )
    eval: EvalConfig = field_(default_factory=EvalConfig, doc="evaluation settings")
    rollouts: RolloutLogConfig = field_(
        default_factory=RolloutLogConfig, doc="per-sample rollouts.parquet in every chunk")
    tracking: TrackingConfig = field_(
        default_factory=TrackingConfig, doc="experiment tracker: none, wandb, mlflow, tensorboard")

    def generation_cap(self, recipe: Any) -> int:
        """Tokens a completion may have: `max_new_tokens`, or the recipe's cap when null."""
        cap = int(recipe.max_new_tokens)
        return cap if self.max_new_tokens is None else min(cap, self.max_new_tokens)

    def steps_in_chunk(self, chunk: int) -> int:
        """Optimizer steps that chunk `chunk` (numbered from 0) trains."""
        if not self.chunk_steps:
            return self.steps_per_chunk
        if not 0 <= chunk < len(self.chunk_steps):
            raise ConfigError(
                f"chunk {chunk}: chunk_steps lists {len(self.chunk_steps)} chunk(s) "
                f"(0..{len(self.chunk_steps) - 1}); add entries to chunk_steps for later chunks")
        return self.chunk_steps[chunk]

    def validate(self) -> None:
        super().validate()
        if any(steps < 1 for steps in self.chunk_steps):
            raise ConfigError(f"chunk_steps = {list(self.chunk_steps)}: every chunk needs >= 1 "
                              "step")
        if not self.run or any(c in self.run for c in "/\\ \t\n"):
            raise ConfigError(f"run = {self.run!r}: use a non-empty id without '/' or spaces")


def load_run_config(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a RunConfig from YAML/JSON, apply nested `overrides`, validate strictly."""
    data = load_mapping(path)
    cfg = RunConfig.from_dict(data)
    if overrides:
        cfg = cfg.replace(**overrides)
    cfg.recipe.build()  # fail early on a bad preset or override
    return cfg
