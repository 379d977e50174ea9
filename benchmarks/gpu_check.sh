#!/usr/bin/env bash
# The one-time check of a CUDA device for the GPU study (benchmarks/gpu_check.py says what
# each part measures): FP32-head log-prob mismatch generator vs trainer in bf16, trainer
# tokens/s and MFU, and one short `scalerl train` chunk of a locally built Qwen3-architecture
# model (no download). Figures go to stdout and OUT/gpu_check.json.
#
#   benchmarks/gpu_check.sh [OUT]            # OUT defaults to results/gpu_check
#   PYTHON=.venv/bin/python benchmarks/gpu_check.sh
#
# With CUDA: a ~150M-parameter shape (hidden 1024, 12 layers, GQA 16/8 x 64), batches of
# 16 x 2048 tokens, the chunk on vLLM when it is installed. Without CUDA: the small default
# shape on CPU; the CUDA-only parts (vLLM mismatch, MFU) print "skipped: ..." and the plan
# check runs against --gpu-mem 80GB.
set -euo pipefail
OUT=${1:-results/gpu_check}
PYTHON=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$HERE/..${PYTHONPATH:+:$PYTHONPATH}"
if "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  ENGINE=hf
  if "$PYTHON" -c 'import vllm' 2>/dev/null; then ENGINE=vllm; fi
  exec "$PYTHON" "$HERE/gpu_check.py" --out "$OUT" --hidden 1024 --layers 12 --heads 16 \
    --kv-heads 8 --head-dim 64 --intermediate 3072 --sft-lr 1e-3 --batch 16 --seq 2048 \
    --timed-steps 3 --train-steps 3 --engine "$ENGINE"
else
  echo "gpu_check: no CUDA device: small shape on CPU, CUDA-only parts skipped"
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  exec "$PYTHON" "$HERE/gpu_check.py" --out "$OUT" --batch 2 --seq 128 --timed-steps 2 \
    --train-steps 2 --engine hf
fi
