"""The RL recipe as one typed config, and the presets of the ScaleRL paper.

`RecipeConfig` holds every algorithmic choice of a run (loss, advantages, filters, off-policy
mode, FP32 head, length control, batch shape, optimizer, reward values). Its defaults ARE the
ScaleRL recipe (Khatri et al. 2025, §4): CISPO, prompt-level aggregation, batch-level
advantage normalisation, zero-variance filtering, No-Positive-Resampling at 0.9,
PipelineRL-8, FP32 LM head, forced interruptions, 48 prompts × 16 generations, AdamW at a
constant 5e-7 after 100 warmup steps. Budgets default to the paper's scale (12k thinking +
2k answer tokens); tiny CPU runs override them through the run config.

Presets (`PRESETS`: name → overrides of the defaults, `PRESET_DOCS`: name → description):

- ``scalerl``: the defaults.
- leave-one-out variants (paper §4, Fig. 7/15): ScaleRL with one component reverted, see
  `LOO_CHANGES` for the exact fields each one changes. ``loo-npr`` is not in the paper (its
  LOO list has no NPR entry) and is provided for completeness.
- prevalent recipes of the paper's comparison (§4 Fig. 2, App. A.16): ``deepseek-grpo``,
  ``qwen25-dapo``, ``magistral``, ``minimax-m1``. A.16 fixes loss, clip values, aggregation,
  off-policy mode, FP32 head and batch/zero-variance handling; what it leaves unsaid is marked
  [I] in `PRESET_DOCS` and chosen as stated there.

`recipe_from_preset(name, *layers)` is the one merge of a recipe: the preset's fields, then
each layer of overrides in the order given (nested mappings merge), typed and validated once
into a `RecipeConfig`; unknown presets and keys are errors that list the valid ones. A sweep's
layers and their order are `scalerl.sweep.runs.run_recipe`'s; the run config (run.yaml) then
carries the typed result whole (`RunConfig.recipe`), and nothing downstream merges again.

Deliberately left out: run-level settings (model, data, steps, seeds, devices, sampling
temperature) — those live in the trainer's run config.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from scalerl.config import Config, ConfigError, deep_merge, field_
from scalerl.rl.advantages import NORMALIZATIONS
from scalerl.rl.length_penalty import LengthPenaltyConfig
from scalerl.rl.losses import CLIP_FIELDS, LossConfig
from scalerl.text import INTERRUPTION_TEXT

__all__ = [
    "INTERRUPTION_TEXT",
    "LOO_CHANGES",
    "OptimizerConfig",
    "PRESETS",
    "PRESET_DOCS",
    "RecipeConfig",
    "list_presets",
    "recipe_from_preset",
]

OFF_POLICY_MODES = ("pipeline", "ppo", "on-policy")
LENGTH_CONTROLS = ("interruption", "length_penalty", "none")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(Config):
    """AdamW with linear warmup to a constant learning rate (paper App. A.3)."""

    lr: float = field_(5e-7, "constant learning rate after warmup (App. A.3: 5e-7); 0 = a "
                       "frozen control run", ge=0)
    warmup_steps: int = field_(100, "linear warmup from 0 over this many steps (App. A.3: 100)",
                               ge=0)
    eps: float = field_(
        1e-15, "AdamW epsilon (App. A.3: 1e-15, avoids epsilon underflow, Wortsman et al. 2023)",
        gt=0,
    )
    weight_decay: float = field_(0.01, "AdamW decoupled weight decay (App. A.3: 0.01)", ge=0)
    betas: tuple[float, float] = field_(
        (0.9, 0.999), "AdamW betas; not in the paper (App. A.3 lists none), PyTorch defaults"
    )
    grad_clip: float | None = field_(
        1.0, "max global grad-norm (not in the paper, App. A.3; 1.0 is the common LLM-RL value; "
        "null disables)", gt=0,
    )

    def validate(self) -> None:
        super().validate()
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"betas = {self.betas} must both be in [0, 1)")


@dataclasses.dataclass(frozen=True)
class RecipeConfig(Config):
    """Every algorithmic choice of an RL run; the defaults are the ScaleRL recipe (§4)."""

    loss: LossConfig = field_(default_factory=LossConfig,
                              doc="loss kind, clip, aggregation (§3.2, App. A.2)")
    advantage_normalization: str = field_(
        "batch", "batch (ScaleRL: std of all centred advantages), group (GRPO), none (Dr.GRPO) "
        "(§3.2)",
        choices=NORMALIZATIONS,
    )
    advantage_eps: float = field_(1e-6, "added to the std before dividing (Eq. 5)", ge=0)
    zero_variance_filter: bool = field_(
        True, "drop prompts whose G rewards are identical from the loss (paper §3.2)"
    )
    npr_threshold: float | None = field_(
        0.9, "No-Positive-Resampling: retire prompts with historical pass rate >= this from "
        "later epochs (§3.2, paper: 0.9); null disables", gt=0, le=1,
    )
    npr_min_samples: int = field_(
        1, "graded completions a prompt needs before NPR may retire it (not in the paper, "
        "§3.2 gives no minimum)", ge=1
    )
    off_policy: str = field_(
        "pipeline", "pipeline (PipelineRL-k, ScaleRL), ppo (PPO-off-policy-k), on-policy "
        "(§3.1, App. A.11)",
        choices=OFF_POLICY_MODES,
    )
    max_lag: int = field_(
        8, "pipeline: trainer waits when this many optimizer steps ahead of generation "
        "(§3.1: k = 8; 4 and 8 equal)", ge=1,
    )
    ppo_minibatches: int = field_(
        8, "ppo: k optimizer steps on mini-batches of prompts_per_step per generation round "
        "of k·prompts_per_step prompts (§3.1: k = 8 in loo-8op)", ge=1,
    )
    fp32_lm_head: bool = field_(
        True, "compute LM-head logits in float32 on generator and trainer (paper §3.2)"
    )
    length_control: str = field_(
        "interruption", "interruption (ScaleRL §4), length_penalty (DAPO Eq. 9), none",
        choices=LENGTH_CONTROLS,
    )
    think_budget: tuple[int, int] = field_(
        (10240, 12288), "interruption: thinking budget drawn per sample from [lo, hi] "
        "(§4: 10k–12k)",
    )
    answer_budget: int = field_(
        2048, "tokens allowed after </think> or the interruption text (App. A.3: 2,048)", ge=1
    )
    interruption_text: str = field_(
        INTERRUPTION_TEXT, "appended when the thinking budget runs out (paper §4); no loss"
    )
    length_penalty: LengthPenaltyConfig = field_(
        default_factory=LengthPenaltyConfig, doc="length_penalty: L_max, L_cache (Eq. 9)"
    )
    prompts_per_step: int = field_(48, "prompts per optimizer step (App. A.3: 48)", ge=1)
    generations_per_prompt: int = field_(16, "completions per prompt, G (App. A.3: 16)", ge=1)
    optimizer: OptimizerConfig = field_(default_factory=OptimizerConfig, doc="AdamW settings (App. A.3)")
    reward_correct: float = field_(1.0, "reward of a correct completion (App. A.3: +1)")
    reward_incorrect: float = field_(-1.0, "reward of an incorrect completion (App. A.3: −1)")

    def validate(self) -> None:
        super().validate()
        lo, hi = self.think_budget
        if not 1 <= lo <= hi:
            raise ConfigError(f"think_budget = {self.think_budget} must satisfy 1 <= lo <= hi")
        if self.reward_correct <= self.reward_incorrect:
            raise ConfigError(
                f"reward_correct = {self.reward_correct} must exceed reward_incorrect = "
                f"{self.reward_incorrect}"
            )
        if self.length_control == "interruption" and not self.interruption_text.strip():
            raise ConfigError("interruption_text must not be empty with interruption control")

    @property
    def samples_per_step(self) -> int:
        """Completions per optimizer step before zero-variance filtering (paper: 768)."""
        return self.prompts_per_step * self.generations_per_prompt


# -- presets ------------------------------------------------------------------------------

_PREVALENT_COMMON: dict[str, Any] = {  # [I] components A.16 does not list for the baselines
    "npr_threshold": None,  # NPR is a ScaleRL addition (Polaris)
    "length_control": "interruption",  # the paper's common length setup; A.16 lists no change
}

PRESETS: dict[str, dict[str, Any]] = {
    "scalerl": {},
    "loo-dapo": {"loss": {"kind": "dapo"}},
    "loo-fp32": {"fp32_lm_head": False},
    "loo-savg": {"loss": {"aggregation": "sample"}},
    "loo-plan": {"advantage_normalization": "group"},
    "loo-batch": {"zero_variance_filter": False},
    "loo-lp": {"length_control": "length_penalty"},
    "loo-8op": {"off_policy": "ppo", "ppo_minibatches": 8},
    "loo-npr": {"npr_threshold": None},
    "deepseek-grpo": {
        **_PREVALENT_COMMON,
        "loss": {"kind": "grpo", "eps": 0.2, "aggregation": "sample"},
        "advantage_normalization": "group",
        "zero_variance_filter": False,
        "off_policy": "ppo",
        "ppo_minibatches": 8,
        "fp32_lm_head": False,
    },
    "qwen25-dapo": {
        **_PREVALENT_COMMON,
        "loss": {"kind": "dapo", "eps_low": 0.2, "eps_high": 0.26, "aggregation": "prompt"},
        "advantage_normalization": "group",
        "zero_variance_filter": True,
        "off_policy": "ppo",
        "ppo_minibatches": 8,
        "fp32_lm_head": False,
        "prompts_per_step": 80,
    },
    "magistral": {
        **_PREVALENT_COMMON,
        "loss": {"kind": "dapo", "eps_low": 0.2, "eps_high": 0.26, "aggregation": "prompt"},
        "advantage_normalization": "group",
        "zero_variance_filter": True,
        "off_policy": "pipeline",
        "max_lag": 8,
        "fp32_lm_head": False,
        "prompts_per_step": 80,
    },
    "minimax-m1": {
        **_PREVALENT_COMMON,
        "loss": {"kind": "cispo", "aggregation": "prompt"},
        "advantage_normalization": "group",
        "zero_variance_filter": True,
        "off_policy": "ppo",
        "ppo_minibatches": 8,
        "fp32_lm_head": True,
        "prompts_per_step": 80,
    },
}

# Dotted RecipeConfig fields each leave-one-out variant changes relative to `scalerl`.
LOO_CHANGES: dict[str, tuple[str, ...]] = {
    "loo-dapo": ("loss.kind",),
    "loo-fp32": ("fp32_lm_head",),
    "loo-savg": ("loss.aggregation",),
    "loo-plan": ("advantage_normalization",),
    "loo-batch": ("zero_variance_filter",),
    "loo-lp": ("length_control",),
    "loo-8op": ("off_policy",),
    "loo-npr": ("npr_threshold",),
}

PRESET_DOCS: dict[str, str] = {
    "scalerl": "ScaleRL (§4): CISPO (ε_max 4), prompt aggregation, batch advantage norm, "
    "zero-variance filter, NPR 0.9, PipelineRL-8, FP32 head, interruptions, 48×16, "
    "AdamW 5e-7.",
    "loo-dapo": "ScaleRL with the DAPO loss instead of CISPO (clip 0.2/0.28 [I]: the LOO's "
    "values are not stated); paper: B 1.77 vs 2.01.",
    "loo-fp32": "ScaleRL without the FP32 LM head (bf16/model-dtype logits).",
    "loo-savg": "ScaleRL with sample-average loss aggregation instead of prompt average.",
    "loo-plan": "ScaleRL with prompt(group)-level advantage normalisation instead of batch.",
    "loo-batch": "ScaleRL without zero-variance filtering (full batch in the loss).",
    "loo-lp": "ScaleRL with the DAPO length penalty (Eq. 9, 14k/2k) instead of interruptions.",
    "loo-8op": "ScaleRL with PPO-off-policy-8 instead of PipelineRL-8.",
    "loo-npr": "ScaleRL without No-Positive-Resampling (not a paper LOO; for completeness).",
    "deepseek-grpo": "DeepSeek recipe (A.16): GRPO loss ε 0.2/0.2, sample average, group "
    "advantage norm, PPO-off-policy-8, 48×16, no FP32 head, no 0-var filter; "
    "[I] no NPR, interruptions.",
    "qwen25-dapo": "Qwen2.5 DAPO recipe (A.16): DAPO ε 0.2/0.26, prompt average, "
    "PPO-off-policy-8, batch 80×16 with 0-variance prompts dropped, no FP32 head; "
    "[I] group advantage norm (DAPO's), no NPR, interruptions.",
    "magistral": "Magistral (A.16: the DAPO recipe with PipelineRL): DAPO ε 0.2/0.26, prompt "
    "average, PipelineRL-8 [I: k], 80×16 with 0-var drop, no FP32 head; [I] group advantage "
    "norm per A.16 (Magistral itself normalises by the minibatch std), no NPR.",
    "minimax-m1": "MiniMax-M1 (A.16): CISPO + FP32 head + PPO-off-policy-8 [I: k] + prompt "
    "average, 80×16 with 0-var drop; [I] group advantage norm, no NPR, interruptions.",
}


def list_presets() -> list[str]:
    """Preset names in definition order (scalerl, LOO variants, prevalent recipes)."""
    return list(PRESETS)


def recipe_from_preset(name: str, *layers: dict[str, Any] | None) -> RecipeConfig:
    """The named preset with each of `layers` merged over it in the order given (later
    layers win; nested mappings merge, `scalerl.config.deep_merge`; None is no layer), typed
    and validated: the one merge of a recipe (module docstring). When the layers name a
    `loss.kind`, the preset's clip fields of another kind are dropped first."""
    if name not in PRESETS:
        raise ConfigError(f"unknown recipe preset {name!r}; valid presets: "
                          f"{', '.join(list_presets())}")
    for layer in layers:
        if layer is not None and not isinstance(layer, dict):
            raise ConfigError(f"recipe overrides must be a mapping, got {type(layer).__name__}")
    layers = tuple(layer for layer in layers if layer)
    merged = copy.deepcopy(PRESETS[name])
    kinds = [layer["loss"]["kind"] for layer in layers
             if isinstance(layer.get("loss"), dict) and "kind" in layer["loss"]]
    if kinds and "loss" in merged:
        # another loss kind: the preset's clip fields for its own kind no longer apply
        merged["loss"] = {k: v for k, v in merged["loss"].items()
                          if k not in CLIP_FIELDS or kinds[-1] in CLIP_FIELDS[k]}
    for layer in layers:
        deep_merge(merged, copy.deepcopy(layer))
    return RecipeConfig.from_dict(merged)
