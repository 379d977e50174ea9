"""Runs of the shipped sweep configs made runnable on this CPU machine (tests/parallel).

`derive_run(config, ...)` reads config/gpu.yaml or config/config.yaml and changes only what a
2-core machine without a GPU, vLLM or network forces, as edits of the sweep mapping *before*
`scalerl.sweep` sees it, so the real merge order, gen_len budgets, length section and numerics
make the run:

- the model: its `models.<name>.config.model.name` points at a local model directory (a
  Qwen3-architecture one built by `scalerl.models.local_qwen3` for gpu.yaml, keeping its
  declared dtype bfloat16, FP32 head and chat format; a cached micro Llama for config.yaml in
  place of minutes of tiny-s SFT), and only the first model stays in the sweep;
- the data: a prompts.parquet of 1-digit additions (no Polaris/DeepCoder download);
- lengths and batch: CPU-sized gen_len / answer budget and B x G;
- engine hf (no vLLM here) and device cpu, one thread per process;
- the token budgets of the numerics scaled to the CPU lengths so they still split
  (micro-batches, head chunks), and chunk length / save interval of the test.

Everything else is the shipped file's: the recipe preset and its overrides, numerics dtypes and
switches, the length rules, tracking, rollouts. Returns the run's `RunConfig` (as the workflow
writes run.yaml) and the model entry's BaseConfig mapping for `scalerl base`.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
GPU_YAML = REPO / "config" / "gpu.yaml"
CONFIG_YAML = REPO / "config" / "config.yaml"


def derive_run(config: Path, *, model_dir: Path, base: Path, prompts: Path, gen_len: int,
               answer_budget: int, batch: str, steps: int, save_every: int = 0,
               train: dict[str, Any] | None = None, numerics: dict[str, Any] | None = None,
               ) -> tuple[Any, dict[str, Any]]:
    """(RunConfig of the sweep's first run, its model's BaseConfig mapping); module docstring."""
    from scalerl.sweep.config import load_sweep
    from scalerl.sweep.runs import check_runs, expand, run_config

    data = copy.deepcopy(yaml.safe_load(config.read_text()))
    first = data["sweep"]["models"][0]
    entry = data["models"][first]
    entry["config"]["model"]["name"] = str(model_dir)
    data["models"] = {first: entry}
    data["sweep"].update(models=[first], gen_lens=[gen_len], batches=[batch])
    data.setdefault("length", {})["answer_budget"] = answer_budget
    tr = data.setdefault("train", {})
    tr.update(chunks=1, steps_per_chunk=steps, save_every=save_every, engine="hf",
              device="cpu", threads=1, **(train or {}))
    if numerics:
        tr.setdefault("numerics", {}).update(numerics)
    sweep = load_sweep(data)
    runs = expand(sweep)
    check_runs(sweep, runs)
    run = next(iter(runs.values()))
    cfg = run_config(sweep, run, base=str(base), prompts=str(prompts))
    return cfg, dict(sweep.models[first].config)


def scalerl(*args: str, timeout: int = 1200, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m scalerl ARGS` with this checkout's package and one thread per process."""
    env = {**(os.environ if env is None else env), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-m", "scalerl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    if check:
        assert proc.returncode == 0, f"scalerl {args[0]} failed:\n{proc.stderr[-6000:]}"
    return proc


def train_command(run_yaml: Path, out: Path, *sets: str) -> list[str]:
    """`scalerl train` of chunk 1 as the workflow runs it, the model's base.yaml beside
    run.yaml as --model-config (argv after `python -m scalerl`)."""
    cmd = ["train", "--config", str(run_yaml), "--chunk", "1", "--out", str(out),
           "--model-config", str(run_yaml.with_name("base.yaml"))]
    for item in sets:
        cmd += ["--set", item]
    return cmd


def write_run(cfg: Any, path: Path) -> Path:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return path
