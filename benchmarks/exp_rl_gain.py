"""Experiment: does RL with the ScaleRL preset raise the validation pass rate of a tiny model?

The FEASIBILITY.md task (addition of 1–4 digit numbers with a digit-by-digit scratchpad) on
tiny-m (1.06M parameters), end to end through the real commands:

1. prompts: `generate_math(families=add, difficulties 1–4)`, unique prompts, 200 of them (spread
   over the difficulties) held out as val, the rest (~4,000) train;
2. base: tiny-m warm-started by teacher forcing on the worked solutions (AdamW 1e-3, batch 64)
   until a sampled pass rate on 64 val prompts reaches `--base-target` (checked every 50
   steps); `scalerl base` would do the same with its band search;
3. RL: `scalerl train` chunk by chunk with the `scalerl` preset (PipelineRL-8, CISPO, prompt
   aggregation, batch advantages, zero-variance filter, NPR, FP32 head, interruptions),
   16 prompts × 8 samples, 48-token budget (thinking 33–39, answer 8, interruption
   `</think>`), AdamW lr 1e-4 (eps 1e-8), one thread per process;
4. evaluation: `scalerl eval` of the base and of every chunk's checkpoint on the 200 val
   prompts × 4 samples (mean@4).

Prints the pass rate per checkpoint with its step and compute. Run:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exp_rl_gain.py --out results/exp_rl_gain

Deliberately left out: seeds sweeps and curve fits (the workflow does those).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml


def build_prompts(out: Path, n_train: int, n_val: int) -> Path:
    import pandas as pd

    from scalerl.tasks.synthetic import generate_math

    examples = generate_math(n_train + n_val + 200, seed=11, families=("add",))
    unique = list({ex.prompt_id: ex for ex in examples}.values())  # 1-digit sums repeat
    val_every = len(unique) // n_val  # val spread over all difficulties
    rows = [{**ex.to_row(), "split": "val" if i % val_every == 0 and i // val_every < n_val
             else "train"} for i, ex in enumerate(unique)]
    path = out / "prompts.parquet"
    pd.DataFrame(rows)[["prompt_id", "task", "source", "split", "prompt", "answer", "tests",
                        "difficulty"]].to_parquet(path)
    return path


def warm_start(out: Path, target: float, max_steps: int, threads: int) -> Path:
    """tiny-m + teacher forcing on worked solutions until the sampled pass rate >= target."""
    import torch

    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import build_tiny_model, new_tiny_tokenizer, save_model_dir
    from scalerl.rewards import score_many
    from scalerl.rollout.base import Request
    from scalerl.rollout.config import EngineConfig
    from scalerl.rollout.hf_engine import HFEngine
    from scalerl.tasks.synthetic import generate_math

    base = out / "base"
    if (base / "model.safetensors").is_file():
        return base
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    tok = new_tiny_tokenizer()
    model = build_tiny_model(ModelConfig(name="tiny-m", seed=0))
    train = generate_math(20000, seed=7919, families=("add",))
    val = generate_math(64, seed=7920, families=("add",))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    t0 = time.time()
    for step in range(1, max_steps + 1):
        batch = [train[(step * 64 + i) % len(train)] for i in range(64)]
        pairs = [([1] + tok.encode(e.prompt, add_special_tokens=False),
                  tok.encode(e.solution, add_special_tokens=False) + [2]) for e in batch]
        width = max(len(p) + len(t) for p, t in pairs)
        ids = torch.zeros(64, width, dtype=torch.long)  # [B, L]
        mask = torch.zeros(64, width, dtype=torch.long)  # [B, L]
        labels = torch.full((64, width), -100)  # [B, L]
        for i, (p, t) in enumerate(pairs):
            ids[i, :len(p) + len(t)] = torch.tensor(p + t)
            mask[i, :len(p) + len(t)] = 1
            labels[i, len(p):len(p) + len(t)] = torch.tensor(t)
        model.train()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            model.eval()
            engine = HFEngine(model, tok, EngineConfig(max_batch=64, seed=step))
            reqs = [Request(e.prompt_id, tuple([1] + tok.encode(e.prompt,
                                                                add_special_tokens=False)),
                            max_new_tokens=64) for e in val]
            comps = engine.generate(reqs)
            rate = sum(s.correct for s in score_many([e.to_row() for e in val],
                                                     [c.text for c in comps])) / len(val)
            print(f"sft step {step}: loss {loss.item():.3f} pass {rate:.3f} "
                  f"({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
            if rate >= target:
                break
    save_model_dir(model.eval(), tok, base)
    return base


def scalerl(*args: str) -> None:
    cmd = [sys.executable, "-m", "scalerl", *args]
    print("$ scalerl " + " ".join(args), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/exp_rl_gain")
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--steps-per-chunk", type=int, default=50)
    parser.add_argument("--preset", default="scalerl")
    parser.add_argument("--base-target", type=float, default=0.3)
    parser.add_argument("--max-sft-steps", type=int, default=1500)
    parser.add_argument("--eval-prompts", type=int, default=200)
    args = parser.parse_args()
    from scalerl.rl.recipe import recipe_from_preset

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = build_prompts(out, 4000, 200)
    base = warm_start(out, args.base_target, args.max_sft_steps, threads=2)
    run_cfg = {
        "run": f"tiny-m_L48_{args.preset}_b16x8_s0", "seed": 0, "model": "tiny-m",
        "recipe_name": args.preset,
        "recipe": recipe_from_preset(args.preset, {
            "prompts_per_step": 16, "generations_per_prompt": 8,
            "think_budget": [33, 39], "answer_budget": 8, "interruption_text": "</think>",
            "length_penalty": {"max_len": 48, "cache_len": 7},
            "optimizer": {"lr": 1e-4, "warmup_steps": 0, "eps": 1e-8}}).to_dict(),
        "steps_per_chunk": args.steps_per_chunk, "save_every": 10, "threads": 1,
        "task_weights": {"math": 1.0, "code": 0.0},
        "eval": {"samples_per_prompt": 4, "max_prompts": args.eval_prompts},
    }
    config = out / "run.yaml"
    config.write_text(yaml.safe_dump(run_cfg))
    results = []
    checkpoints = [base] + [out / f"chunk{k}" for k in range(1, args.chunks + 1)]
    for k, ckpt in enumerate(checkpoints):
        if k > 0 and not (ckpt / "steps.parquet").is_file():
            t0 = time.time()
            scalerl("train", "--config", str(config), "--chunk", str(k), "--init",
                    str(checkpoints[k - 1]), "--prompts", str(prompts), "--out", str(ckpt))
            print(f"chunk {k}: {time.time() - t0:.0f}s", file=sys.stderr)
        evaluation = out / f"eval_chunk{k}.parquet"
        if not evaluation.is_file():
            scalerl("eval", "--config", str(config), "--checkpoint", str(ckpt), "--chunk", str(k),
                    "--prompts", str(prompts), "--out", str(evaluation))
        import pandas as pd

        frame = pd.read_parquet(evaluation)
        results.append({"checkpoint": ckpt.name, "step": int(frame["step"].iloc[0]),
                        "compute_flops": float(frame["compute_flops"].iloc[0]),
                        "compute_device_hours": float(frame["compute_device_hours"].iloc[0]),
                        "val_pass_rate": float(frame["correct"].mean()),
                        "truncated": float(frame["truncated"].mean())})
        print(json.dumps(results[-1]), flush=True)
    (out / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
