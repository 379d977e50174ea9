"""Benchmark: scalerl's trainer against TRL's GRPOTrainer, like for like on CPU.

Both sides train the same base model on the same math train prompts with the same batch
(B prompts × G samples), token budget, sampling temperature, loss (CISPO, ε_max, token
aggregation: TRL's `loss_type="cispo"` normalises by the batch's tokens, so scalerl runs
with `loss.aggregation: token` here instead of the ScaleRL recipe's prompt aggregation),
batch-level advantage scaling, AdamW (lr, betas, eps, weight decay, grad clip 1.0, constant
LR, no warmup) and reward (scalerl's math verifier, +1 / −1, as TRL's reward function). Set-ups
(`--setups`):

- ``trl``: GRPOTrainer, no vLLM (transformers' `generate`), one process, all threads;
- ``onpolicy-nofilter``: `scalerl train`, on-policy, zero-variance filter off (like for like:
  TRL has no such filter);
- ``onpolicy``: the same with the zero-variance filter on (the ScaleRL recipe);
- ``pipeline``: PipelineRL-k (`--max-lag`), one generator process + the trainer, threads
  split between them, filter on; ``pipeline-nofilter`` with the filter off;
- any scalerl set-up with ``+bucketed`` appended (``onpolicy-nofilter+bucketed``...): the same
  with length-bucketed micro-batches (`micro_batch_tokens: --micro-batch-tokens`: sequences
  sorted by length and cut into micro-batches of at most that many padded tokens, so a short
  sequence is no longer padded to the batch's longest; the loss and gradients are those of the
  whole batch, `scalerl.rl.update`). TRL pads every sequence of the step to the longest.

Every set-up runs in a fresh process per repeat, and the repeats are interleaved (set-up
order rotates each repeat). Reported per set-up (median over repeats): episodes (= samples)
per second by the median step of steps `--skip + 1`..N and by the total of all N steps, the
process wall-clock (start-up and model loading included), mean completion length, the pass
rate of the first and the last 5 steps, and a per-phase breakdown: scalerl's from the time_*
columns of steps.parquet (`scalerl.rl.steps`), TRL's as generation + reward (its
`_generate_and_score_completions`) and the rest of the step (log-probs, loss, backward,
optimizer). Results go to OUT/results.json and a markdown table to stdout.

Not the same on the two sides (no effect on the work done per step): TRL divides by the std
of the raw rewards (`scale_rewards="batch"`), scalerl by the std of the group-centred
advantages; TRL's on-policy importance ratio is 1 by construction (old log-probs = the
trainer's, detached), scalerl's is π_train/π_gen against the generator's log-probs.
No-Positive-Resampling stays on (0.9) on the scalerl side; within one epoch (N·B prompts of
~1,000 math train prompts) it redraws no prompt, so it changes nothing here.

Run it with the interpreter of the TRL environment (TRL is a benchmark-only extra):

    python3.11 -m venv .venv-trl && .venv-trl/bin/pip install torch==2.13.0 && \\
        .venv-trl/bin/pip install -e '.[bench]'
    .venv-trl/bin/python benchmarks/bench_vs_trl.py --steps 20 --repeats 3

Without --base/--prompts it builds the default sweep's data (`scalerl data`, config/config.yaml)
and tiny-m base (`scalerl base`: SFT warm start into the pass-rate band, several minutes) under
OUT/work once and reuses them. Left out: vLLM on either side, GPUs, code prompts (TRL's
reward function would have to run the sandbox the same way; math keeps grading cheap on both
sides), multi-epoch (num_iterations > 1) TRL updates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPS = ("trl", "onpolicy-nofilter", "onpolicy", "pipeline", "pipeline-nofilter")
BUCKETED = "+bucketed"  # suffix of a scalerl set-up: length-bucketed micro-batches
PHASES = ("generate", "wait", "grade", "batch", "logprob", "backward", "optimizer", "push")


# -- inputs --------------------------------------------------------------------------------------
def default_inputs(work: Path) -> tuple[Path, Path]:
    """The default sweep's prompts and tiny-m base, built once under `work`."""
    import yaml

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    work.mkdir(parents=True, exist_ok=True)
    prompts, base = work / "prompts.parquet", work / "base"
    if not prompts.exists():
        (work / "data.yaml").write_text(yaml.safe_dump(cfg["data"]["config"]))
        subprocess.run([sys.executable, "-m", "scalerl", "data", "--config",
                        str(work / "data.yaml"), "--out", str(prompts)], check=True)
    if not (base / "config.json").exists():
        (work / "base.yaml").write_text(yaml.safe_dump(cfg["models"]["tiny-m"]["config"]))
        subprocess.run([sys.executable, "-m", "scalerl", "base", "--config",
                        str(work / "base.yaml"), "--out", str(base)], check=True)
    return base, prompts


def run_config(args, setup: str, base: Path, prompts: Path) -> dict:
    """The scalerl RunConfig of a set-up (see the module docstring)."""
    pipeline = setup.startswith("pipeline")
    bucketed = setup.endswith(BUCKETED)
    setup = setup.removesuffix(BUCKETED)
    return {
        "run": f"bench-{setup}", "seed": args.seed, "base": str(base), "prompts": str(prompts),
        "steps_per_chunk": args.steps, "save_every": 0, "task_weights": {"math": 1.0},
        "max_new_tokens": args.max_new_tokens, "temperature": 1.0, "engine": "hf",
        "device": "cpu", "threads": max(1, args.threads // 2) if pipeline else args.threads,
        "generators": 1,
        "numerics": {"micro_batch_tokens": args.micro_batch_tokens if bucketed else 0},
        "recipe": {
            "off_policy": "pipeline" if pipeline else "on-policy", "max_lag": args.max_lag,
            "prompts_per_step": args.prompts_per_step,
            "generations_per_prompt": args.generations, "length_control": "none",
            "zero_variance_filter": not setup.endswith("nofilter"),
            "advantage_normalization": "batch",
            "loss": {"kind": "cispo", "eps_max": args.eps_max, "aggregation": "token"},
            "optimizer": {"lr": args.lr, "warmup_steps": 0, "eps": 1e-8, "weight_decay": 0.01,
                          "betas": [0.9, 0.999], "grad_clip": 1.0},
        },
    }


# -- workers (one fresh process per run) ---------------------------------------------------------
def run_scalerl(args, setup: str, base: Path, prompts: Path, out: Path) -> dict:
    import shutil

    import yaml

    out.mkdir(parents=True, exist_ok=True)
    cfg = out / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(args, setup, base, prompts)))
    shutil.rmtree(out / "chunk1", ignore_errors=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scalerl", "train", "--config", str(cfg), "--chunk",
                    "1", "--out", str(out / "chunk1")], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=open(out / "train.log", "w"))
    wall = time.perf_counter() - t0
    import pandas as pd

    steps = pd.read_parquet(out / "chunk1" / "steps.parquet")
    rollouts = pd.read_parquet(out / "chunk1" / "rollouts.parquet")
    step_s = (steps["compute_device_hours"].diff().fillna(steps["compute_device_hours"])
              * 3600).tolist()
    return {"step_s": step_s, "process_s": wall,
            "mean_len": float(rollouts["n_tokens"].mean()),
            "pass_rate": steps["pass_rate"].tolist(),
            "kept": ([1.0] * len(steps) if setup.removesuffix(BUCKETED).endswith("nofilter")
                     else (1 - steps["zero_variance_fraction"]).tolist()),
            "phases": {p: steps[f"time_{p}_s"].tolist() for p in PHASES}}


def trl_worker(args) -> None:
    """One TRL GRPOTrainer run in this process; writes its measurements to args.worker_out."""
    import torch

    torch.set_num_threads(args.threads)
    import pandas as pd
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from scalerl.rewards import score_many

    t_start = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.base)
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    table = pd.read_parquet(args.prompts)
    table = table[(table["split"] == "train") & (table["task"] == "math")]
    rows = {r["prompt_id"]: r for r in table.to_dict("records")}
    bos = tok.bos_token or ""
    # scalerl's raw prompt format: bos + text, no other special tokens (checked below)
    data = Dataset.from_list([{"prompt": bos + r["prompt"], "prompt_id": r["prompt_id"]}
                              for r in rows.values()])
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import format_prompt

    first = next(iter(rows.values()))
    assert tok(bos + first["prompt"], add_special_tokens=False)["input_ids"] == format_prompt(
        tok, first["prompt"], ModelConfig(prompt_format="raw")), "prompt tokens differ"

    reward_s: list[float] = []

    def math_reward(prompts, completions, prompt_id, **_):
        t0 = time.perf_counter()
        scores = score_many([rows[p] for p in prompt_id], list(completions),
                            workers=args.threads)
        reward_s.append(time.perf_counter() - t0)
        return [1.0 if s.correct else -1.0 for s in scores]

    batch = args.prompts_per_step * args.generations
    config = GRPOConfig(
        output_dir=str(Path(args.worker_out).parent / "trl_out"), use_cpu=True, bf16=False,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=args.generations, max_completion_length=args.max_new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, max_steps=args.steps, num_iterations=1, beta=0.0,
        loss_type="cispo", epsilon_high=args.eps_max, scale_rewards="batch",
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        max_grad_norm=1.0, logging_steps=1, save_strategy="no", report_to="none",
        disable_tqdm=True, seed=args.seed, dataloader_num_workers=0,
        dataloader_pin_memory=False, log_completions=False)

    marks: list[float] = []
    records: list[dict] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            marks.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            marks.append(time.perf_counter())

        def on_log(self, _args, state, control, logs=None, **k):
            if logs and "reward" in logs:
                records.append(dict(logs))

    trainer = GRPOTrainer(model=model, reward_funcs=math_reward, args=config,
                          train_dataset=data, processing_class=tok, callbacks=[Clock()])
    gen_s: list[float] = []
    inner = trainer._generate_and_score_completions

    def timed(*a, **k):
        t0 = time.perf_counter()
        out = inner(*a, **k)
        gen_s.append(time.perf_counter() - t0)
        return out

    trainer._generate_and_score_completions = timed
    trainer.train()
    step_s = [b - a for a, b in zip(marks, marks[1:])]
    result = {
        "step_s": step_s, "process_s": time.perf_counter() - t_start,
        "mean_len": statistics.mean(x["completions/mean_length"] for x in records),
        "pass_rate": [(x["reward"] + 1) / 2 for x in records],
        "kept": [1.0] * len(step_s),
        "phases": {"generate+reward": gen_s, "grade": reward_s,
                   "train": [s - g for s, g in zip(step_s, gen_s)]},
        "versions": _versions(),
    }
    Path(args.worker_out).write_text(json.dumps(result))


def _versions() -> dict:
    import importlib.metadata as md

    return {p: md.version(p) for p in ("trl", "transformers", "torch", "accelerate")}


def run_trl(args, base: Path, prompts: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    result = out / "trl.json"
    cmd = [sys.executable, __file__, "--worker", "trl", "--worker-out", str(result),
           "--base", str(base), "--prompts", str(prompts)] + _shared_argv(args)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=open(out / "trl.log", "w"),
                   stderr=subprocess.STDOUT)
    data = json.loads(result.read_text())
    data["process_s"] = time.perf_counter() - t0
    return data


def _shared_argv(args) -> list[str]:
    return ["--steps", str(args.steps), "--threads", str(args.threads), "--seed",
            str(args.seed), "--prompts-per-step", str(args.prompts_per_step), "--generations",
            str(args.generations), "--max-new-tokens", str(args.max_new_tokens), "--lr",
            str(args.lr), "--eps-max", str(args.eps_max)]


# -- summary ------------------------------------------------------------------------------------
def summarise(args, runs: dict[str, list[dict]]) -> dict:
    """Per set-up medians over repeats (each repeat: median over steps skip+1..N)."""
    episodes = args.prompts_per_step * args.generations
    med = statistics.median
    out = {}
    for setup, reps in runs.items():
        tail = [r["step_s"][args.skip:] for r in reps]
        row = {
            "eps_median_step": med(episodes / med(t) for t in tail),
            "eps_total": med(episodes * len(r["step_s"]) / sum(r["step_s"]) for r in reps),
            "step_median_s": med(med(t) for t in tail),
            "process_s": med(r["process_s"] for r in reps),
            "mean_len": med(r["mean_len"] for r in reps),
            "pass_first5": med(statistics.mean(r["pass_rate"][:5]) for r in reps),
            "pass_last5": med(statistics.mean(r["pass_rate"][-5:]) for r in reps),
            "kept": med(statistics.mean(r["kept"][args.skip:]) for r in reps),
            "phases": {p: med(med(r["phases"][p][args.skip:]) for r in reps)
                       for p in reps[0]["phases"]},
        }
        out[setup] = row
    return out


def markdown(summary: dict, ref: str = "trl") -> str:
    base = summary.get(ref, {}).get("eps_median_step")
    lines = ["| set-up | episodes/s (median step) | vs TRL | episodes/s (all steps) | "
             "process wall s | mean completion tokens | sequences trained | pass rate "
             "steps 1–5 → last 5 |", "|---|---|---|---|---|---|---|---|"]
    for setup, r in summary.items():
        ratio = f"{r['eps_median_step'] / base:.2f}×" if base else "–"
        lines.append(f"| {setup} | {r['eps_median_step']:.0f} | {ratio} | {r['eps_total']:.0f} "
                     f"| {r['process_s']:.1f} | {r['mean_len']:.1f} | {r['kept']:.0%} | "
                     f"{r['pass_first5']:.3f} → {r['pass_last5']:.3f} |")
    lines += ["", "Median step, seconds by phase:", ""]
    names = sorted({p for r in summary.values() for p in r["phases"]},
                   key=lambda p: (PHASES + ("generate+reward", "train")).index(p)
                   if p in PHASES + ("generate+reward", "train") else 99)
    lines.append("| set-up | step | " + " | ".join(names) + " |")
    lines.append("|---" * (len(names) + 2) + "|")
    for setup, r in summary.items():
        cells = [f"{r['phases'][p]:.3f}" if p in r["phases"] else "" for p in names]
        lines.append(f"| {setup} | {r['step_median_s']:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    t_import = time.perf_counter()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="base model dir (default: built under OUT/work)")
    p.add_argument("--prompts", type=Path, help="prompts.parquet (math train rows are used)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench_vs_trl")
    p.add_argument("--setups", default="trl,onpolicy-nofilter,onpolicy,pipeline")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--skip", type=int, default=2, help="steps left out of the median step")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch threads (pipeline: split)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompts-per-step", type=int, default=16)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=47)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--eps-max", type=float, default=4.0)
    p.add_argument("--max-lag", type=int, default=8)
    p.add_argument("--micro-batch-tokens", type=int, default=512,
                   help="padded-token budget per micro-batch of the +bucketed set-ups")
    p.add_argument("--worker", choices=("trl",), help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "trl":
        trl_worker(args)
        return 0
    setups = args.setups.split(",")
    unknown = sorted({s for s in setups if s.removesuffix(BUCKETED) not in SETUPS
                      or s == "trl" + BUCKETED})
    if unknown:
        p.error(f"unknown set-up(s) {unknown}; choose from {', '.join(SETUPS)} (scalerl ones "
                f"optionally with {BUCKETED})")
    if (args.base is None) != (args.prompts is None):
        p.error("give both --base and --prompts, or neither")
    base, prompts = ((args.base, args.prompts) if args.base
                     else default_inputs(args.out / "work"))
    runs: dict[str, list[dict]] = {s: [] for s in setups}
    for rep in range(args.repeats):
        order = setups[rep % len(setups):] + setups[:rep % len(setups)]  # rotate: interleave
        for setup in order:
            out = args.out / f"{setup}-r{rep}"
            res = (run_trl(args, base, prompts, out) if setup == "trl"
                   else run_scalerl(args, setup, base, prompts, out))
            runs[setup].append(res)
            tail = res["step_s"][args.skip:]
            print(f"repeat {rep} {setup}: median step {statistics.median(tail):.3f} s, "
                  f"total {sum(res['step_s']):.1f} s, process {res['process_s']:.1f} s, "
                  f"mean len {res['mean_len']:.1f}", file=sys.stderr, flush=True)
    summary = summarise(args, runs)
    versions = runs["trl"][0]["versions"] if "trl" in runs else {}
    load = os.getloadavg()
    (args.out / "results.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "versions": versions,
         "loadavg_end": load, "runs": runs, "summary": summary}, indent=1))
    print(f"{args.prompts_per_step}×{args.generations} samples, {args.max_new_tokens}-token "
          f"budget, {args.steps} steps, median of steps {args.skip + 1}–{args.steps} over "
          f"{args.repeats} interleaved repeats, {args.threads} threads; {versions}; load "
          f"average at the end {load[0]:.1f} ({time.perf_counter() - t_import:.0f} s)\n")
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
