"""The one-device check of the GPU study (run by benchmarks/gpu_check.sh): prints figures and
writes OUT/gpu_check.json.

    python benchmarks/gpu_check.py --out results/gpu_check [--hidden 1024 --layers 12 ...]

The parts, in the order they run (`--parts` selects; the model is built before the first
part that needs it):

1. head: the trainer's FP32 LM head at V = 151,936 (Qwen3's vocabulary), hidden `--head-hidden`
   (2048: Qwen3-1.7B), `--head-tokens` positions in chunks of 2048, with fp32 x fp32 operands
   and with bf16 operands (fp32 accumulation, `StepNumerics.lm_head_operands`): the GEMM each
   takes on this device (`scalerl.models.logprobs.head_gemm`: `mm_out_dtype` =
   torch.mm(bf16, bf16, out_dtype=float32) on tensor cores), |log p - float64 reference| (mean,
   max) and, on CUDA, forward + backward milliseconds, TFLOP/s (4 GEMMs of 2 V H per position)
   and the bf16 operands' speed-up.
2. plan_memory: the planner's per-rank trainer peak (`scalerl.plan.memory.trainer_terms`,
   without its process margin, with the head GEMM this device takes) against
   `torch.cuda.max_memory_allocated` over one optimizer step of one `--plan-tokens`-token
   sequence (8,192) with the GPU numerics; CUDA only.
3. chunk: `scalerl train` (the CLI, preflight included) for `--train-steps` steps of the
   ScaleRL preset (PipelineRL), engine `--engine`, generators in bfloat16 and the trainer in
   float32 master weights (new weights cast on transfer); steps.parquet's train/gen tokens/s,
   MFU and per-step generator–trainer mismatch (mismatch_kl).
4. throughput: timed `optimizer_step`s on a fixed batch of `--batch` sequences of `--seq`
   tokens with the GPU numerics (fp32 params, bf16 compute on CUDA, `--chunk` head chunk,
   gradient checkpointing): trained tokens/s and the trainer's MFU = 6·N·tokens/s / peak,
   N = `scalerl.rl.compute.count_flop_params` (attention FLOPs left out, so MFU is a lower
   bound); CUDA only (CPU: tokens/s printed, MFU skipped with a message).
5. device: the rates the planner's time estimate is calibrated with (`scalerl plan
   --calibration OUT/gpu_check.json`): device-to-device copy bandwidth (2 GiB), bf16 and fp32
   GEMM rates (8192^3); CUDA only.
6. mismatch: the generator's log-probabilities of its own samples (generator weights in
   bfloat16, as vLLM serves them) against the trainer's (float32 master weights, body under
   bfloat16 autocast, `scalerl.rl.update.step_precision`), with the FP32 LM head on and off
   on both sides: mean and max |log π_train − log π_gen| over sampled tokens and the mean and
   std of ρ = π_train/π_gen. The HF engine always; vLLM wherever the `vllm` module imports.

The model: a Qwen3-architecture model built locally (`scalerl.models.local_qwen3`, own BPE
tokenizer with the chat/thinking tokens, warm-started on 1-digit additions), no download;
prompts.parquet of synthetic math beside it.

Every part that does not run prints one line `gpu_check: PART skipped: WHY` (needs CUDA, a
Python module the machine lacks, or `--time-budget-s` spent) and is listed under "skipped" in
gpu_check.json; a part that raises prints `gpu_check: PART failed: ...` with its traceback and
the others still run (exit status 1). gpu_check.json is rewritten after every part.
`--head-operands` runs the mismatch part with the trainer's head operands too (fp32 head on:
float32 and bfloat16). Deliberately left out: a pass/fail verdict (these are measurements) and
any model download.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from scalerl.utils.io import write_json_atomic

REPO = Path(__file__).resolve().parents[1]
# Dense bf16 peak FLOP/s by device-name substring (vendor datasheets, SXM parts).
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0,
                    "A10": 125.0, "V100": 125.0}


def peak_flops(override_tflops: float | None) -> float | None:
    """The device's dense bf16 peak FLOP/s (None on CPU or for an unknown device)."""
    if override_tflops:
        return override_tflops * 1e12
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def build(out: Path, args) -> tuple[Path, Path]:
    import pandas as pd

    from scalerl.models.local_qwen3 import LocalQwen3, build_local_qwen3
    from scalerl.tasks.synthetic import generate_math

    model_dir, prompts = out / "model", out / "prompts.parquet"
    drawn = generate_math(100, 3, difficulties=(1,), families=("add",))
    examples = list({ex.prompt_id: ex for ex in drawn}.values())
    if not (model_dir / "config.json").is_file():
        shape = LocalQwen3(hidden=args.hidden, layers=args.layers, heads=args.heads,
                           kv_heads=args.kv_heads, head_dim=args.head_dim,
                           intermediate=args.intermediate, max_positions=8192)
        build_local_qwen3(model_dir, [], shape, sft_examples=examples[:-10], sft_steps=120,
                          sft_lr=args.sft_lr, sft_device=args.device)
    rows = [{**ex.to_row(), "split": "train" if i < len(examples) - 10 else "val"}
            for i, ex in enumerate(examples)]
    pd.DataFrame(rows)[["prompt_id", "task", "source", "split", "prompt", "answer", "tests",
                        "difficulty"]].to_parquet(prompts)
    return model_dir, prompts


def _requests(model_dir: Path, n_prompts: int, samples: int):
    import pandas as pd

    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import format_prompt, load_tokenizer
    from scalerl.rollout.base import Request

    tok = load_tokenizer(model_dir)
    cfg = ModelConfig(name=str(model_dir), prompt_format="chat")
    frame = pd.read_parquet(model_dir.parent / "prompts.parquet").head(n_prompts)
    return tok, [Request(str(pid), tuple(format_prompt(tok, text, cfg)), sample_idx=s,
                         max_new_tokens=48)
                 for pid, text in zip(frame["prompt_id"], frame["prompt"]) for s in range(samples)]


def mismatch(model_dir: Path, engine: str, fp32_head: bool, device: str,
             operands: tuple[str, ...] = ("auto",)) -> list[dict]:
    """|log π_train − log π_gen| of the generator's own samples (module docstring, part 2),
    one row per trainer head-operand setting."""
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import load_model
    from scalerl.models.logprobs import sequence_logprobs
    from scalerl.rl.update import StepNumerics, step_precision
    from scalerl.rollout.config import EngineConfig
    from scalerl.rollout.factory import make_engine

    tok, requests = _requests(model_dir, 8, 4)
    gen_cfg = ModelConfig(name=str(model_dir), dtype="bfloat16", fp32_lm_head=fp32_head,
                          prompt_format="chat")
    gen = make_engine(model_dir, gen_cfg, EngineConfig(backend=engine, max_batch=32, seed=0,
                                                       device=device))
    try:
        done = gen.generate(requests)
    finally:
        gen.close()
    del gen
    trainer = load_model(model_dir, gen_cfg.replace(dtype="float32"), device)
    rows = []
    for operand in operands:
        numerics = StepNumerics(compute_dtype="bfloat16", lm_head_operands=operand)
        resolved = numerics.head_operands(torch.device(device))
        deltas = []
        for c in done:
            ids = torch.tensor([list(c.request.prompt_ids) + c.token_ids],
                               device=device)  # [1, T]
            with torch.no_grad(), step_precision(trainer, numerics):
                logp = sequence_logprobs(trainer, ids, fp32_lm_head=fp32_head,
                                         head_operands=resolved)[0]  # [T]
            start = len(c.request.prompt_ids)
            train_lp = logp[start:].float().cpu()  # [n]
            keep = torch.tensor(c.loss_mask)  # [n] inserted tokens carry no generator log-prob
            deltas.append((train_lp - torch.tensor(c.logprobs))[keep])
        delta = torch.cat(deltas).double()  # [tokens]
        ratio = delta.exp()
        rows.append({"engine": engine, "fp32_lm_head": fp32_head,
                     "head_operands": resolved if fp32_head else "compute dtype",
                     "tokens": int(delta.numel()), "mean_abs_delta": float(delta.abs().mean()),
                     "max_abs_delta": float(delta.abs().max()),
                     "ratio_mean": float(ratio.mean()), "ratio_std": float(ratio.std())})
        if not fp32_head:
            break  # the operands matter only for the FP32 head
    return rows


class _Head(torch.nn.Module):
    """A bare LM head [V, H] (what `head_token_logprobs` reads from a model)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.lm_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        self.lm_head.weight = torch.nn.Parameter(weight)

    def get_output_embeddings(self):
        return self.lm_head


def head(args) -> dict:
    """The FP32 head at Qwen3's vocabulary: numerics against float64 and, on CUDA, time per
    forward + backward (module docstring, part 6)."""
    from scalerl.models.logprobs import head_gemm, head_token_logprobs

    device, vocab, hidden, n = args.device, 151_936, args.head_hidden, args.head_tokens
    gen = torch.Generator().manual_seed(0)
    weight = (0.02 * torch.randn(vocab, hidden, generator=gen)).to(device)  # [V, H] masters
    states = torch.randn(n, hidden, generator=gen).to(device)  # [N, H] unit-RMS hidden states
    targets = torch.randint(0, vocab, (n,), generator=gen).to(device)  # [N]
    ref = torch.cat([torch.log_softmax(states[i:i + 256].double() @ weight.double().t(), -1)
                     .gather(-1, targets[i:i + 256, None]).squeeze(-1)
                     for i in range(0, n, 256)])  # [N] float64 reference
    out: dict = {"vocab": vocab, "hidden": hidden, "tokens": n, "rows": []}
    for operands in ("float32", "bfloat16"):
        model = _Head(weight.clone().requires_grad_())
        gemm = head_gemm(torch.device(device).type, operands)  # what the trainer runs here
        h = states.clone().requires_grad_()

        def run(model=model, h=h, operands=operands) -> torch.Tensor:
            logp, _ = head_token_logprobs(model, h, targets, chunk_tokens=2048,
                                          head_operands=operands)  # [N]
            logp.sum().backward()
            return logp

        logp = run()
        delta = (logp.detach().double() - ref).abs()
        row = {"operands": operands, "gemm": gemm, "mean_abs_delta_fp64": float(delta.mean()),
               "max_abs_delta_fp64": float(delta.max())}
        if device == "cuda":
            times = []
            for _ in range(3):
                torch.cuda.synchronize()
                start = time.perf_counter()
                run()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            best = min(times)
            row |= {"ms": 1e3 * best, "tflops": 4 * 2 * vocab * hidden * n / best / 1e12}
        out["rows"].append(row)
    fp32, bf16 = out["rows"]
    if "ms" in fp32:
        out["bf16_speedup"] = fp32["ms"] / bf16["ms"]
    return out


def device_rates() -> dict:
    """Measured copy bandwidth and GEMM rates of CUDA device 0 (module docstring, part 5)."""
    def best(fn, reps: int = 5) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return min(times)

    buffers = [torch.empty(2 << 30, dtype=torch.uint8, device="cuda") for _ in range(2)]
    copy_s = best(lambda: buffers[1].copy_(buffers[0]))
    buffers.clear()  # free the 4 GiB before the GEMMs
    rates = {"copy_bytes_per_s": 2 * (2 << 30) / copy_s}  # read + write
    for dtype, key in ((torch.bfloat16, "bf16_flops"), (torch.float32, "fp32_flops")):
        a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        rates[key] = 2 * 8192**3 / best(lambda a=a: a @ a)
    return rates


def _one_rank_policy(model, device: str):
    """(the trainer's one-rank policy on `device`, its World): `shard_policy` as the trainer
    calls it."""
    from scalerl.parallel.shard import shard_policy
    from scalerl.parallel.world import World

    world = World(device=torch.device(device))
    return shard_policy(model, world), world


def _step(policy, optimizer, scheduler, batch, recipe, step: int, numerics, world) -> None:
    """`optimizer_step` as the trainer calls it, with the whole batch's loss denominators."""
    from scalerl.rl.losses import LossNormalizer
    from scalerl.rl.update import optimizer_step

    optimizer_step(policy, optimizer, scheduler, batch, recipe, temperature=1.0,
                   micro_groups=0, step=step, numerics=numerics, world=world,
                   normalizer=LossNormalizer.from_batch(batch.loss_mask, batch.group_ids))


def plan_memory(model_dir: Path, args) -> dict:
    """The planner's trainer peak against the allocator's, one sequence of `--plan-tokens`
    (module docstring, part 7)."""
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import load_model
    from scalerl.models.logprobs import head_gemm
    from scalerl.plan.arch import resolve_arch
    from scalerl.plan.memory import PlanInputs, trainer_terms
    from scalerl.rl.batch import TrainBatch
    from scalerl.rl.recipe import recipe_from_preset
    from scalerl.rl.update import StepNumerics, make_optimizer

    t = args.plan_tokens
    model = load_model(model_dir, ModelConfig(name=str(model_dir)), "cuda")
    recipe = recipe_from_preset("scalerl", {"optimizer": {"warmup_steps": 0}})
    policy, world = _one_rank_policy(model, "cuda")
    optimizer, scheduler = make_optimizer(policy, recipe)
    numerics = StepNumerics(param_dtype="float32", compute_dtype="bfloat16",
                            logprob_chunk_tokens=args.chunk, micro_batch_tokens=t,
                            gradient_checkpointing=True)
    ids = torch.randint(10, model.config.vocab_size, (1, t),
                        generator=torch.Generator().manual_seed(0))  # [1, T]
    loss_mask = torch.zeros(1, t, dtype=torch.bool)  # [1, T]
    loss_mask[:, 16:] = True
    gen_lp = torch.where(loss_mask, torch.full((1, t), -6.0), 0.0)  # [1, T]
    batch = TrainBatch(ids, torch.ones_like(ids), loss_mask, gen_lp, torch.ones(1),
                       torch.zeros(1, dtype=torch.long))

    def step(k: int) -> None:
        _step(policy, optimizer, scheduler, batch, recipe, k, numerics, world)

    step(0)  # AdamW state exists from here on, as in every later step
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step(1)
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated()
    operands = numerics.head_operands(torch.device("cuda"))
    inputs = PlanInputs(arch=resolve_arch(model_dir), prompts_per_step=1,
                        generations_per_prompt=1, prompt_tokens=16, generation_tokens=t - 16,
                        param_dtype="float32", compute_dtype="bfloat16",
                        gradient_checkpointing=True, logprob_chunk_tokens=args.chunk,
                        micro_batch_tokens=t, padded_rows=False, lm_head_operands=operands,
                        lm_head_gemm=head_gemm("cuda", operands))  # the path taken here
    planned = sum(term.bytes for term in trainer_terms(inputs)) - inputs.process_overhead_bytes
    return {"tokens": t, "measured_bytes": measured, "planned_bytes": planned,
            "planned_over_measured": planned / measured, "head_gemm": inputs.head_gemm}


def throughput(model_dir: Path, args, peak: float | None) -> dict:
    """Trained tokens/s (and MFU on CUDA) of `optimizer_step` on a fixed batch (part 3)."""
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import load_model
    from scalerl.rl.batch import TrainBatch
    from scalerl.rl.compute import count_flop_params
    from scalerl.rl.recipe import recipe_from_preset
    from scalerl.rl.update import StepNumerics, make_optimizer

    device = args.device
    model = load_model(model_dir, ModelConfig(name=str(model_dir)), device)
    recipe = recipe_from_preset("scalerl", {"optimizer": {"warmup_steps": 0}})
    policy, world = _one_rank_policy(model, device)
    optimizer, scheduler = make_optimizer(policy, recipe)
    numerics = StepNumerics(param_dtype="float32", compute_dtype="auto",
                            logprob_chunk_tokens=args.chunk, micro_batch_tokens=args.budget,
                            gradient_checkpointing=True)
    gen = torch.Generator().manual_seed(0)
    b, t = args.batch, args.seq
    ids = torch.randint(10, model.config.vocab_size, (b, t), generator=gen)  # [B, T]
    loss_mask = torch.zeros(b, t, dtype=torch.bool)  # [B, T]
    loss_mask[:, 16:] = True
    gen_lp = torch.where(loss_mask, torch.full((b, t), -6.0), 0.0)  # [B, T]
    adv = torch.linspace(-1, 1, b)  # [B]
    batch = TrainBatch(ids, torch.ones_like(ids), loss_mask, gen_lp, adv, torch.arange(b) // 4)

    def one(step: int) -> None:
        _step(policy, optimizer, scheduler, batch, recipe, step, numerics, world)

    one(0)  # warm-up: allocator, kernels, AdamW state
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for s in range(args.timed_steps):
        one(s + 1)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.timed_steps
    n_flop = count_flop_params(model)
    tps = b * t / seconds
    out = {"batch": b, "seq": t, "flop_params": n_flop, "seconds_per_step": seconds,
           "tokens_per_s": tps, "compute_dtype": str(numerics.torch_compute_dtype(
               next(model.parameters()).device))}
    if device.startswith("cuda"):
        out["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    out["mfu"] = 6 * n_flop * tps / peak if peak else None
    return out


def chunk(model_dir: Path, prompts: Path, out: Path, args, peak: float | None,
          timeout_s: float | None = None) -> dict:
    """`scalerl train` for a few steps (part 4), killed after `timeout_s`; figures from
    steps.parquet."""
    import yaml

    from scalerl.rl.compute import count_flop_params
    from scalerl.rl.steps import read_steps

    run_yaml = out / "run.yaml"
    run_yaml.write_text(yaml.safe_dump({
        "run": f"gpu-check_{args.engine}", "seed": 0, "model": "qwen3-local",
        "recipe": {
            "prompts_per_step": 8, "generations_per_prompt": 8, "think_budget": [24, 32],
            "answer_budget": 16, "interruption_text": "</think>", "max_lag": 2,
            "optimizer": {"lr": 1e-5, "warmup_steps": 1}},
        "steps_per_chunk": args.train_steps, "save_every": 0, "engine": args.engine,
        "device": "auto", "task_weights": {"math": 1.0, "code": 0.0},
        "numerics": {"param_dtype": "float32", "compute_dtype": "auto",
                     "logprob_chunk_tokens": args.chunk, "micro_batch_tokens": args.budget,
                     "gradient_checkpointing": True}}))
    model_yaml = out / "model.yaml"  # generators in bf16 (as vLLM serves Qwen3), trainer fp32
    model_yaml.write_text(yaml.safe_dump({"model": {"name": str(model_dir), "dtype": "bfloat16",
                                                    "prompt_format": "chat"}}))
    ckpt = out / "chunk1"
    if ckpt.exists():
        import shutil

        shutil.rmtree(ckpt)
    cmd = [sys.executable, "-m", "scalerl", "train", "--config", str(run_yaml), "--chunk", "1",
           "--init", str(model_dir), "--prompts", str(prompts), "--out", str(ckpt),
           "--model-config", str(model_yaml)]
    if not torch.cuda.is_available():
        cmd += ["--gpu-mem", "80GB"]  # plan check for an 80 GB device even here
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired as err:
        sys.stderr.write(err.stderr.decode() if isinstance(err.stderr, bytes) else
                         err.stderr or "")
        return {"returncode": 124, "timed_out_s": timeout_s}
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        return {"returncode": proc.returncode}
    steps = read_steps(ckpt / "steps.parquet")
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import load_model

    n_flop = count_flop_params(load_model(model_dir, ModelConfig(name=str(model_dir))))
    train_tps = float(steps["train_tokens_per_s"].iloc[-1])
    return {"returncode": 0, "steps": len(steps),
            "pass_rate": [float(x) for x in steps["pass_rate"]],
            "mismatch_kl": [float(x) for x in steps["mismatch_kl"]],
            "train_tokens_per_s": train_tps,
            "gen_tokens_per_s": float(steps["gen_tokens_per_s"].iloc[-1]),
            "padding_fraction": float(steps["padding_fraction"].iloc[-1]),
            "mfu": 6 * n_flop * train_tps / peak if peak and math.isfinite(train_tps) else None}


# Python modules each part needs beyond torch (the prepared machine may lack some); the model
# (part 1) is built for every part but the head's.
NEEDS = {"model": ("pandas", "pyarrow", "tokenizers", "safetensors", "transformers"),
         "chunk": ("yaml", "math_verify")}
PARTS = ("head", "plan_memory", "chunk", "throughput", "device", "mismatch")  # run order


def _missing(modules) -> list[str]:
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]


def _versions() -> str:
    import importlib.metadata as md

    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "absent"

    cuda = torch.version.cuda or "none"
    return (f"torch {torch.__version__} (CUDA {cuda}), transformers {version('transformers')}, "
            f"vllm {version('vllm')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="working directory (model, figures)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=1)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--sft-lr", type=float, default=3e-3)
    p.add_argument("--batch", type=int, default=4, help="throughput: sequences per step")
    p.add_argument("--seq", type=int, default=256, help="throughput: tokens per sequence")
    p.add_argument("--chunk", type=int, default=2048, help="logprob_chunk_tokens")
    p.add_argument("--budget", type=int, default=32768, help="micro_batch_tokens")
    p.add_argument("--timed-steps", type=int, default=3)
    p.add_argument("--train-steps", type=int, default=2)
    p.add_argument("--engine", choices=("hf", "vllm"), default="hf", help="chunk's engine")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="device's dense bf16 peak (default: from the device name)")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--head-operands", action="store_true",
                   help="mismatch: also the trainer's head operands (float32, bfloat16)")
    p.add_argument("--head-hidden", type=int, default=2048, help="head: hidden size H")
    p.add_argument("--head-tokens", type=int, default=2048, help="head: positions")
    p.add_argument("--plan-tokens", type=int, default=8192, help="plan_memory: tokens")
    p.add_argument("--time-budget-s", type=float, default=0.0,
                   help="skip the parts that would start after this many seconds (0: none)")
    args = p.parse_args(argv)
    start = time.monotonic()
    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.parts.split(","))
    peak = peak_flops(args.peak_tflops)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"gpu_check: device {name}, peak bf16 "
          f"{f'{peak / 1e12:.0f} TFLOP/s' if peak else 'unknown'}; {_versions()}", flush=True)
    result: dict = {"device": name, "peak_flops": peak, "skipped": {}, "failed": {}}
    built: list = []  # (model_dir, prompts) once built

    def skip(part: str, why: str) -> None:
        result["skipped"][part] = why
        print(f"gpu_check: {part} skipped: {why}", flush=True)

    def model() -> tuple[Path, Path]:
        if not built:
            built.append(build(out, args))
        return built[0]

    def run_part(part: str) -> None:
        if part == "head":
            hd = result["head"] = head(args)
            for r in hd["rows"]:
                timing = (f", {r['ms']:.1f} ms forward + backward, {r['tflops']:.0f} TFLOP/s"
                          if "ms" in r else ", time skipped (no CUDA)")
                print(f"head V {hd['vocab']:,} H {hd['hidden']} x {hd['tokens']} tokens, "
                      f"operands {r['operands']:<8} GEMM {r['gemm']:<12}: |log p - fp64| mean "
                      f"{r['mean_abs_delta_fp64']:.2e} max {r['max_abs_delta_fp64']:.2e}"
                      f"{timing}", flush=True)
            if "bf16_speedup" in hd:
                print(f"head: bf16 operands {hd['bf16_speedup']:.1f}x faster than fp32 x fp32",
                      flush=True)
        elif part == "plan_memory":
            pm = result["plan_memory"] = plan_memory(model()[0], args)
            print(f"plan_memory: {pm['tokens']:,} tokens, head GEMM {pm['head_gemm']}, planned "
                  f"{pm['planned_bytes'] / 2**30:.2f} GiB, max_memory_allocated "
                  f"{pm['measured_bytes'] / 2**30:.2f} GiB, ratio "
                  f"{pm['planned_over_measured']:.3f}", flush=True)
        elif part == "chunk":
            left = args.time_budget_s - (time.monotonic() - start) if args.time_budget_s else None
            model_dir, prompts = model()
            c = result["chunk"] = chunk(model_dir, prompts, out, args, peak, left)
            if c.get("timed_out_s"):
                raise RuntimeError(f"scalerl train ran past the time budget ({left:.0f} s)")
            if c["returncode"]:
                raise RuntimeError(f"scalerl train failed (exit {c['returncode']})")
            mfu = f"{100 * c['mfu']:.2f} %" if c["mfu"] is not None else "skipped (no CUDA)"
            print(f"chunk: {c['steps']} steps, {args.engine} engine, train "
                  f"{c['train_tokens_per_s']:.0f} tok/s, gen {c['gen_tokens_per_s']:.0f} tok/s, "
                  f"padding {c['padding_fraction']:.2f}, MFU {mfu}", flush=True)
        elif part == "throughput":
            t = result["throughput"] = throughput(model()[0], args, peak)
            mfu = f"{100 * t['mfu']:.1f} %" if t["mfu"] is not None else \
                "skipped: needs a CUDA device with a known peak (--peak-tflops)"
            print(f"throughput: {t['batch']}x{t['seq']} tokens, {t['compute_dtype']} compute, "
                  f"{t['tokens_per_s']:.0f} tok/s, N {t['flop_params'] / 1e6:.1f}M, MFU {mfu}",
                  flush=True)
        elif part == "device":
            r = result["device_rates"] = device_rates()
            print(f"device: copy {r['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 GEMM "
                  f"{r['bf16_flops'] / 1e12:.0f} TFLOP/s, fp32 GEMM {r['fp32_flops'] / 1e12:.1f} "
                  "TFLOP/s", flush=True)
        elif part == "mismatch":
            engines = ["hf"]
            if _missing(["vllm"]):
                print("gpu_check: mismatch with vLLM skipped: needs the vllm module", flush=True)
            else:
                engines.append("vllm")
            operands = ("float32", "bfloat16") if args.head_operands else ("auto",)
            model_dir = model()[0]
            result["mismatch"] = [row for e in engines for fp32 in (True, False)
                                  for row in mismatch(model_dir, e, fp32, args.device, operands)]
            for m in result["mismatch"]:
                print(f"mismatch {m['engine']:<4} fp32 head {str(m['fp32_lm_head']):<5} trainer "
                      f"head operands {m['head_operands']:<13} tokens {m['tokens']:>5} mean|d| "
                      f"{m['mean_abs_delta']:.2e} max|d| {m['max_abs_delta']:.2e} rho "
                      f"{m['ratio_mean']:.4f} +- {m['ratio_std']:.4f}", flush=True)

    for part in PARTS:
        if part not in wanted:
            continue
        elapsed = time.monotonic() - start
        missing = _missing(NEEDS.get(part, ()) + (NEEDS["model"] if part != "head" else ()))
        if part in ("plan_memory", "device") and args.device != "cuda":
            skip(part, "needs CUDA" + (" (torch.cuda.max_memory_allocated)"
                                      if part == "plan_memory" else ""))
        elif missing:
            skip(part, f"needs the Python module(s) {', '.join(missing)}")
        elif args.time_budget_s and elapsed > args.time_budget_s:
            skip(part, f"the time budget ({args.time_budget_s:.0f} s) is spent "
                 f"({elapsed:.0f} s so far)")
        else:
            try:
                run_part(part)
            except Exception as err:  # one part's failure: report it, run the others
                import traceback

                traceback.print_exc()
                result["failed"][part] = repr(err)
                print(f"gpu_check: {part} failed: {err}", flush=True)
        write_json_atomic(out / "gpu_check.json", result)  # what is measured so far
    print(f"gpu_check: done in {time.monotonic() - start:.0f} s"
          f"{'; failed: ' + ', '.join(result['failed']) if result['failed'] else ''}", flush=True)
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
