"""An FSDP2 optimizer step at the shipped multi-GPU layout's shapes, one process per rank.

    python -m torch.distributed.run --standalone --nproc-per-node 2 \
        benchmarks/fsdp_check.py --out results/gpu_check [--sequences 32]

Run by benchmarks/gpu_check.sh on a machine with two or more GPUs (NCCL, `cpu:gloo,cuda:nccl`).
The run is config/gpu.yaml's first run with config/layout-1node-8gpu.yaml applied (through
`scalerl.sweep`: its numerics, recipe and generation cap), its model's architecture
(Qwen3-0.6B, random weights built from the architecture numbers: nothing is downloaded) and
`--sequences` completions of the full length (the longest prompt `--prompt-tokens` + the cap;
the layout's step has 768, a subset keeps the check short). Every rank runs the trainer's own
step on its share (`scalerl.rl.batch.score_batch` / `split_shares`,
`scalerl.rl.update.optimizer_step` on the FSDP2-sharded policy): one warm-up step, then
`--steps` timed. Printed and written to OUT/fsdp_check.json: per-rank peak device memory
(`torch.cuda.max_memory_allocated`) against the planner's per-rank trainer figure
(`scalerl.plan.memory.trainer_terms`, its process margin left out) for the same shapes,
seconds per step, trained tokens/s per GPU and the MFU lower bound (6·N·tokens/s / peak).

`--device cpu --tiny` runs the same code at a tiny shape with gloo (tests/e2e checks that the
script works); the figures mean nothing there. Deliberately left out: generation (the
layout's generators are separate processes; vLLM is not needed here).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
INTERRUPTION_TOKENS = 32  # the paper's interruption sentence in Qwen3's tokens, rounded up


def shipped_run(tiny: bool):
    """config/gpu.yaml + the one-node layout's first run (`scalerl.sweep`), and its arch."""
    import yaml

    from scalerl.config import deep_merge
    from scalerl.plan.arch import resolve_arch
    from scalerl.sweep import expand, load_sweep, run_config

    data = yaml.safe_load((REPO / "config" / "gpu.yaml").read_text())
    deep_merge(data, yaml.safe_load((REPO / "config" / "layout-1node-8gpu.yaml").read_text()))
    sweep = load_sweep(data)
    run = next(iter(expand(sweep).values()))
    cfg = run_config(sweep, run, base="", prompts="")
    name = sweep.models[run.model].config["model"]["name"]
    arch = resolve_arch("tiny-m" if tiny else name)
    if tiny:  # a CPU smoke shape: tiny lengths and token budgets
        cfg = cfg.replace(numerics={"logprob_chunk_tokens": 8, "micro_batch_tokens": 96,
                                    "compute_dtype": "float32"})
    return cfg, arch


def build_model(arch, seed: int = 0):
    """A transformers Qwen3 (or the tiny Llama) with `arch`'s numbers and random weights."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import build_tiny_model

    if arch.name.startswith("tiny"):
        return build_tiny_model(ModelConfig(name=arch.name, seed=seed))
    cfg = Qwen3Config(vocab_size=arch.vocab, hidden_size=arch.hidden,
                      num_hidden_layers=arch.layers, num_attention_heads=arch.heads,
                      num_key_value_heads=arch.kv_heads, head_dim=arch.head_dim,
                      intermediate_size=arch.intermediate,
                      tie_word_embeddings=arch.tied_embeddings,
                      max_position_embeddings=arch.max_positions)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                            attn_implementation="sdpa")


def completions(n: int, prompt: int, generated: int, vocab: int):
    """`n` completions of one prompt length and one generation length, half of each group of
    8 right (every group keeps its samples)."""
    from scalerl.rollout.base import Completion, Request

    rng = random.Random(0)
    out, correct = [], []
    for i in range(n):
        group = i // 8
        ids = tuple(rng.randrange(10, vocab) for _ in range(prompt))
        out.append(Completion(Request(f"p{group}", ids, sample_idx=i, tag=group),
                              [rng.randrange(10, vocab) for _ in range(generated)],
                              [-8.0] * generated, [True] * generated, [0] * generated, "",
                              "length", True, False))
        correct.append(i % 2 == 0)
    return out, correct


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--sequences", type=int, default=32, help="completions of the full length")
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--tiny", action="store_true", help="CPU smoke shape (tests)")
    p.add_argument("--peak-tflops", type=float, default=None)
    args = p.parse_args()

    from gpu_check import peak_flops

    from scalerl.parallel.shard import shard_policy
    from scalerl.parallel.world import init_world, shutdown
    from scalerl.plan.memory import PlanInputs, trainer_terms
    from scalerl.rl.batch import score_batch, split_shares
    from scalerl.rl.compute import count_flop_params
    from scalerl.rl.update import make_optimizer, optimizer_step
    from scalerl.rollout.budget import GenerationBudget
    from scalerl.utils.io import write_json_atomic

    world = init_world(args.device)
    cfg, arch = shipped_run(args.tiny)
    recipe = cfg.recipe
    prompt = 8 if args.tiny else args.prompt_tokens
    cap = 16 if args.tiny else GenerationBudget.from_recipe(
        recipe, INTERRUPTION_TOKENS).max_new_tokens
    model = build_model(arch)
    n_flop = count_flop_params(model)
    policy = shard_policy(model, world)
    optimizer, scheduler = make_optimizer(policy, recipe)
    shares = None
    if world.is_main:
        scored = score_batch(*completions(args.sequences, prompt, cap, arch.vocab), recipe, 0)
        shares = split_shares(scored, world.size)
    share = world.scatter_object(shares)
    batch = share.pad(0)
    cuda = world.device.type == "cuda"

    def step(n: int) -> dict:
        return optimizer_step(policy, optimizer, scheduler, batch, recipe,
                              temperature=cfg.temperature, micro_groups=0, step=n,
                              numerics=cfg.numerics, normalizer=share.normalizer, world=world)

    step(1)  # warm-up: kernels, AdamW state
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    world.barrier()
    start, tokens = time.perf_counter(), 0
    for n in range(args.steps):
        tokens += step(n + 2)["trained_tokens"]
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    peak_mem = torch.cuda.max_memory_allocated() if cuda else 0
    peaks = world.gather_object(peak_mem)
    inp = PlanInputs(arch=arch, prompts_per_step=max(1, args.sequences // 8),
                     generations_per_prompt=8, prompt_tokens=prompt, generation_tokens=cap,
                     param_dtype=cfg.numerics.param_dtype,
                     compute_dtype=cfg.numerics.compute_dtype,
                     gradient_checkpointing=cfg.numerics.gradient_checkpointing,
                     logprob_chunk_tokens=cfg.numerics.logprob_chunk_tokens,
                     micro_batch_tokens=cfg.numerics.micro_batch_tokens,
                     fp32_lm_head=recipe.fp32_lm_head, trainer_ranks=world.size,
                     process_overhead_bytes=0)
    planned = sum(t.bytes for t in trainer_terms(inp))
    peak = peak_flops(args.peak_tflops) if cuda else None
    per_gpu = tokens / args.steps / seconds / world.size
    result = {"ranks": world.size, "device": str(world.device), "model": arch.name,
              "sequences": args.sequences, "sequence_tokens": prompt + cap,
              "numerics": cfg.numerics.to_dict(), "seconds_per_step": seconds,
              "tokens_per_s_per_gpu": per_gpu,
              "mfu": 6 * n_flop * per_gpu / peak if peak else None,
              "peak_memory_gib_per_rank": [b / 2**30 for b in peaks or []],
              "planned_trainer_gib_per_rank": planned / 2**30}
    if world.is_main:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "fsdp_check.json", result)
        mfu = f"{100 * result['mfu']:.1f} %" if result["mfu"] is not None else "n/a"
        print(f"fsdp: {world.size} ranks, {arch.name}, {args.sequences} x {prompt + cap} "
              f"tokens, {seconds:.2f} s/step, {per_gpu:,.0f} trained tok/s/GPU, MFU {mfu}; "
              f"peak memory per rank {[round(b / 2**30, 2) for b in peaks]} GiB, planned "
              f"{planned / 2**30:.2f} GiB (trainer terms without the process margin)",
              flush=True)
    shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
