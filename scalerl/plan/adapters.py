"""From run configs to `PlanInputs`, and the trainer's preflight check.

- `plan_inputs_from_run(run, arch, ...)`: a RunConfig-shaped mapping (run.yaml) to PlanInputs.
  The trainer numerics are `RunConfig.numerics` (`param_dtype`, `compute_dtype`,
  `logprob_chunk_tokens`, `micro_batch_tokens`, `gradient_checkpointing`; `compute_dtype:
  auto` is planned as bfloat16, what it is on CUDA, unless `device: cpu`; the FP32 head's
  GEMM is the one the trainer will take, `planned_head_gemm`); vLLM's memory
  from `RunConfig.vllm` (`scalerl.rollout.vllm_settings.VllmSettings`; `max_model_len: 0` =
  the generation cap + the prompt, as the trainer resolves it).
- `plan_inputs_from_sweep(runs, models, ...)`: the same for a list of run mappings whose
  `model` labels `models` maps to (architecture, dtype).
- `sweep_runs(cfg)`: a sweep config's runs, by `scalerl.sweep` (the workflow's own expansion,
  validation and merge order).
- `preflight(run_cfg, model, device_mem_bytes)`: what `scalerl train` calls before any work;
  raises `PlanError` (a ConfigError) naming every problem and knob, returns None on CPU.

Deliberately left out: prompt lengths measured on the prompt set for sweeps (`prompt_tokens`
is a stated assumption; `scalerl train`'s preflight measures the real longest prompt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scalerl.config import ConfigError
from scalerl.plan.arch import ModelArch, resolve_arch, tiny_arch
from scalerl.plan.check import PlanReport, check_fits
from scalerl.plan.memory import MiB, PlanInputs

__all__ = ["DEFAULT_PROMPT_TOKENS", "PlanError", "SweepRuns",
           "arch_of_model_config", "is_sweep_config", "model_dtype_of", "planned_head_gemm",
           "sweep_runs", "plan_inputs_from_run", "plan_inputs_from_sweep", "preflight"]

DEFAULT_PROMPT_TOKENS = 1024

class PlanError(ConfigError):
    """The run does not fit its devices; the message names each problem and its knob."""


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING}


def plan_inputs_from_run(run: Mapping[str, Any], model_arch: ModelArch, *,
                         device_memory_bytes: int, devices: int = 1, nodes: int = 1,
                         model_dtype: str = "float32",
                         prompt_tokens: int = DEFAULT_PROMPT_TOKENS) -> PlanInputs:
    """PlanInputs of a RunConfig-shaped mapping (missing keys: RunConfig defaults)."""
    from scalerl.rl.run_config import RunConfig
    from scalerl.rollout.budget import GenerationBudget

    run_cfg = RunConfig.from_dict(dict(run))  # typos and bad values fail here, naming the key
    run = run_cfg.to_dict()
    vllm = run_cfg.vllm
    recipe = run_cfg.recipe
    # The trainer's budget; the interruption text has at most as many tokens as UTF-8 bytes.
    cap = GenerationBudget.from_recipe(recipe, len(recipe.interruption_text.encode()),
                                       run_cfg.max_new_tokens).max_new_tokens
    samples = recipe.samples_per_step
    numerics = run_cfg.numerics
    param_dtype = numerics.param_dtype
    compute_dtype = numerics.compute_dtype
    if compute_dtype == "auto":  # StepNumerics: bfloat16 on CUDA (planned here), else params
        compute_dtype = param_dtype if run_cfg.device == "cpu" else "bfloat16"
    operands = numerics.lm_head_operands  # auto: bf16 on CUDA (planned here), fp32 on CPU
    if operands == "auto":
        operands = "float32" if run_cfg.device == "cpu" else "bfloat16"
    gemm = planned_head_gemm(operands, param_dtype, cuda=run_cfg.device != "cpu")
    return PlanInputs(
        arch=model_arch,
        prompts_per_step=recipe.prompts_per_step,
        generations_per_prompt=recipe.generations_per_prompt,
        prompt_tokens=prompt_tokens, generation_tokens=cap,
        param_dtype=param_dtype, compute_dtype=compute_dtype,
        fp32_lm_head=recipe.fp32_lm_head, lm_head_operands=operands, lm_head_gemm=gemm,
        gradient_checkpointing=numerics.gradient_checkpointing,
        gradient_sync=numerics.gradient_sync,
        logprob_chunk_tokens=numerics.logprob_chunk_tokens,
        micro_batch_tokens=numerics.micro_batch_tokens,
        micro_batch_groups=int(run["train_micro_batch"]),
        engine=run["engine"], pipeline=recipe.off_policy == "pipeline",
        generators=int(run["generators"]), generator_dtype=model_dtype,
        gen_batch=int(run["gen_batch"]) or samples, eval_batch=int(run["gen_batch"]) or samples,
        vllm_gpu_memory_utilization=float(vllm.gpu_memory_utilization),
        vllm_kv_cache_bytes=int(vllm.kv_cache_mb) * MiB,
        # 0 = what the trainer derives: the longest prompt + the generation cap
        vllm_max_model_len=int(vllm.max_model_len or prompt_tokens + cap),
        vllm_enforce_eager=bool(vllm.enforce_eager),
        vllm_prefix_caching=bool(vllm.enable_prefix_caching),
        device_memory_bytes=device_memory_bytes, devices=devices,
        trainer_ranks=run_cfg.trainer_ranks, nodes=nodes,
        generator_devices=vllm.tensor_parallel_size if run_cfg.engine == "vllm" else 1,
    )


def planned_head_gemm(operands: str, param_dtype: str, *, cuda: bool) -> str:
    """The GEMM the trainer's FP32 head will run (`scalerl.models.logprobs.head_gemm`, the
    trainer's own choice) with this torch: on CUDA where this process has CUDA, else the meta
    device answers for it (it has CUDA's op schema: whether this torch offers
    `torch.mm(bf16, bf16, out_dtype=float32)`); on CPU for a CPU run."""
    import torch

    from scalerl.models.logprobs import head_gemm

    device = "cuda" if cuda and torch.cuda.is_available() else "meta" if cuda else "cpu"
    return head_gemm(device, operands, param_dtype)


def plan_inputs_from_sweep(runs: Sequence[Mapping[str, Any]],
                           models: Mapping[str, tuple[ModelArch, str]], *,
                           device_memory_bytes: int, devices: int = 1, nodes: int = 1,
                           prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
                           ) -> list[tuple[str, PlanInputs]]:
    """(run id, PlanInputs) of each run mapping; `models`: label -> (arch, model dtype)."""
    out = []
    for run in runs:
        label = run.get("model", "")
        if label not in models:
            raise ConfigError(f"run {run.get('run')!r}: model {label!r} has no architecture "
                              f"(known: {', '.join(models) or 'none'})")
        arch, dtype = models[label]
        out.append((str(run.get("run", label)), plan_inputs_from_run(
            run, arch, device_memory_bytes=device_memory_bytes, devices=devices, nodes=nodes,
            model_dtype=dtype, prompt_tokens=prompt_tokens)))
    return out


# -- sweep configs ---------------------------------------------------------------------------
def is_sweep_config(data: Mapping[str, Any]) -> bool:
    """A sweep config (config/*.yaml) has `sweep:` and `models:`; a run.yaml has neither."""
    return "sweep" in data and "models" in data


@dataclasses.dataclass(frozen=True)
class SweepRuns:
    """What the planner needs from a sweep config."""

    runs: list[dict[str, Any]]  # RunConfig mappings, as workflow/rules/common.smk writes them
    models: dict[str, dict[str, Any]]  # model label -> its ModelConfig mapping
    train_devices: int  # GPUs of the train job on each node (resources.train.gpu)
    train_nodes: int = 1  # nodes of the train job (resources.train.nodes)
    chunks: int = 1  # training chunks of every run (train.chunks)
    val_prompts: int = 0  # held-out prompts evaluation scores (data.config.val_size)


def sweep_runs(cfg: Mapping[str, Any]) -> SweepRuns:
    """The runs of a sweep config exactly as the workflow writes them (`scalerl.sweep`)."""
    from scalerl.sweep import check_runs, expand, load_sweep, run_config

    sweep = load_sweep(cfg)
    runs = expand(sweep)
    check_runs(sweep, runs)
    mappings = [run_config(sweep, run, base="", prompts="").to_dict() for run in runs.values()]
    models = {name: dict(entry.config.get("model", {})) for name, entry in sweep.models.items()}
    train = sweep.resources["train"]
    val = int(((cfg.get("data") or {}).get("config") or {}).get("val_size") or 0)
    return SweepRuns(mappings, models, max(1, train.gpu), train.nodes, sweep.chunks, val)


def arch_of_model_config(model: Mapping[str, Any], label: str) -> ModelArch:
    """The architecture of a sweep's `models.NAME.config.model` mapping (a ModelConfig)."""
    from scalerl.models.config import ModelConfig

    cfg = ModelConfig.from_dict(dict(model))
    if cfg.is_tiny:
        return tiny_arch(cfg.name, arch=cfg.arch, max_positions=cfg.max_positions)
    try:
        return resolve_arch(cfg.name)
    except ConfigError as err:
        raise ConfigError(f"models.{label}.config.model.name: {err}") from None


# -- model dtype and the trainer's preflight ----------------------------------------------
def model_dtype_of(model_dir: str | Path) -> str | None:
    """The dtype `scalerl train` loads a model directory in (base_info.json / MODEL.yaml,
    as `scalerl.models.loading.load_model_config` reads it), or None without a record."""
    path = Path(model_dir)
    if not (path / "base_info.json").is_file():
        return None
    from scalerl.models.loading import load_model_config

    return load_model_config(None, path).dtype


def preflight(run_cfg: Any, model_dir_or_arch: str | Path | ModelArch,
              device_mem_bytes: int | None = None, *, devices: int | None = None,
              nodes: int = 1, model_dtype: str | None = None,
              prompt_tokens: int = DEFAULT_PROMPT_TOKENS) -> PlanReport | None:
    """Check a run before any work: PlanError (every problem, one line each) when it does not
    fit. Device memory and count come from CUDA when `device_mem_bytes` is None; without
    CUDA the check is skipped (None)."""
    if device_mem_bytes is None:
        import torch

        if not torch.cuda.is_available():
            return None
        device_mem_bytes = torch.cuda.get_device_properties(0).total_memory
        devices = devices or torch.cuda.device_count()
    run = run_cfg.to_dict() if hasattr(run_cfg, "to_dict") else dict(run_cfg)
    arch = resolve_arch(model_dir_or_arch)
    if model_dtype is None and not isinstance(model_dir_or_arch, ModelArch):
        model_dtype = model_dtype_of(model_dir_or_arch)
    inputs = plan_inputs_from_run(run, arch, device_memory_bytes=device_mem_bytes,
                                  devices=devices or 1, nodes=nodes,
                                  model_dtype=model_dtype or "float32",
                                  prompt_tokens=prompt_tokens)
    report = check_fits(inputs, title=str(run.get("run", "run")))
    if not report.fits:
        raise PlanError(f"run {report.title} does not fit its devices (scalerl plan shows "
                        "the terms):\n" + "\n".join(f"  - {p}" for p in report.problems))
    return report
