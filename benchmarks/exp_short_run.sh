#!/bin/bash
# A short RL run of one model of the default sweep, evaluated after every chunk: the experiment
# behind the "why math is add + sub" and learning-rate / temperature figures in BENCHMARKS.md.
# Needs a finished default sweep (results/runs/<run>/run.yaml, results/models/<model>/base).
#
#   benchmarks/exp_short_run.sh NAME MODEL GEN_LEN CHUNKS STEPS [--set KEY=VALUE ...]
#   e.g. PROMPTS=/tmp/prompts_add_sub.parquet benchmarks/exp_short_run.sh m_as tiny-m 80 3 20
#        benchmarks/exp_short_run.sh s_lr tiny-s 80 3 20 --set recipe.overrides.optimizer.lr=3.0e-4
#
# PROMPTS (default results/data/prompts.parquet) is the prompt set for training and eval;
# OUT (default /tmp/exp) holds the chunks and eval Parquets. Prints pass rate per task per chunk.
set -euo pipefail
name=$1; model=$2; gen_len=$3; chunks=$4; steps=$5; shift 5
prompts=${PROMPTS:-results/data/prompts.parquet}
run_dir=results/runs/${model}_L${gen_len}_scalerl_b16x8_s0
work=${OUT:-/tmp/exp}/$name
py=${PY:-.venv/bin/python}
rm -rf "$work"; mkdir -p "$work"
cp "$run_dir/run.yaml" "$work/run.yaml"
prev=results/models/$model/base
for ((k = 0; k < chunks; k++)); do
  OMP_NUM_THREADS=1 $py -m scalerl train --config "$work/run.yaml" --chunk $k --init "$prev" \
    --model-config results/models/$model/model.yaml --prompts "$prompts" \
    --out "$work/chunk$((k + 1))" --set steps_per_chunk="$steps" "$@" 2> "$work/train$k.log"
  prev=$work/chunk$((k + 1))
  OMP_NUM_THREADS=1 $py -m scalerl eval --config "$work/run.yaml" --checkpoint "$prev" \
    --chunk $((k + 1)) --prompts "$prompts" --out "$work/eval$((k + 1)).parquet" \
    --model-config results/models/$model/model.yaml 2> "$work/eval$k.log"
  $py -c "import pandas as pd; d = pd.read_parquet('$work/eval$((k + 1)).parquet'); \
print('$name', 'chunk', $((k + 1)), d.groupby('task')['correct'].mean().round(3).to_dict())"
done
