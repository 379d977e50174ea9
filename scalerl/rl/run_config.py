"""RunConfig: everything that defines one training run of the sweep (one YAML file per run).

A run is one point of the sweep (docs/design.md, "Sweep"): model × generation length × recipe
× batch × seed × task mix. Its RunConfig is built by `scalerl.sweep.run_config`, written into
`run.yaml`, and read by `scalerl train` (every chunk) and `scalerl eval` (every checkpoint).
The objective and its alternatives live in the `recipe` section: a preset name (`scalerl`,
`loo-*`, `deepseek-grpo`, `qwen25-dapo`, `magistral`, `minimax-m1`) plus overrides of any
`RecipeConfig` field, resolved by `scalerl.rl.recipe.recipe_from_preset`.

The generation length L is `gen_len`; `resolved_recipe()` turns it into the recipe's length
budgets with the `length` rules (thinking hi = L − answer_budget, lo = fraction × hi,
length-penalty L_max = L), so a recipe that sets those budgets itself is an error when
`gen_len` is given. The per-sample cap is `scalerl.rollout.budget.GenerationBudget`, the one
computation trainer and eval share; `max_new_tokens` here only overrides it.

Example (`run.yaml`):

    run: tiny-m_L48_scalerl_b16x8_s0
    seed: 0
    model: tiny-m
    gen_len: 80
    recipe: {name: scalerl, preset: scalerl, overrides: {prompts_per_step: 16,
             generations_per_prompt: 8}}
    steps_per_chunk: 50          # or chunk_steps: [3, 3, 6, 10, 18, 20] (one per chunk)
    save_every: 10
    task_weights: {math: 1.0, code: 0.0}
    eval: {samples_per_prompt: 4, max_prompts: 140}

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
from scalerl.rl.numerics import StepNumerics
from scalerl.rl.rollout_log import RolloutLogConfig
from scalerl.rollout.vllm_settings import VllmSettings
from scalerl.tracking.config import TrackingConfig

__all__ = ["EvalConfig", "LengthConfig", "RecipeSpec", "RunConfig", "TaskWeights",
           "load_run_config", "LENGTH_RECIPE_FIELDS"]

# Recipe fields that `gen_len` decides (RunConfig.resolved_recipe).
LENGTH_RECIPE_FIELDS = ("think_budget", "answer_budget", "length_penalty")


@dataclasses.dataclass(frozen=True)
class RecipeSpec(Config):
    """A recipe preset plus overrides of its `RecipeConfig` fields."""

    name: str = field_("", "the recipe's name in the sweep (run ids, the eval `recipe` column); "
                       "empty = the preset name")
    preset: str = field_("scalerl", "recipe preset: scalerl, loo-*, deepseek-grpo, qwen25-dapo, "
                         "magistral, minimax-m1 (see scalerl.rl.recipe)")
    overrides: dict[str, Any] = field_(
        default_factory=dict,
        doc="RecipeConfig fields that replace the preset's values (nested mappings merge)",
    )

    @property
    def label(self) -> str:
        """The name written into outputs: `name`, or the preset when unnamed."""
        return self.name or self.preset

    def build(self, extra: dict[str, Any] | None = None) -> Any:
        """The resolved `scalerl.rl.recipe.RecipeConfig` (unknown keys raise ConfigError);
        `extra` (nested) is merged over the overrides."""
        from scalerl.config import deep_merge
        from scalerl.rl.recipe import recipe_from_preset

        overrides = deep_merge(dict(self.overrides), dict(extra or {}))
        return recipe_from_preset(self.preset, overrides)


@dataclasses.dataclass(frozen=True)
class LengthConfig(Config):
    """How a generation length L becomes the recipe's length budgets (ScaleRL §3.2 / A.16)."""

    answer_budget: int = field_(
        2048, "tokens after </think> or the interruption; thinking hi = L − answer_budget "
        "(paper: 2,048)", ge=1)
    think_min_fraction: float = field_(
        0.8333, "thinking budget lo = round(fraction × hi) (paper: 10k/12k = 0.833)", gt=0, le=1)
    penalty_cache_fraction: float = field_(
        0.1429, "length_penalty recipes: L_max = L, L_cache = round(fraction × L) "
        "(paper DAPO baseline: 2k/14k)", gt=0, le=1)

    def recipe_fields(self, gen_len: int) -> dict[str, Any]:
        """The RecipeConfig fields that give a completion `gen_len` tokens."""
        if gen_len <= self.answer_budget:
            raise ConfigError(f"gen_len = {gen_len} leaves no thinking budget with "
                              f"length.answer_budget = {self.answer_budget}; raise gen_len or "
                              "lower answer_budget")
        hi = gen_len - self.answer_budget
        lo = max(1, round(self.think_min_fraction * hi))
        cache = max(1, round(self.penalty_cache_fraction * gen_len))
        return {"think_budget": [lo, hi], "answer_budget": self.answer_budget,
                "length_penalty": {"max_len": gen_len, "cache_len": cache}}


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

    samples_per_prompt: int = field_(16, "samples per validation prompt, k of mean@k "
                                     "(paper: 16)", ge=1)
    max_prompts: int = field_(1000, "validation prompts used per task (0 = all; paper: 1,000)",
                              ge=0)
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
    gen_len: int | None = field_(
        None, "generation length L (thinking + answer tokens); sets the recipe's think_budget, "
        "answer_budget and length_penalty by the `length` rules; null = the recipe's own", ge=2)
    length: LengthConfig = field_(default_factory=LengthConfig,
                                  doc="how gen_len becomes the length budgets")
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
        None, "hard cap on generated tokens per sample; null = the recipe's cap "
        "(scalerl.rollout.budget.GenerationBudget: think_budget hi + interruption + "
        "answer_budget, or length_penalty.max_len)", ge=1,
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
        1, "generator processes in pipeline mode, split evenly over the nodes (each node's "
        "first trainer rank runs its share; on CUDA each takes its own device(s) after the "
        "node's trainer ranks when enough devices exist, else they share its first)", ge=1,
    )
    pipeline_fixed_lag: int | None = field_(
        None, "pipeline: null = free-running (generators switch to each pushed weights at "
        "their next decode step; which version samples which token depends on timing, so runs "
        "are not reproducible); d in [0, recipe.max_lag] = fixed schedule: batch s is "
        "generated whole by policy version max(s − d, the chunk's first step), the generator "
        "waiting for it, so two runs of one config give the same samples, checkpoints and "
        "evals (scalerl.rl.pipeline; its cost against free-running in BENCHMARKS.md)", ge=0,
    )
    gen_batch: int = field_(
        0, "sequences each generator decodes together (KV-cache rows); 0 = one step's B×G", ge=0
    )
    train_micro_batch: int = field_(
        0, "prompts (groups) per trainer forward/backward; 0 = the whole batch at once", ge=0
    )
    trainer_ranks: int = field_(
        1, "data-parallel (FSDP2) trainer ranks, one per GPU on CUDA (gloo processes on CPU); "
        "> 1: `scalerl train` relaunches itself under torchrun (srun + torchrun across the "
        "nodes of a multi-node SLURM job), the same trainer at every size (scalerl.parallel)",
        ge=1,
    )
    eval: EvalConfig = field_(default_factory=EvalConfig, doc="evaluation settings")
    numerics: StepNumerics = field_(
        default_factory=StepNumerics,
        doc="trainer numerics at every world size: param/compute dtype, chunked FP32 head, "
        "token-budget micro-batches, gradient checkpointing (scalerl.rl.numerics)")
    vllm: VllmSettings = field_(default_factory=VllmSettings,
                                doc="vLLM engine settings (engine: vllm; scalerl.rollout."
                                "vllm_settings)")
    rollouts: RolloutLogConfig = field_(
        default_factory=RolloutLogConfig, doc="per-sample rollouts.parquet in every chunk")
    tracking: TrackingConfig = field_(
        default_factory=TrackingConfig, doc="experiment tracker: none, wandb, mlflow, tensorboard")

    def resolved_recipe(self) -> Any:
        """The run's RecipeConfig: preset + overrides, then the length budgets of `gen_len`."""
        if self.gen_len is None:
            return self.recipe.build()
        clash = sorted(set(self.recipe.overrides) & set(LENGTH_RECIPE_FIELDS))
        if clash:
            raise ConfigError(f"recipe.overrides sets {', '.join(clash)}, which gen_len = "
                              f"{self.gen_len} decides; remove them or set gen_len: null")
        return self.recipe.build(self.length.recipe_fields(self.gen_len))

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
        if self.pipeline_fixed_lag is not None:
            recipe = self.resolved_recipe()
            if recipe.off_policy == "pipeline" and self.pipeline_fixed_lag > recipe.max_lag:
                raise ConfigError(
                    f"pipeline_fixed_lag = {self.pipeline_fixed_lag} exceeds the recipe's "
                    f"max_lag = {recipe.max_lag}: a fixed schedule must keep the lag bound; "
                    "lower pipeline_fixed_lag or raise max_lag")
        if not self.run or any(c in self.run for c in "/\\ \t\n"):
            raise ConfigError(f"run = {self.run!r}: use a non-empty id without '/' or spaces")


def load_run_config(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a RunConfig from YAML/JSON, apply nested `overrides`, validate strictly."""
    data = load_mapping(path)
    cfg = RunConfig.from_dict(data)
    if overrides:
        cfg = cfg.replace(**overrides)
    cfg.resolved_recipe()  # fail early on a bad preset, override or length
    return cfg
