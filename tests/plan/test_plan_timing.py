"""The time/cost estimate (`scalerl.plan.timing`): each part against hand arithmetic on round
numbers, the FLOP model against prime-rl's published trainer figure, the overlap rule, the
calibration file and the CLI."""

import json
from pathlib import Path

import pytest

from scalerl.cli import main
from scalerl.config import ConfigError
from scalerl.plan.arch import PUBLIC_ARCHS, ModelArch
from scalerl.plan.memory import GiB, PlanInputs
from scalerl.plan.timing import (
    DeviceSpec,
    Efficiency,
    estimate_time,
    load_calibration,
    resolve_device,
)

ROOT = Path(__file__).resolve().parents[2]
# round numbers: 1 TB/s, 100 TFLOP/s bf16, 10 fp32, NVLink 100 GB/s, PCIe 10 GB/s
DEVICE = DeviceSpec("round", 80 * GiB, 1e12, 100e12, 10e12, 100e9, 10e9)
ONE = Efficiency(mfu=1.0, hbm=1.0, mm=1.0, link=1.0, pcie=1.0, source="test")
# N: 4 layers x 1,000,000 + embedding 1,000 x 1,000 = 5,000,000 with hidden 1,000 (+ norm)
ARCH = ModelArch(name="round", hidden=1000, layers=4, heads=10, kv_heads=2, head_dim=100,
                 intermediate=1000, vocab=1000, tied_embeddings=True, max_positions=100_000,
                 qk_norm=False)


def _inputs(**kw) -> PlanInputs:
    base = dict(arch=ARCH, prompts_per_step=10, generations_per_prompt=10, prompt_tokens=1000,
                generation_tokens=2000, expected_generation_fraction=0.5,
                param_dtype="float32", compute_dtype="bfloat16", generator_dtype="bfloat16",
                gen_batch=1000, eval_batch=1000, vllm_kv_cache_bytes=0,
                vllm_prefix_caching=False, logprob_chunk_tokens=0,
                gradient_checkpointing=False, lm_head_operands="bfloat16",
                devices=2, generators=1)
    return PlanInputs(**{**base, **kw})


def test_generation_roofline_by_hand():
    inp = _inputs()
    n, kv = ARCH.n_params(), ARCH.kv_bytes_per_token(2)  # kv = 2 x 4 x 200 x 2 = 3,200 B
    assert kv == 3200
    # KV cache of exactly 40 sequences at the mean context 1000 + 1000/2 = 1500 tokens
    blocks = 40 * 1500 // 16 + 1 + 1  # whole 16-token blocks, one held back
    est = estimate_time(inp.replace(vllm_kv_cache_bytes=blocks * 16 * kv), DEVICE,
                        efficiency=ONE, steps=10)
    assert est.concurrency == 40
    t_iter = (n * 2 + 40 * 1500 * kv) / 1e12  # memory-bound: 2 x N >> weights + KV reads
    assert est.gen_tokens_per_s == pytest.approx(40 / t_iter)
    prefill = 2 * n * 100 * 1000 / 100e12  # 100 sequences x 1000 prompt tokens
    assert est.generate_s == pytest.approx(100 * 1000 * t_iter / 40 + prefill)


def test_trainer_flops_by_hand():
    inp = _inputs(vllm_kv_cache_bytes=10 * GiB)
    est = estimate_time(inp, DEVICE, efficiency=ONE, steps=10)
    n_body = ARCH.n_params() - 1000 * 1000
    seq = 1000 + 1000  # prompt + mean completion
    body = 3 * (2 * n_body + 4 * 4 * 1000 * seq / 2)  # per token, forward x 3
    head = 4 * 2 * 1000 * 1000  # 4 GEMMs per scored token (every position: no chunking)
    flops = 100 * seq * (body + head)
    adamw = ARCH.n_params() * 28 / 1e12
    assert est.train_s == pytest.approx(flops / 100e12 + adamw)
    # fp32 head operands: the head's GEMMs at the fp32 peak (10x slower here)
    fp32 = estimate_time(inp.replace(lm_head_operands="float32"), DEVICE, efficiency=ONE,
                         steps=10)
    assert fp32.train_s - est.train_s == pytest.approx(100 * seq * head * (1 / 10e12 -
                                                                            1 / 100e12))
    # checkpointing recomputes the body: 4 passes; chunked head: only the completions
    gc = estimate_time(inp.replace(gradient_checkpointing=True, logprob_chunk_tokens=512),
                       DEVICE, efficiency=ONE, steps=10)
    assert gc.train_s == pytest.approx((100 * seq * body * 4 / 3 + 100 * 1000 * head)
                                       / 100e12 + adamw)


def test_flop_model_reproduces_prime_rls_trainer_figure():
    """prime-rl: Qwen3-0.6B RL, 16k tokens, 1 x H100, MFU 11.1 %, 11.9k tokens/s."""
    inp = PlanInputs(arch=PUBLIC_ARCHS["Qwen/Qwen3-0.6B"], prompts_per_step=1,
                     generations_per_prompt=1, prompt_tokens=1, generation_tokens=16383,
                     expected_generation_fraction=1.0, gradient_checkpointing=False,
                     logprob_chunk_tokens=0, lm_head_operands="bfloat16",
                     vllm_kv_cache_bytes=8 * GiB, devices=2)
    est = estimate_time(inp, resolve_device("H100"), steps=1,
                        efficiency=Efficiency(mfu=0.111, source="prime-rl"))
    assert est.trainer_tokens_per_s == pytest.approx(11_900, rel=0.05)


def test_overlap_only_with_generators_on_their_own_devices():
    inp = _inputs(vllm_kv_cache_bytes=10 * GiB)
    own = estimate_time(inp, DEVICE, efficiency=ONE, steps=100)
    assert own.transport == "nccl"
    assert own.step_s == pytest.approx(max(own.generate_s, own.train_s + own.push_s))
    assert own.push_s == pytest.approx(ARCH.n_params() * 2 / 100e9 + 0.05)
    shared = estimate_time(inp.replace(devices=1), DEVICE, efficiency=ONE, steps=100)
    assert shared.transport == "ipc"
    assert shared.step_s == pytest.approx(shared.generate_s + shared.train_s + shared.push_s)
    assert own.train_gpu_hours == pytest.approx(100 * own.step_s * 2 / 3600)
    assert own.bottleneck == "generation"


def test_calibration_from_gpu_check(tmp_path):
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "throughput": {"mfu": 0.3},
                                "device_rates": {"copy_bytes_per_s": 2.68e12,
                                                 "bf16_flops": 6.9e14}}))
    eff = load_calibration(path, resolve_device("H100-80GB"))
    assert (eff.mfu, round(eff.hbm, 3), round(eff.mm, 3)) == (0.3, 0.8, 0.698)
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(ConfigError, match="no measurements"):
        load_calibration(tmp_path / "empty.json", resolve_device("H100-80GB"))
    with pytest.raises(ConfigError, match="not in the device table"):
        resolve_device("V100")


def test_cli_prints_step_time_gpu_hours_and_bottleneck(capsys):
    code = main(["plan", "--config", str(ROOT / "config" / "gpu.yaml"), "--gpu", "H100-80GB",
                 "--brief", "--usd-per-gpu-hour", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("time on H100-80GB") == 4
    assert "bottleneck: generation" in out and "GPU-h" in out and "$" in out
    assert "sweep: 4 run(s)" in out
    code = main(["plan", "--config", str(ROOT / "config" / "gpu.yaml"), "--gpu-mem", "80GB",
                 "--mfu", "0.3"])
    assert code != 0 and "give the device with --gpu" in capsys.readouterr().err
