"""Optimizer steps per second of 1 vs 2 FSDP2 trainer ranks on CPU (gloo), same batch.

Each rank count runs under `torchrun --standalone --nproc-per-node N` with one torch thread
per rank (OMP_NUM_THREADS=1) and the same global batch: `--prompts` prompts × `--samples`
completions of 8..`--max-len` tokens (a fixed seed; half of each group correct, so no group
is filtered and both runs train on every row) on a tiny model built from a config (`--model`,
default tiny-m). It takes one warm-up step, then times `--steps` steps of the trainer's own
path at every world size: the main rank scores the batch and scatters the shares
(`scalerl.rl.batch`), every rank runs `scalerl.rl.update.optimizer_step` on its share of the
FSDP2-sharded policy (the `scalerl` recipe preset, whole-batch micro-batches), and prints
steps/s and trained tokens/s per rank count.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_parallel.py --ranks 1 2

Measured once (2 cores shared with other jobs, load average ~0.7-1.7): tiny-m, 8x8 batch,
1 rank 2.18 steps/s, 2 ranks 2.37 steps/s (1.09x). On a shared machine the figures are noisy (other processes take cores): run it when idle.
With N ranks each rank forwards 1/N of the batch but all-gathers every layer's weights and
reduce-scatters its gradients, so the gain on CPU depends on free cores and model size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path


def _batch(n_prompts: int, samples: int, max_len: int):
    from scalerl.rollout.base import Completion, Request

    rng = random.Random(0)
    comps, correct = [], []
    for group in range(n_prompts):
        prompt = tuple(rng.randrange(6, 103) for _ in range(rng.randrange(6, 12)))
        for i in range(samples):
            n = rng.randrange(8, max_len + 1)
            comps.append(Completion(Request(f"p{group}", prompt, sample_idx=i, tag=group),
                                    [rng.randrange(6, 103) for _ in range(n)],
                                    [-4.6 + rng.uniform(-0.5, 0.5) for _ in range(n)],
                                    [True] * n, [0] * n, "", "stop", False, False))
            correct.append(i % 2 == 0)  # half right: every group has reward variance
    return comps, correct


def _rank_main(args) -> None:
    import torch

    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import build_tiny_model
    from scalerl.parallel.shard import shard_policy
    from scalerl.parallel.world import init_world, shutdown
    from scalerl.rl.batch import score_batch, split_shares
    from scalerl.rl.numerics import StepNumerics
    from scalerl.rl.recipe import recipe_from_preset
    from scalerl.rl.update import make_optimizer, optimizer_step

    torch.set_num_threads(1)
    world = init_world("cpu")
    recipe = recipe_from_preset("scalerl")
    policy = shard_policy(build_tiny_model(ModelConfig(name=args.model, seed=0)), world)
    optimizer, scheduler = make_optimizer(policy, recipe)
    shares = None
    if world.is_main:
        scored = score_batch(*_batch(args.prompts, args.samples, args.max_len), recipe, 0)
        shares = split_shares(scored, world.size)
    share = world.scatter_object(shares)
    batch = share.pad(0)
    tokens = 0
    for step in range(args.steps + 1):
        if step == 1:
            world.barrier()
            t0 = time.perf_counter()
        out = optimizer_step(policy, optimizer, scheduler, batch, recipe, temperature=1.0,
                             micro_groups=0, step=step + 1, numerics=StepNumerics(),
                             normalizer=share.normalizer, world=world)
        tokens += out["trained_tokens"] if step else 0
    world.barrier()
    seconds = time.perf_counter() - t0
    if world.is_main:
        print(json.dumps({"ranks": world.size, "steps_per_s": args.steps / seconds,
                          "tokens_per_s": tokens / seconds, "seconds": seconds}))
    shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--model", default="tiny-m")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-len", type=int, default=48)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        _rank_main(args)
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    print(f"model {args.model}, batch {args.prompts}x{args.samples} (8..{args.max_len} "
          f"completion tokens), {args.steps} timed steps, 1 thread/rank, "
          f"{os.cpu_count()} CPU(s) visible")
    results = []
    for n in args.ranks:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={n}", __file__, "--rank-main", "--model", args.model,
               "--prompts", str(args.prompts), "--samples", str(args.samples),
               "--max-len", str(args.max_len), "--steps", str(args.steps)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            return 1
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(row)
        print(f"{n} rank(s): {row['steps_per_s']:.3f} steps/s, {row['tokens_per_s']:.0f} "
              f"trained tokens/s ({row['seconds']:.1f} s)")
    if len(results) > 1:
        base = results[0]["steps_per_s"]
        for row in results[1:]:
            print(f"speed-up {row['ranks']} vs {results[0]['ranks']} rank(s): "
                  f"{row['steps_per_s'] / base:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
