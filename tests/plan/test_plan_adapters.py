"""Run configs and sweep configs to PlanInputs; the trainer's preflight."""

from pathlib import Path

import pytest

from scalerl.config import ConfigError, load_mapping
from scalerl.plan.adapters import (
    PlanError,
    is_sweep_config,
    plan_inputs_from_run,
    plan_inputs_from_sweep,
    preflight,
    sweep_runs,
)
from scalerl.plan.arch import PUBLIC_ARCHS, tiny_arch
from scalerl.plan.memory import GiB, MiB
from scalerl.rl.recipe import recipe_from_preset

FIXTURES = Path(__file__).parent.parent / "fixtures" / "plan"


def test_run_yaml_fields():
    run = load_mapping(FIXTURES / "run_tiny.yaml")
    inp = plan_inputs_from_run(run, tiny_arch("tiny-m"), device_memory_bytes=80 * GiB,
                               prompt_tokens=64)
    assert (inp.prompts_per_step, inp.generations_per_prompt) == (4, 4)
    assert inp.generation_tokens == 40 + 8 + len("</think>")  # think hi + answer + inserted text
    assert (inp.engine, inp.pipeline, inp.gen_batch, inp.micro_batch_groups) == \
        ("hf", True, 16, 0)
    # RunConfig defaults: fp32 master weights, compute_dtype auto = bfloat16 on a CUDA device
    assert (inp.param_dtype, inp.compute_dtype, inp.gradient_checkpointing) == \
        ("float32", "bfloat16", False)
    on_cpu = plan_inputs_from_run({**run, "device": "cpu"}, tiny_arch("tiny-m"),
                                  device_memory_bytes=80 * GiB, prompt_tokens=64)
    assert on_cpu.compute_dtype == "float32"
    # VllmSettings defaults: the KV cache from gpu_memory_utilization, max_model_len derived
    assert inp.vllm_kv_cache_bytes == 0 and inp.vllm_gpu_memory_utilization == 0.5
    assert inp.vllm_max_model_len == 64 + inp.generation_tokens


def test_upcoming_fields_are_read_and_typos_rejected():
    run = {**load_mapping(FIXTURES / "run_tiny.yaml"), "numerics": {
        "gradient_checkpointing": True, "param_dtype": "float32", "compute_dtype": "bfloat16",
        "micro_batch_tokens": 4096, "logprob_chunk_tokens": 1024},
        "vllm": {"kv_cache_mb": 3}, "gen_batch": 8}
    inp = plan_inputs_from_run(run, tiny_arch("tiny-m"), device_memory_bytes=GiB)
    assert (inp.gradient_checkpointing, inp.compute_dtype, inp.micro_batch_tokens,
            inp.logprob_chunk_tokens, inp.vllm_kv_cache_bytes, inp.gen_batch) == \
        (True, "bfloat16", 4096, 1024, 3 * MiB, 8)
    with pytest.raises(ConfigError, match="train_micro_btach"):
        plan_inputs_from_run({"train_micro_btach": 2}, tiny_arch("tiny-m"),
                             device_memory_bytes=GiB)
    with pytest.raises(ConfigError, match="kv_cahce_mb"):
        plan_inputs_from_run({"vllm": {"kv_cahce_mb": 2}}, tiny_arch("tiny-m"),
                             device_memory_bytes=GiB)


def test_length_penalty_cap_and_max_new_tokens():
    run = {"recipe": recipe_from_preset("loo-lp", {"length_penalty": {"max_len": 900,
                                                                      "cache_len": 100}}),
           "max_new_tokens": 800}
    inp = plan_inputs_from_run(run, tiny_arch("tiny-m"), device_memory_bytes=GiB)
    assert inp.generation_tokens == 800  # min(L_max, max_new_tokens)
    assert inp.pipeline  # loo-lp keeps PipelineRL


def test_local_sweep_expansion_matches_the_workflow_naming():
    cfg = load_mapping(FIXTURES / "sweep.yaml")
    assert is_sweep_config(cfg) and not is_sweep_config(load_mapping(FIXTURES / "run_tiny.yaml"))
    sweep = sweep_runs(cfg)
    assert [r["run"] for r in sweep.runs] == ["qwen3-0.6b_L2048_scalerl_b4x4_s0",
                                              "qwen3-0.6b_L4096_scalerl_b4x4_s0"]
    from scalerl.rl.run_config import RunConfig

    recipe = RunConfig.from_dict(sweep.runs[0]).recipe
    # hi = 2048 - 512, lo = round(0.8333 * 1536) (scalerl.sweep's length section)
    assert recipe.think_budget == (1280, 1536) and recipe.answer_budget == 512
    assert (recipe.prompts_per_step, recipe.generations_per_prompt) == (4, 4)
    assert sweep.runs[1]["numerics"]["gradient_checkpointing"] is True  # train: reaches every run
    assert sweep.runs[1]["vllm"]["kv_cache_mb"] == 8192
    assert sweep.models["qwen3-0.6b"]["dtype"] == "bfloat16" and sweep.train_devices == 2
    planned = plan_inputs_from_sweep(
        sweep.runs, {"qwen3-0.6b": (PUBLIC_ARCHS["Qwen/Qwen3-0.6B"], "bfloat16")},
        device_memory_bytes=80 * GiB, devices=sweep.train_devices)
    assert [inp.generation_tokens for _, inp in planned] == [2048 + 81, 4096 + 81]
    # the trainer loads RunConfig.param_dtype (float32 master weights), generators the model's
    assert all((inp.param_dtype, inp.generator_dtype, inp.devices) == ("float32", "bfloat16", 2)
               for _, inp in planned)


def test_preflight_raises_with_the_knob_and_passes_a_fitting_run():
    big = load_mapping(FIXTURES / "run_qwen_whole_batch.yaml")
    with pytest.raises(PlanError, match="micro_batch_tokens"):
        preflight(big, "Qwen/Qwen3-1.7B", 80 * GiB, devices=2, model_dtype="bfloat16")
    small = load_mapping(FIXTURES / "run_tiny.yaml")
    report = preflight(small, "tiny-m", 80 * GiB, prompt_tokens=64)
    assert report is not None and report.fits


def test_preflight_is_skipped_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert preflight(load_mapping(FIXTURES / "run_tiny.yaml"), "tiny-m") is None


def test_the_planned_fp32_head_gemm_is_the_one_the_trainer_takes(monkeypatch):
    """config/gpu.yaml's runs are planned with the GEMM `scalerl.models.logprobs.head_gemm`
    picks (on CUDA: the out_dtype mm, answered here by the meta device); a torch whose probe
    says no (as the forward-and-backward probe did on CUDA before issue 35) is planned with
    the upcast path it would take: fp32 GEMMs at the fp32 peak and the fp32 weight copy."""
    import scalerl.models.logprobs as logprobs
    from scalerl.models.logprobs import HEAD_GEMMS
    from scalerl.plan.memory import HEAD_GEMMS as PLANNED
    from scalerl.plan.memory import head_copy_bytes, logprob_bytes
    from scalerl.plan.timing import estimate_time, resolve_device

    assert PLANNED == HEAD_GEMMS
    gpu = sweep_runs(load_mapping(Path(__file__).parents[2] / "config" / "gpu.yaml"))
    run = next(r for r in gpu.runs if r["model"] == "qwen3-1.7b")
    arch = PUBLIC_ARCHS["Qwen/Qwen3-1.7B"]
    fast = plan_inputs_from_run(run, arch, device_memory_bytes=80 * GiB, model_dtype="bfloat16")
    assert (fast.lm_head_operands, fast.lm_head_gemm) == ("bfloat16", "mm_out_dtype")
    monkeypatch.setattr(logprobs, "mm_out_dtype_supported", lambda device_type: False)
    slow = plan_inputs_from_run(run, arch, device_memory_bytes=80 * GiB, model_dtype="bfloat16")
    assert (slow.lm_head_operands, slow.lm_head_gemm) == ("bfloat16", "upcast")
    vh, chunk = arch.vocab * arch.hidden, 2048  # config/gpu.yaml: logprob_chunk_tokens 2048
    assert head_copy_bytes(slow) - head_copy_bytes(fast) == 4 * vh  # the fp32 weight copy
    assert logprob_bytes(slow) - logprob_bytes(fast) == 4 * chunk * arch.vocab
    h100 = resolve_device("H100")
    t_fast = estimate_time(fast, h100, steps=1)
    t_slow = estimate_time(slow, h100, steps=1)
    head_flops = fast.sequences_per_step * 0.5 * fast.generation_tokens * 4 * 2 * vh
    assert t_slow.train_s - t_fast.train_s == pytest.approx(
        head_flops * (1 / h100.fp32_flops - 1 / h100.bf16_flops) / t_fast.efficiency.mfu)
