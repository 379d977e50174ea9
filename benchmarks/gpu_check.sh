#!/usr/bin/env bash
# The one-time check of a CUDA device for the GPU study (benchmarks/gpu_check.py says what
# each part measures): FP32-head log-prob mismatch generator vs trainer in bf16 (the trainer's
# head with fp32 and with bf16 operands), trainer tokens/s and MFU, one short `scalerl train`
# chunk of a locally built Qwen3-architecture model (no download), the device's copy and GEMM
# rates (the planner's calibration: scalerl plan --gpu NAME --calibration OUT/gpu_check.json),
# the trainer FP32 head at V = 151,936 timed with fp32 x fp32 against bf16 operands, and the
# planner's trainer memory against torch.cuda.max_memory_allocated at 8,192 tokens. Figures go
# to stdout and OUT/gpu_check.json. A machine without vllm runs the HF engine only (the
# mismatch and chunk parts say so).
#
#   benchmarks/gpu_check.sh [OUT]            # OUT defaults to results/gpu_check
#   PYTHON=.venv/bin/python benchmarks/gpu_check.sh
#
# With CUDA: a ~150M-parameter shape (hidden 1024, 12 layers, GQA 16/8 x 64), batches of
# 16 x 2048 tokens, the chunk on vLLM when it is installed. Without CUDA: the small default
# shape on CPU; the CUDA-only parts (MFU, device rates, head timing, planner memory) print
# "skipped: ..." and the plan check runs against --gpu-mem 80GB.
#
# Then, with two or more GPUs, benchmarks/fsdp_check.py under torchrun on 2 of them: one FSDP2
# optimizer step of the trainer at the shipped one-node layout's shapes (config/gpu.yaml +
# config/layout-1node-8gpu.yaml: Qwen3-0.6B architecture, full-length sequences, its numerics)
# over NCCL, per-rank peak memory against the planner's per-rank figure, tokens/s per GPU and
# MFU (OUT/fsdp_check.json). With one GPU it says it needs two; without CUDA it runs the same
# script at a tiny shape on 2 gloo ranks (the code path, not the figures).
set -euo pipefail
OUT=${1:-results/gpu_check}
PYTHON=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$HERE/..${PYTHONPATH:+:$PYTHONPATH}"
GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
FSDP=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 2 "$HERE/fsdp_check.py"
      --out "$OUT")
if [ "$GPUS" -gt 0 ]; then
  ENGINE=hf
  if "$PYTHON" -c 'import vllm' 2>/dev/null; then ENGINE=vllm; fi
  "$PYTHON" "$HERE/gpu_check.py" --out "$OUT" --hidden 1024 --layers 12 --heads 16 \
    --kv-heads 8 --head-dim 64 --intermediate 3072 --sft-lr 1e-3 --batch 16 --seq 2048 \
    --timed-steps 3 --train-steps 3 --engine "$ENGINE" --head-operands \
    --head-hidden 2048 --head-tokens 2048 --plan-tokens 8192
  if [ "$GPUS" -ge 2 ]; then
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1} "${FSDP[@]}" --device cuda
  else
    echo "gpu_check: fsdp step skipped: needs 2 GPUs, this machine has 1"
  fi
else
  echo "gpu_check: no CUDA device: small shape on CPU, CUDA-only parts skipped"
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  "$PYTHON" "$HERE/gpu_check.py" --out "$OUT" --batch 2 --seq 128 --timed-steps 2 \
    --train-steps 2 --engine hf --head-operands --head-hidden 1024 --head-tokens 64
  "${FSDP[@]}" --device cpu --tiny --sequences 16
fi
