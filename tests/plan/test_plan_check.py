"""check_fits: placement, problems, and knobs that are checked to work."""

import re
from pathlib import Path

import pytest

from scalerl.plan.arch import PUBLIC_ARCHS, tiny_arch
from scalerl.plan.check import check_fits
from scalerl.plan.memory import GiB, MiB, PlanInputs, trainer_terms

QWEN = PUBLIC_ARCHS["Qwen/Qwen3-1.7B"]


def qwen(**changes) -> PlanInputs:
    """Qwen3-1.7B, the paper's 48 x 16 batch, 1024 + 8192 tokens, bfloat16, 2 devices."""
    base = dict(arch=QWEN, prompt_tokens=1024, generation_tokens=8192, param_dtype="bfloat16",
                compute_dtype="bfloat16", generator_dtype="bfloat16", engine="vllm",
                devices=2, vllm_kv_cache_bytes=8 * GiB, vllm_max_model_len=9216,
                device_memory_bytes=80 * GiB)
    return PlanInputs(**{**base, **changes})


def test_a_small_run_fits_on_its_own_devices():
    report = check_fits(PlanInputs(arch=tiny_arch("tiny-m"), prompt_tokens=64,
                                   generation_tokens=64, engine="hf", devices=2))
    assert report.fits and not report.problems
    assert [(u.stage, u.device) for u in report.devices] == \
        [("train", "cuda:0"), ("generate", "cuda:1"), ("eval", "cuda:0")]


def test_the_whole_batch_does_not_fit_and_the_knob_is_exact():
    inp = qwen()
    report = check_fits(inp)
    assert not report.fits
    (problem,) = [p for p in report.problems if p.startswith("train cuda:0")]
    found = re.search(r"gradient_checkpointing: true \+ logprob_chunk_tokens: set to 2048 \+ "
                      r"[^;]*micro_batch_tokens: (?:lower to )?<= ([\d,]+)", problem)
    assert found, problem
    tokens = int(found.group(1).replace(",", ""))
    fixed = inp.replace(gradient_checkpointing=True, logprob_chunk_tokens=2048)

    def need(t):
        return sum(x.bytes for x in trainer_terms(fixed.replace(micro_batch_tokens=t)))

    assert need(tokens) <= 80 * GiB < need(tokens + 256)  # the largest 256-multiple that fits


def test_a_tiny_kv_cache_names_its_size():
    # 256 MiB hold 2,320 tokens of 114,688 B; vLLM needs max_model_len 40,960 (+ 2 blocks)
    report = check_fits(qwen(vllm_kv_cache_bytes=256 * MiB, vllm_max_model_len=0))
    (problem,) = [p for p in report.problems if p.startswith("generate")]
    assert "KV cache of 2,320 tokens < max_model_len 40,960" in problem
    assert "vllm.kv_cache_mb: raise to >= 4,484" in problem  # ceil(40,992 x 114,688 / MiB)
    assert "vllm.max_model_len: set to 9,216 + vllm.kv_cache_mb: raise to >= 1,012" in problem


def test_a_short_context_names_max_model_len():
    report = check_fits(qwen(vllm_max_model_len=4096))
    assert any("vllm.max_model_len = 4,096 < prompt + generation = 9,216: raise it to >= 9,216"
               in p for p in report.problems)


def test_shared_device_sums_trainer_and_generator():
    shared = check_fits(qwen(devices=1, gradient_checkpointing=True,
                             logprob_chunk_tokens=2048, micro_batch_tokens=16384))
    use = shared.devices[0]
    assert use.stage == "train + generate"
    assert {t.process for t in use.terms} == {"trainer", "generator 0"}
    alone = check_fits(qwen(devices=2, gradient_checkpointing=True, logprob_chunk_tokens=2048,
                            micro_batch_tokens=16384))
    assert use.need == alone.devices[0].need + alone.devices[1].need


def test_vllm_start_needs_its_share_free_on_a_shared_device():
    inp = qwen(devices=1, gradient_checkpointing=True, logprob_chunk_tokens=2048,
               micro_batch_tokens=16384, vllm_gpu_memory_utilization=0.95)
    problems = check_fits(inp).problems
    # trainer at start: margin 1 + weights 3.2 + AdamW 6.4 GiB = 10.6 GiB > 5% of 80 GiB
    assert any("vLLM starts only with" in p and "lower to <= 0.86" in p for p in problems)


def test_in_process_hf_engine_shares_the_trainer_weights():
    report = check_fits(PlanInputs(arch=tiny_arch("tiny-m"), prompt_tokens=64,
                                   generation_tokens=64, engine="hf", pipeline=False))
    use = report.devices[0]
    assert use.stage == "train | generate"
    assert [t.label for t in use.terms].count("weights float32: N=1,062,912 x 4") == 1
    assert not any(t.label.startswith("weights") and t.process == "engine" for t in use.terms)


def test_in_process_hf_engine_samples_from_a_copy_in_the_model_dtype_otherwise():
    """fp32 master weights of a bf16 model (config/gpu.yaml's numerics) at one rank, and any
    model at two ranks: the engine's weights in the generation dtype stay beside the trainer's
    between steps (scalerl.rl.trainer.in_process_generator_model)."""
    base = PlanInputs(arch=tiny_arch("tiny-m"), prompt_tokens=64, generation_tokens=64,
                      engine="hf", pipeline=False)
    for inp, label in ((base.replace(generator_dtype="bfloat16"), "weights bfloat16: N x 2"),
                       (base.replace(trainer_ranks=2, devices=2), "weights float32: N x 4")):
        assert not inp.engine_shares_trainer_model
        use = check_fits(inp).devices[0]
        copy = [t for t in use.terms if t.process == "engine" and t.label == label]
        assert len(copy) == 1 and copy[0].bytes == 1_062_912 * int(label[-1])


def test_few_concurrent_sequences_are_a_note_not_a_problem():
    report = check_fits(qwen(gradient_checkpointing=True, logprob_chunk_tokens=2048,
                             micro_batch_tokens=16384))
    assert report.fits, report.problems
    # 8 GiB hold 74,880 tokens: 8 sequences of 9,216 at once, of the 768 asked for
    assert any("holds 8 of the 768 sequences" in n for n in report.notes)
    assert "train" in report.format() and "fits" in report.format()


def test_preflight_of_a_sharded_run_plans_per_rank_and_refuses_naming_a_knob():
    """gpu.yaml's 1.7B run with the one-node layout's 4 trainer ranks on 24 GB devices: the
    per-rank plan does not fit, and the refusal names knobs that do (checked by re-planning)."""
    import yaml

    from scalerl.config import deep_merge
    from scalerl.plan.adapters import PlanError, preflight
    from scalerl.sweep import expand, load_sweep, run_config

    config = Path(__file__).resolve().parents[2] / "config"
    data = yaml.safe_load((config / "gpu.yaml").read_text())
    deep_merge(data, yaml.safe_load((config / "layout-1node-8gpu.yaml").read_text()))
    sweep = load_sweep(data)
    run = [r for r in expand(sweep).values() if r.model == "qwen3-1.7b"][-1]
    cfg = run_config(sweep, run, base="", prompts="")
    assert cfg.trainer_ranks == 4 and cfg.generators == 4
    report = preflight(cfg, "Qwen/Qwen3-1.7B", 80 * GiB, devices=8, model_dtype="bfloat16")
    assert report.fits and report.inputs.trainer_ranks == 4
    with pytest.raises(PlanError, match="train \\(each rank\\) cuda:0-3: needs") as err:
        preflight(cfg.replace(numerics={"gradient_checkpointing": False}), "Qwen/Qwen3-1.7B",
                  24 * GiB, devices=8, model_dtype="bfloat16")
    assert "gradient_checkpointing: true" in str(err.value)


def test_gradients_held_unsharded_until_the_step_ends_and_the_knob_that_frees_them():
    """At several ranks with several micro-batches, `gradient_sync: step` keeps every layer's
    gradient unsharded until the last micro-batch: (L - 1) x layer params x 4 bytes more per
    rank, which `gradient_sync: micro_batch` gives back (and the fixes name)."""
    from scalerl.plan.arch import resolve_arch
    from scalerl.plan.check import trainer_fixes
    from scalerl.plan.memory import GiB, trainer_terms

    arch = resolve_arch("Qwen/Qwen3-1.7B")
    inp = PlanInputs(arch=arch, prompt_tokens=1024, generation_tokens=8192,
                     param_dtype="float32", compute_dtype="bfloat16",
                     gradient_checkpointing=True, logprob_chunk_tokens=2048,
                     micro_batch_tokens=16384, devices=8, trainer_ranks=4,
                     generator_dtype="bfloat16", device_memory_bytes=80 * GiB)
    assert inp.micro_batches > 1

    def need(x):
        return sum(t.bytes for t in trainer_terms(x))

    held = (arch.layers - 1) * arch.layer_params() * 4
    assert need(inp) - need(inp.replace(gradient_sync="micro_batch")) == held
    one_micro = inp.replace(micro_batch_tokens=inp.seq_tokens * inp.sequences_per_step)
    assert one_micro.micro_batches == 1 and need(one_micro) == need(
        one_micro.replace(gradient_sync="micro_batch"))  # nothing waits with one micro-batch
    between = (need(inp) + need(inp.replace(gradient_sync="micro_batch"))) // 2
    options, _ = trainer_fixes(inp, between)
    assert any(o.startswith("gradient_sync: micro_batch") for o in options), options
