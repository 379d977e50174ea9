"""RunConfig: everything that defines one training run of the sweep (one YAML file per run).

A run is one point of the sweep (docs/design.md, "Sweep"): model × generation length × recipe
× batch × seed × task mix. Its RunConfig is built by `scalerl.sweep.run_config`, written into
`run.yaml`, and read by `scalerl train` (every chunk) and `scalerl eval` (every checkpoint).
The objective and its alternatives are the `recipe` section: a typed `RecipeConfig` with every
field, which the sweep merged once from a preset and its override layers
(`scalerl.sweep.runs.run_recipe`, generation length included); the trainer, evaluation,
planner and provenance read it as it stands. The per-sample cap is
`scalerl.rollout.budget.GenerationBudget` of the recipe, the one computation trainer and eval
share; `max_new_tokens` here only overrides it.

Example (`run.yaml`, abridged: the sweep writes every field):

    run: tiny-m_L48_scalerl_b16x8_s0
    seed: 0
    model: tiny-m
    recipe_name: scalerl
    recipe: {prompts_per_step: 16, generations_per_prompt: 8, think_budget: [27, 32],
             answer_budget: 16, loss: {kind: cispo, eps_max: 4.0, ...}, ...}
    steps_per_chunk: 50          # or chunk_steps: [3, 3, 6, 10, 18, 20] (one per chunk)
    save_every: 10
    task_weights: {math: 1.0, code: 0.0}
    eval: {samples_per_prompt: 4, max_prompts: 140}

A hand-written run.yaml gives only the recipe fields it changes (the rest are ScaleRL's); a
preset other than ScaleRL is `scalerl.rl.recipe.recipe_from_preset(name).to_dict()`. Paths
(`base`, `prompts`) may be given here or on the `scalerl train` command line (the command line
wins).

Deliberately left out: anything about the sweep (which runs exist, generation lengths and
their length rules, the override layers) and the workflow layout; those belong to
`scalerl.sweep`, config/config.yaml and the workflow.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from scalerl.config import Config, ConfigError, field_, load_mapping
from scalerl.rl.numerics import StepNumerics
from scalerl.rl.recipe import RecipeConfig
from scalerl.rl.rollout_log import RolloutLogConfig
from scalerl.rollout.config import EngineConfig
from scalerl.rollout.vllm_settings import VllmSettings
from scalerl.tracking.config import TrackingConfig

__all__ = ["EvalConfig", "RunConfig", "TaskWeights", "load_run_config"]


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
    base: str | None = field_(None, "base model directory (HF format) that chunk 1 starts from; "
                              "`scalerl train --init` overrides it")
    prompts: str | None = field_(None, "prompts.parquet; `scalerl train --prompts` overrides it")
    recipe_name: str = field_("scalerl", "the recipe's name in the sweep (run ids, the eval "
                              "`recipe` column)")
    recipe: RecipeConfig = field_(
        default_factory=RecipeConfig, doc="the run's recipe, every field (scalerl.rl.recipe; "
        "the defaults are ScaleRL's); the sweep writes it whole, merged once from the preset, "
        "the override layers and the generation length (scalerl.sweep.runs.run_recipe)")
    steps_per_chunk: int = field_(50, "optimizer steps per training chunk", ge=1)
    chunk_steps: tuple[int, ...] = field_(
        (), "optimizer steps of each chunk when chunks differ in length: chunk k (from 1; "
        "chunk 0 is the base model) trains the k-th entry; empty = every chunk trains "
        "steps_per_chunk. Growing chunks (e.g. 3, 3, 6, 10, 18, 20) spread the checkpoints "
        "evenly over log compute, the fit's axis",
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

    def engine_config(self, *, temperature: float | None = None,
                      vllm: VllmSettings | None = None) -> EngineConfig:
        """The EngineConfig of this run's generation, the one builder (the trainer's engines
        and `scalerl eval`): the run's engine, seed, device and threads (0: the process's
        torch threads as set), the recipe's interruption text, `gen_batch` sequences at once
        (0: a step's samples); `temperature` the run's unless given (evaluation has its own);
        `vllm` the resolved settings (`scalerl.rollout.vllm_settings.resolve_max_model_len`),
        None for the HF engine."""
        return EngineConfig(backend=self.engine,
                            temperature=self.temperature if temperature is None else temperature,
                            max_batch=self.gen_batch or self.recipe.samples_per_step,
                            seed=self.seed, interruption_text=self.recipe.interruption_text,
                            device=self.device, threads=self.threads, vllm=vllm)

    def steps_in_chunk(self, chunk: int) -> int:
        """Optimizer steps that training chunk `chunk` (numbered from 1) trains."""
        if chunk < 1:
            raise ConfigError(f"chunk {chunk}: training chunks are numbered from 1 (chunk 0 is "
                              "the base model, which is evaluated, not trained)")
        if not self.chunk_steps:
            return self.steps_per_chunk
        if chunk > len(self.chunk_steps):
            raise ConfigError(
                f"chunk {chunk}: chunk_steps lists {len(self.chunk_steps)} chunk(s) "
                f"(1..{len(self.chunk_steps)}); add entries to chunk_steps for later chunks")
        return self.chunk_steps[chunk - 1]

    def validate(self) -> None:
        super().validate()
        if any(steps < 1 for steps in self.chunk_steps):
            raise ConfigError(f"chunk_steps = {list(self.chunk_steps)}: every chunk needs >= 1 "
                              "step")
        recipe = self.recipe
        if (self.pipeline_fixed_lag is not None and recipe.off_policy == "pipeline"
                and self.pipeline_fixed_lag > recipe.max_lag):
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
    return cfg
