#!/bin/bash
# A short RL run of one model of the default sweep, evaluated after every chunk, then fitted:
# the experiments behind the "why math is add + sub", learning-rate, temperature and chunk
# schedule figures in BENCHMARKS.md. Needs a finished default sweep (RESULTS/runs/<run>/run.yaml,
# RESULTS/models/<model>/base, RESULTS/data/prompts.parquet).
#
#   benchmarks/exp_short_run.sh NAME MODEL GEN_LEN "STEPS_OF_EACH_CHUNK" [--set KEY=VALUE ...]
#   e.g. PROMPTS=/tmp/prompts_add_sub.parquet benchmarks/exp_short_run.sh m_as tiny-m 80 "20 20 20"
#        benchmarks/exp_short_run.sh s_lr tiny-s 80 "20 20 20" --set recipe.optimizer.lr=3.0e-4
#        benchmarks/exp_short_run.sh m_lr tiny-m 80 "4 4 8 12 16 16" --set recipe.optimizer.lr=1.0e-4
#
# RESULTS (default results) is the sweep to start from; PROMPTS (default RESULTS/data/prompts.parquet)
# the prompt set for training and eval; OUT (default /tmp/exp) holds the chunks, the eval
# Parquets and the fit. Chunk 0's eval is the sweep's own when PROMPTS is the sweep's prompt
# set, else it is evaluated here. Prints pass rate per task per chunk, then the fit per task.
set -euo pipefail
name=$1; model=$2; gen_len=$3; schedule=$4; shift 4
results=${RESULTS:-results}
prompts=${PROMPTS:-$results/data/prompts.parquet}
run_dir=$results/runs/${model}_L${gen_len}_scalerl_b16x8_s0
work=${OUT:-/tmp/exp}/$name
py=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
rm -rf "$work"; mkdir -p "$work"
cp "$run_dir/run.yaml" "$work/run.yaml"
model_cfg=$results/models/$model/model.yaml
evaluate() {  # evaluate CHECKPOINT CHUNK
  $py -m scalerl eval --config "$work/run.yaml" --checkpoint "$1" --chunk "$2" \
    --prompts "$prompts" --out "$work/eval$2.parquet" --model-config "$model_cfg" \
    2> "$work/eval$2.log"
  $py -c "import pandas as pd; d = pd.read_parquet('$work/eval$2.parquet'); \
print('$name', 'chunk', $2, 'step', d['step'].max(), d.groupby('task')['correct'].mean().round(3).to_dict())"
}
prev=$results/models/$model/base
if [[ -z "${PROMPTS:-}" && -f "$run_dir/eval/chunk0.parquet" ]]; then
  cp "$run_dir/eval/chunk0.parquet" "$work/eval0.parquet"
else
  evaluate "$prev" 0
fi
read -ra chunk_steps <<< "$schedule"
chunk_list=$(IFS=,; echo "${chunk_steps[*]}")
for ((k = 0; k < ${#chunk_steps[@]}; k++)); do
  $py -m scalerl train --config "$work/run.yaml" --chunk $((k + 1)) --init "$prev" \
    --model-config "$model_cfg" --prompts "$prompts" --out "$work/chunk$((k + 1))" \
    --set "chunk_steps=[$chunk_list]" "$@" 2> "$work/train$k.log"
  prev=$work/chunk$((k + 1))
  evaluate "$prev" $((k + 1))
done
$py -m scalerl fit "$work"/eval*.parquet --group-by task --compute-col compute_flops \
  --out "$work/fit" 2> "$work/fit.log" || true
grep -E "\] \[[0-9]+/[0-9]+\]" "$work/fit.log" || tail -3 "$work/fit.log"
