"""Peak memory of one trainer step against sequence length, 151,936-token vocabulary head.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_logprob_memory.py

Model: a freshly initialised Qwen3 body (hidden 64, 1 layer, 2 heads of 32, tied 151,936 x 64
embedding/head: Qwen3's vocabulary on a toy body), float32 master weights, FP32 LM head.
Batch: one prompt group of `--group` sequences of L tokens each (16 prompt tokens, L - 16
loss tokens), CISPO with prompt aggregation (the ScaleRL recipe). Per length, three layouts:

- before: whole-group micro-batch, the unchunked head (today's default: logits [G, L, V]
  float32 kept by autograd);
- chunked: whole-group micro-batch, head scored at the loss positions `--chunk` at a time by
  the custom autograd Function (logits recomputed in the backward);
- after: chunked head and a `--budget`-token micro-batch budget.

What is measured, honestly: the peak resident-set growth of a fresh Python process during ONE
`optimizer_step` (forward, backward, clipping, AdamW), i.e. VmHWM after the step minus VmRSS
before it, in MiB, with the peak reset (/proc/self/clear_refs = 5) right before the step. A
warm-up step on a 2-sequence 24-token batch has allocated AdamW's state and the gradients
first, so the figure is the step's transient memory: activations, logits, gradient buffers,
recomputation temporaries and allocator slack (everything the CPU allocator touched; torch has
no CPU allocator statistics). Each point runs in its own subprocess (`--point`), so no point
inherits another's heap. "before" points whose [G, L, V] logits alone would exceed
`--before-max-gb` / 5 are skipped (about five such buffers are alive at its peak).
Linux only (/proc). Memory figures do not depend on CPU load; the run takes a few minutes.

Deliberately left out: wall time (taken separately on an idle machine) and CUDA (there
`torch.cuda.max_memory_allocated` would be the measure; the layouts are the same code).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

VOCAB = 151_936
PROMPT = 16
LAYOUTS = ("before", "chunked", "after")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _model(hidden: int, layers: int):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=4 * hidden,
                      num_hidden_layers=layers, num_attention_heads=hidden // 32,
                      num_key_value_heads=hidden // 32, head_dim=32, tie_word_embeddings=True,
                      max_position_embeddings=8192)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                            attn_implementation="sdpa")


def _batch(n: int, length: int):
    import torch

    from scalerl.rl.batch import TrainBatch

    gen = torch.Generator().manual_seed(length)
    ids = torch.randint(10, VOCAB, (n, length), generator=gen)  # [n, L]
    loss_mask = torch.zeros(n, length, dtype=torch.bool)
    loss_mask[:, PROMPT:] = True
    gen_logprobs = torch.where(loss_mask, -11.9, 0.0)  # ≈ -ln V: an untrained model's
    advantages = torch.linspace(-1.0, 1.0, n)  # [n]
    return TrainBatch(ids, torch.ones_like(ids), loss_mask, gen_logprobs, advantages,
                      torch.zeros(n, dtype=torch.long))


def run_point(layout: str, length: int, args) -> dict:
    """One step's peak RSS growth (MiB) in this process; see the module docstring."""
    import torch

    from scalerl.parallel.shard import shard_policy
    from scalerl.parallel.world import SINGLE
    from scalerl.rl.losses import LossNormalizer
    from scalerl.rl.recipe import recipe_from_preset
    from scalerl.rl.update import StepNumerics, make_optimizer, optimizer_step

    torch.set_num_threads(1)
    policy = shard_policy(_model(args.hidden, args.layers), SINGLE)  # the trainer's one rank
    recipe = recipe_from_preset("scalerl", {"optimizer": {"warmup_steps": 0}})
    optimizer, scheduler = make_optimizer(policy, recipe)
    numerics = {"before": StepNumerics(compute_dtype="float32"),
                "chunked": StepNumerics(compute_dtype="float32",
                                        logprob_chunk_tokens=args.chunk),
                "after": StepNumerics(compute_dtype="float32", logprob_chunk_tokens=args.chunk,
                                      micro_batch_tokens=args.budget)}[layout]
    kw = {"temperature": 1.0, "micro_groups": 0, "numerics": numerics, "world": SINGLE}

    def whole(batch):  # the loss denominators of the whole batch
        return LossNormalizer.from_batch(batch.loss_mask, batch.group_ids)

    warm = _batch(2, PROMPT + 8)
    optimizer_step(policy, optimizer, scheduler, warm, recipe, step=1, normalizer=whole(warm),
                   **kw)
    batch = _batch(args.group, length)
    normalizer = whole(batch)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before_kib = _status_kib("VmRSS")
    out = optimizer_step(policy, optimizer, scheduler, batch, recipe, step=2,
                         normalizer=normalizer, **kw)
    peak_kib = _status_kib("VmHWM")
    return {"layout": layout, "length": length, "peak_mib": (peak_kib - before_kib) / 1024,
            "baseline_mib": before_kib / 1024, "micro_batches": out["micro_batches"],
            "loss": out["loss"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--group", type=int, default=2, help="sequences in the prompt group")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=256, help="logprob_chunk_tokens")
    parser.add_argument("--budget", type=int, default=2048, help="micro_batch_tokens")
    parser.add_argument("--before-max-gb", type=float, default=7.0)
    parser.add_argument("--point", nargs=2, metavar=("LAYOUT", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        print(json.dumps(run_point(args.point[0], int(args.point[1]), args)))
        return 0
    if args.hidden % 32:
        parser.error(f"--hidden {args.hidden} must be a multiple of 32 (head_dim 32)")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = ["--group", str(args.group), "--hidden", str(args.hidden), "--layers",
              str(args.layers), "--chunk", str(args.chunk), "--budget", str(args.budget)]
    print(f"vocab {VOCAB}, hidden {args.hidden}, {args.layers} layer(s), group of {args.group} "
          f"sequences, chunk {args.chunk} tokens, budget {args.budget} tokens; "
          "peak RSS growth of one optimizer step (MiB)")
    print("| L | tokens | [G,L,V] fp32 logits MiB | before | chunked | after (micro-batches) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for length in args.lengths:
        logits_mib = args.group * length * VOCAB * 4 / 2**20
        cells = {}
        for layout in LAYOUTS:
            if layout == "before" and logits_mib * 5 > args.before_max_gb * 1024:
                cells[layout] = "skipped"
                continue
            proc = subprocess.run([sys.executable, __file__, "--point", layout, str(length),
                                   *common], capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr)
                return proc.returncode
            point = json.loads(proc.stdout.strip().splitlines()[-1])
            cells[layout] = f"{point['peak_mib']:.0f}"
            if layout == "after":
                cells[layout] += f" ({point['micro_batches']})"
        print(f"| {length} | {args.group * length} | {logits_mib:.0f} | {cells['before']} | "
              f"{cells['chunked']} | {cells['after']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
