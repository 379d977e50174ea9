"""Benchmark: PipelineRL-k versus on-policy RL, optimizer steps per second on this machine.

Runs the same chunk (same base model, prompts, batch, budget, seed) with the real trainer
(`scalerl train` in a fresh process per run) in three set-ups and reads the per-step
wall-clock from steps.parquet (device-hours × 3600; CPU counts one device):

- pipeline-k: one generator process + the trainer, 1 torch thread each (k = --max-lag, 8);
- on-policy: generation and training alternate in one process using all cores;
- on-policy-1t: the same with 1 thread (what each pipeline process gets);
- pipeline-k-fixedD (one per `--fixed-lags` D): pipeline-k on the fixed schedule
  (`RunConfig.pipeline_fixed_lag` = D: batch s generated whole by version s − D, reproducible).

`--setups` runs only the named set-ups (e.g. `pipeline-8 pipeline-8-fixed1`).

Steps/s is measured over steps 2..N (step 1 includes filling the pipeline); with --repeats
the set-ups run interleaved and the median is reported. Staleness statistics of the pipeline
run come from the same steps.parquet. Measure on an otherwise idle machine: with other
processes on the cores, a 2-thread OpenMP process loses most of its time to spinning threads.

Workload: by default math only (1 thread grades an integer answer in microseconds); with
`--run-config results/runs/<run>/run.yaml` a run of the default sweep (math + code mix, its
budgets and batch), where grading code in the sandbox is a large share of each step. In
pipeline mode the generator process grades (`scalerl.rl.grading`), in the on-policy modes the
trainer does, with as many sandboxes at a time as it has threads.

Base model: `--base DIR --prompts FILE` (e.g. the outputs of benchmarks/exp_rl_gain.py:
tiny-m warm-started on 1–4 digit additions). Without them a freshly initialised tiny-m is
used with the zero-variance filter off (its rewards are all −1, so the filter would skip every
update and there would be no training work to overlap).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_pipeline.py --steps 20 \\
        --base results/exp_rl_gain/base --prompts results/exp_rl_gain/prompts.parquet
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_pipeline.py --steps 16 --repeats 2 \\
        --base results/models/tiny-m/base --prompts results/data/prompts.parquet \\
        --run-config results/runs/tiny-m_L80_scalerl_b16x8_s0/run.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def fresh_base(out: Path) -> tuple[Path, Path]:
    import pandas as pd

    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import build_tiny_model, new_tiny_tokenizer, save_model_dir
    from scalerl.tasks.synthetic import generate_math

    save_model_dir(build_tiny_model(ModelConfig(name="tiny-m", seed=0)), new_tiny_tokenizer(),
                   out / "base")
    rows = [{**ex.to_row(), "split": "train"} for ex in generate_math(2000, 11, families=("add",))]
    pd.DataFrame(rows)[["prompt_id", "task", "source", "split", "prompt", "answer", "tests",
                        "difficulty"]].to_parquet(out / "prompts.parquet")
    return out / "base", out / "prompts.parquet"


def run(name: str, base: Path, prompts: Path, work: Path, steps: int, overrides: dict,
        threads: int, task_weights: dict, run_fields: dict | None = None) -> dict:
    """One chunk of `steps` steps in a fresh `scalerl train` process; stats from steps.parquet."""
    import yaml

    from scalerl.rl.steps import read_steps

    config = work / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "run": f"bench-{name}", "seed": 0, "steps_per_chunk": steps, "save_every": 0,
        "threads": threads, "task_weights": task_weights,
        "recipe": overrides, **(run_fields or {}),
    }))
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, "-m", "scalerl", "train", "--config", str(config), "--chunk",
                    "1", "--init", str(base), "--prompts", str(prompts), "--out", str(out)],
                   check=True, env=env, stderr=subprocess.DEVNULL)
    frame = read_steps(out / "steps.parquet")
    seconds = frame["compute_device_hours"].diff().iloc[1:] * 3600.0  # per-step wall-clock
    return {
        "setup": name,
        "steps_per_s": len(seconds) / float(seconds.sum()),
        "s_per_step_median": float(seconds.median()),
        "staleness_mean": float(frame["staleness_mean"].mean()),
        "staleness_max": int(frame["staleness_max"].max()),
        "staleness_hist": {int(k): int(v) for k, v in
                           frame["staleness_max"].value_counts().sort_index().items()},
        "pass_rate_mean": float(frame["pass_rate"].mean()),
        "gen_tokens_per_s": float(frame["gen_tokens_per_s"].median()),
        "train_tokens_per_s": float(frame["train_tokens_per_s"].median()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--max-lag", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--base", type=Path, default=None)
    parser.add_argument("--prompts", type=Path, default=None)
    parser.add_argument("--run-config", type=Path, default=None,
                        help="take recipe overrides and task weights from this run.yaml (e.g. "
                             "a run of the default sweep; its prompts_per_step/generations "
                             "win over the flags)")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats (median)")
    parser.add_argument("--fixed-lags", type=int, nargs="*", default=[],
                        help="also pipeline-k on the fixed schedule with these lags D")
    parser.add_argument("--setups", nargs="*", default=None,
                        help="run only these set-ups (names as printed)")
    parser.add_argument("--work", type=Path, default=None, help="output dir (default: a tmpdir)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    work.mkdir(parents=True, exist_ok=True)
    common = {
        "prompts_per_step": args.prompts_per_step, "generations_per_prompt": args.generations,
        "think_budget": [33, 39], "answer_budget": 8, "interruption_text": "</think>",
        "optimizer": {"lr": 1e-4, "warmup_steps": 0, "eps": 1e-8},
    }
    task_weights = {"math": 1.0, "code": 0.0}
    run_fields: dict = {}  # RunConfig fields of every set-up (the run.yaml's temperature)
    if args.run_config is not None:
        import yaml

        run_cfg = yaml.safe_load(args.run_config.read_text())
        common = {**run_cfg["recipe"]}  # the run's whole recipe, its length budgets included
        task_weights = run_cfg["task_weights"]
        run_fields = {k: run_cfg[k] for k in ("temperature",) if run_cfg.get(k) is not None}
    if args.base is None:
        base, prompts = fresh_base(work)
        common["zero_variance_filter"] = False
    else:
        base, prompts = args.base, args.prompts
    cores = len(os.sched_getaffinity(0))
    pipe_name = f"pipeline-{args.max_lag}"
    pipeline = {**common, "off_policy": "pipeline", "max_lag": args.max_lag}
    setups = [
        (pipe_name, pipeline, 1, run_fields),
        ("on-policy", {**common, "off_policy": "on-policy"}, cores, run_fields),
        ("on-policy-1t", {**common, "off_policy": "on-policy"}, 1, run_fields),
        *((f"{pipe_name}-fixed{d}", pipeline, 1, {**run_fields, "pipeline_fixed_lag": d})
          for d in args.fixed_lags),
    ]
    if args.setups is not None:
        unknown = sorted(set(args.setups) - {s[0] for s in setups})
        if unknown:
            parser.error(f"unknown set-ups {unknown}; choose from {[s[0] for s in setups]}")
        setups = [s for s in setups if s[0] in args.setups]
    results: dict[str, list[dict]] = {name: [] for name, *_ in setups}
    for rep in range(args.repeats):  # interleaved, so background load hits every set-up alike
        for name, overrides, threads, run_fields in setups:
            results[name].append(run(name, base, prompts, work, args.steps, overrides, threads,
                                     task_weights, run_fields))
            print(json.dumps({"repeat": rep, **results[name][-1]}), flush=True)
    rate = {name: statistics.median(r["steps_per_s"] for r in rs) for name, rs in results.items()}
    print(f"median steps/s over {args.repeats} repeat(s): " +
          ", ".join(f"{k} {v:.3f}" for k, v in rate.items()))
    for name in rate:
        for ref in ("on-policy", "on-policy-1t", pipe_name):
            if ref in rate and name != ref and not name.startswith("on-policy"):
                print(f"{name} / {ref} steps/s ratio: {rate[name] / rate[ref]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
