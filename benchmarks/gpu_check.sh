#!/usr/bin/env bash
# The one-time check of a CUDA device for the GPU study, prepared for one GPU without vLLM and
# without network (e.g. one H200 with PyTorch 2.11 CUDA and transformers 5.17), in at most 8
# minutes: the trainer-side checks (benchmarks/gpu_check.py says what each part measures):
#   - the trainer's FP32 head at V = 151,936: the GEMM it takes (torch.mm(bf16, bf16,
#     out_dtype=float32) on CUDA), timed with fp32 x fp32 against bf16 operands;
#   - the planner's trainer memory against torch.cuda.max_memory_allocated at 8,192 tokens;
#   - a 3-step `scalerl train` chunk of a locally built Qwen3-architecture model with the HF
#     engine (no download);
#   - trainer tokens/s and MFU, the device's copy and GEMM rates (the planner's calibration:
#     scalerl plan --gpu NAME --calibration OUT/gpu_check.json), the generator/trainer
#     log-prob mismatch (vLLM too where the vllm module imports).
# Every part that does not run prints `gpu_check: PART skipped: WHY`; the parts stop starting
# after 7 minutes (--time-budget-s 420). Figures go to stdout and OUT/gpu_check.json.
#
#   benchmarks/gpu_check.sh [OUT]            # OUT defaults to results/gpu_check
#   PYTHON=.venv/bin/python benchmarks/gpu_check.sh
#
# With CUDA: a ~150M-parameter shape (hidden 1024, 12 layers, GQA 16/8 x 64), batches of
# 16 x 2048 tokens. Without CUDA: the small default shape on CPU; the CUDA-only parts (MFU,
# device rates, head timing, planner memory) print "skipped: ..." and the chunk's plan check
# runs against --gpu-mem 80GB.
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
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # no network: nothing may be fetched
GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
FSDP=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 2 "$HERE/fsdp_check.py"
      --out "$OUT")
if [ "$GPUS" -gt 0 ]; then
  "$PYTHON" "$HERE/gpu_check.py" --out "$OUT" --hidden 1024 --layers 12 --heads 16 \
    --kv-heads 8 --head-dim 64 --intermediate 3072 --sft-lr 1e-3 --batch 16 --seq 2048 \
    --timed-steps 3 --train-steps 3 --engine hf --head-operands \
    --head-hidden 2048 --head-tokens 2048 --plan-tokens 8192 --time-budget-s 420
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
