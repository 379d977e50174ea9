"""Benchmark: the weight push of PipelineRL, per step, against model size and generators K.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_push.py --sizes tiny-m,50m,150m --k 1,2
    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/bench_push.py --engine vllm --k 1

A `scalerl.rl.pipeline.Pipeline` of K generator processes (HF engine, or vLLM's AsyncLLM
with `--engine vllm`) holds a model in the generators' dtype (bfloat16); the trainer's copy is
float32 master weights, as in a run. Per step the trainer pushes its state dict as a new
version and issues one 1-token request per generator for that version (max_lag 0, so a
generator admits it only once it has loaded the version). Reported per step (medians over
`--steps`): `push_s`, the trainer's time inside `push_weights`; `e2e_s`, from the push to the
last generator's completion made with the new weights (push + every generator's load + one
1-token generation); `gen_s`, the same 1-token round trip without a push (subtract it from
e2e_s for the load); the bytes one push writes when the pipeline reports them.

Sizes: tiny-m (the tiny Llama, tied head) and Qwen3-architecture models with the tiny
tokenizer's vocabulary at ~50M and ~150M parameters (tied head), random weights, seed 0.
The script runs against any checkout of the package (it only uses the Pipeline's public
calls), so `PYTHONPATH=<old checkout>` measures the code before a change.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import tempfile
import time
from pathlib import Path

QWEN3_SHAPES = {  # hidden, layers, heads, kv_heads, head_dim, intermediate
    "50m": (768, 8, 12, 4, 64, 2048),
    "150m": (1024, 12, 16, 8, 64, 3072),
}


def build(size: str, out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import build_tiny_model, new_tiny_tokenizer, save_model_dir

    tok = new_tiny_tokenizer()
    if size in QWEN3_SHAPES:
        hidden, layers, heads, kv, head_dim, inter = QWEN3_SHAPES[size]
        config = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=kv,
                             head_dim=head_dim, intermediate_size=inter,
                             max_position_embeddings=512, tie_word_embeddings=True,
                             bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        model = build_tiny_model(ModelConfig(name=size, seed=0))
    return save_model_dir(model, tok, out / size)


def run(size: str, path: Path, k: int, args) -> dict:
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import load_model
    from scalerl.rl.pipeline import EngineSpec, Pipeline
    from scalerl.rl.trainer import build_generator_engine
    from scalerl.rollout.base import Request
    from scalerl.rollout.config import EngineConfig
    from scalerl.rollout.vllm_settings import VllmSettings

    trainer = load_model(path, ModelConfig(name=str(path), dtype="float32"))
    n_params = sum(p.numel() for p in trainer.parameters())  # unique (tied head once)
    gen_cfg = ModelConfig(name=str(path), dtype="bfloat16", fp32_lm_head=True)
    vllm = (VllmSettings(kv_cache_mb=64, enforce_eager=True, max_model_len=256,
                         inflight_updates="pause") if args.engine == "vllm" else None)
    engine_cfg = EngineConfig(backend=args.engine, max_batch=8, seed=0, threads=1, vllm=vllm)
    specs = [EngineSpec(build_generator_engine, {"model_path": str(path), "model_cfg": gen_cfg,
                                                 "engine_cfg": engine_cfg, "env": {}},
                        threads=1) for _ in range(k)]
    extra = {}
    if "dtype" in inspect.signature(Pipeline).parameters:
        extra["dtype"] = "bfloat16"
    weights = trainer.state_dict()
    push, e2e, gen = [], [], []
    with Pipeline(specs, weights, version=0, max_lag=0, max_concurrent=8, **extra) as pipe:
        def one(v: int) -> None:  # one request per generator (groups go round-robin)
            pipe.submit(v, [Request(f"p{v}_{i}", (1, 2, 3), max_new_tokens=1)
                            for i in range(k)])
            got = pipe.collect(v, k)
            assert all(set(c.versions) == {pipe.version} for c in got)

        one(0)  # warm-up
        for _ in range(args.steps):  # the round trip alone (no new weights)
            t0 = time.perf_counter()
            one(pipe.version)  # a batch of the loaded version: admitted at once
            gen.append(time.perf_counter() - t0)
        for v in range(1, args.steps + 2):
            t0 = time.perf_counter()
            pipe.push_weights(weights, v)
            t1 = time.perf_counter()
            one(v)
            t2 = time.perf_counter()
            if v > 1:  # the first push also pages in the slot
                push.append(t1 - t0)
                e2e.append(t2 - t0)
        pushed = getattr(pipe, "bytes_pushed", None)
    del trainer
    return {"size": size, "params": n_params, "k": k, "push_s": statistics.median(push),
            "e2e_s": statistics.median(e2e), "gen_s": statistics.median(gen),
            "bytes_per_push": pushed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny-m,50m,150m")
    parser.add_argument("--k", default="1,2", help="generator counts")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_push_"))
    print(f"engine {args.engine}, torch {torch.__version__}, {args.steps} steps, medians")
    print("| size | params | K | push_s | e2e_s | gen_s | bytes/push |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        path = work / size if (work / size / "config.json").is_file() else build(size, work)
        for k in (int(x) for x in args.k.split(",")):
            r = run(size, path, k, args)
            pushed = f"{r['bytes_per_push']:,}" if r["bytes_per_push"] else "n/a"
            print(f"| {size} | {r['params'] / 1e6:.1f}M | {k} | {r['push_s']:.3f} | "
                  f"{r['e2e_s']:.3f} | {r['gen_s']:.3f} | {pushed} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
