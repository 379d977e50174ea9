"""HF engine throughput when new sequences join the running batch one at a time vs in cohorts.

The PipelineRL generator (`scalerl.rl.pipeline`) admits queued requests into a batch of
`max_concurrent` rows only when at least `admit_min` rows are free. This benchmark drives one
`HFEngine` with the same rule, without the processes: 64 prompts × 8 samples of a prompt set
(default: the default sweep's train split), 81-token cap, interruption after a thinking budget
drawn from 61..72 (the default sweep's L 80), batch 128, one torch thread; it submits new
requests only when `admit_min` rows are free and reports generated tokens per second of
decoding for each `admit_min` (1 = top the batch up whenever a row finishes).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_admission.py \\
        --base results/models/tiny-m/base --model-config results/models/tiny-m/model.yaml
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque
from pathlib import Path


def main() -> int:
    import torch

    from scalerl.models.loading import format_prompt, load_model_config, load_tokenizer
    from scalerl.rl.prompts import load_prompt_table
    from scalerl.rollout.base import Request
    from scalerl.rollout.config import EngineConfig
    from scalerl.rollout.factory import make_engine

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--model-config", type=Path, default=None)
    parser.add_argument("--prompts", type=Path, default=Path("results/data/prompts.parquet"))
    parser.add_argument("--admit-min", type=int, nargs="+", default=[1, 32, 64])
    parser.add_argument("--n-prompts", type=int, default=64)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)

    model_cfg = load_model_config(args.model_config, args.base).replace(
        name=str(args.base.resolve()))
    tokenizer = load_tokenizer(args.base)
    rows = load_prompt_table(args.prompts, "train")
    rng = random.Random(0)
    rng.shuffle(rows)
    requests = [Request(row["prompt_id"], tuple(format_prompt(tokenizer, row["prompt"], model_cfg)),
                        sample_idx=i * 8 + j, max_new_tokens=81, think_budget=rng.randint(61, 72),
                        answer_budget=8)
                for i, row in enumerate(rows[:args.n_prompts]) for j in range(8)]
    engine = make_engine(args.base, model_cfg, EngineConfig(
        backend="hf", temperature=1.0, max_batch=args.batch, seed=0, interruption_text="</think>"))
    for admit_min in args.admit_min:
        queue, tokens, steps = deque(requests), 0, 0
        start = time.perf_counter()
        while queue or engine.num_in_flight():
            room = args.batch - engine.num_in_flight()
            if room >= min(admit_min, len(queue)) or not engine.num_in_flight():
                engine.submit([queue.popleft() for _ in range(min(room, len(queue)))])
            tokens += sum(c.n_tokens for c in engine.step())
            steps += 1
        seconds = time.perf_counter() - start
        print(f"admit_min {admit_min:4d}: {tokens / seconds:7.0f} tok/s ({tokens} tokens, "
              f"{seconds:.2f} s, {steps} decode steps)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
