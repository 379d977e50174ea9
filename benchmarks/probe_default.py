"""The default study's cheap probe: one run of config/config.yaml, dense evals, a family table.

    .venv/bin/python benchmarks/probe_default.py --model tiny-s --gen-len 80 --out /tmp/probe/p1
        [--config config/config.yaml] [--set KEY=VALUE ...] [--steps "4 4 8 8 16"]
        [--eval-prompts 60] [--eval-samples 4] [--base-only] [--cache /tmp/probe/cache]

What `make run` does for one run, through the same functions, in one process: the sweep config
is loaded and expanded by `scalerl.sweep` (with `--set` overrides of the YAML applied first,
dotted keys with list indices: `--set data.config.sources.0.n=3000`), the prompt set is built
by `scalerl.data.build.build_prompts`, the base model by `scalerl.basemodel.cli.build_tiny_base`
(both cached under `--cache` by a hash of their config and the source files that make them),
the run's RunConfig by `scalerl.sweep.run_config`; then every chunk is trained by
`scalerl.rl.trainer.train_chunk` and evaluated by `scalerl.eval.runner.run_eval`, and the
evals are fitted by `scalerl fit` with the sweep's own options. What differs from `make run`
is only what makes it cheap: `--steps` (a denser chunk schedule than the config's, so the
curve's rise is seen), `--eval-prompts` (fewer prompts per task: the first ones of each task in
file order, so with several sources of a task use 0, all of them). A rerun into the same
`--out` keeps the checkpoints it finds and only re-evaluates them.

Prints the per-family pass rates of every checkpoint (benchmarks/family_pass_rates.py), the
fits, and the seconds each stage took. The output directory has the sweep's layout
(OUT/data/prompts.parquet, OUT/runs/RUN/eval/chunkK.parquet, OUT/runs/RUN/fit), so
`benchmarks/family_pass_rates.py OUT` reads it too.

Deliberately left out: several runs at once (run two probes side by side, one per core).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

# Source files whose content decides a prompt set / a base model (part of the cache keys).
DATA_SOURCES = ("scalerl/tasks/synthetic.py", "scalerl/data/build.py")
BASE_SOURCES = (*DATA_SOURCES, "scalerl/basemodel/sft.py", "scalerl/basemodel/cli.py",
                "scalerl/models/config.py", "scalerl/models/loading.py")


def apply_set(data: dict, item: str) -> None:
    """`a.b.0.c=VALUE` (VALUE parsed as YAML) into the nested mapping/list `data`."""
    key, _, text = item.partition("=")
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    value = yaml.safe_load(text)
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def digest(obj, sources) -> str:
    h = hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode())
    for rel in sources:
        h.update((ROOT / rel).read_bytes())
    return h.hexdigest()[:12]


def build_data(data_config: dict, cache: Path) -> Path:
    from scalerl.data.build import build_prompts
    from scalerl.data.config import DataConfig
    from scalerl.data.io import write_prompts

    path = cache / f"data-{digest(data_config, DATA_SOURCES)}" / "prompts.parquet"
    if not path.exists():
        cfg = DataConfig.from_dict(data_config)
        frame, _ = build_prompts(cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_prompts(frame, path, {})
    return path


def build_base(model_config: dict, cache: Path) -> Path:
    from scalerl.basemodel.cli import BaseConfig, build_tiny_base

    out = cache / f"base-{model_config['model']['name']}-{digest(model_config, BASE_SOURCES)}"
    if not out.exists():
        build_tiny_base(BaseConfig.from_dict(model_config), out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--model", required=True)
    parser.add_argument("--gen-len", type=int, required=True)
    parser.add_argument("--steps", default="", help="chunk lengths, e.g. '4 4 8 8 16' "
                        "(default: the config's train.steps_per_chunk)")
    parser.add_argument("--eval-prompts", type=int, default=None,
                        help="val prompts per task, the first ones in file order (0: all; "
                        "default: the config's eval.max_prompts)")
    parser.add_argument("--eval-samples", type=int, default=0,
                        help="samples per prompt (default: the config's)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/probe/cache"))
    parser.add_argument("--base", type=Path, default=None,
                        help="use this base model directory instead of building one")
    parser.add_argument("--base-only", action="store_true",
                        help="build the base model, evaluate it (chunk 0) and stop")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from scalerl.eval.runner import run_eval
    from scalerl.models.config import ModelConfig
    from scalerl.rl.trainer import train_chunk
    from scalerl.sweep import load_sweep
    from scalerl.sweep.options import fit_options
    from scalerl.sweep.runs import expand, run_config

    raw = yaml.safe_load(Path(args.config).read_text())
    for item in args.set:
        apply_set(raw, item)
    sweep = load_sweep(raw)
    runs = [r for r in expand(sweep).values()
            if r.model == args.model and r.gen_len == args.gen_len]
    if not runs:
        raise SystemExit(f"no run of {args.config} has model {args.model} and gen_len "
                         f"{args.gen_len}")
    run = runs[0]
    times: dict[str, float] = {}
    t0 = time.time()
    prompts = build_data(sweep.data_config, args.cache)
    times["data"] = time.time() - t0
    t0 = time.time()
    base = args.base or build_base(sweep.models[run.model].config, args.cache)
    times["base"] = time.time() - t0
    info = json.loads((base / "base_info.json").read_text())
    print(f"base {run.model}: {info['steps']} SFT steps, pass rate {info['pass_rate']:.3f} "
          f"{ {k: round(v, 3) for k, v in info['pass_rate_by_task'].items()} }, "
          f"{info['seconds']:.0f}s (cached or built)", flush=True)

    cfg = run_config(sweep, run, base=str(base), prompts=str(prompts))
    steps = [int(s) for s in args.steps.split()] if args.steps else \
        list(cfg.chunk_steps or [cfg.steps_per_chunk] * sweep.chunks)
    changes: dict = {"chunk_steps": steps}
    ev = {}
    if args.eval_prompts is not None:
        ev["max_prompts"] = args.eval_prompts
    if args.eval_samples:
        ev["samples_per_prompt"] = args.eval_samples
    if ev:
        changes["eval"] = ev
    cfg = cfg.replace(**changes)
    model_cfg = ModelConfig.from_dict(sweep.models[run.model].config.get("model", {}))
    work = args.out
    run_dir = work / "runs" / run.id
    (run_dir / "eval").mkdir(parents=True, exist_ok=True)
    (work / "data").mkdir(parents=True, exist_ok=True)
    link = work / "data" / "prompts.parquet"
    if not link.exists():
        link.symlink_to(prompts)
    (work / "run.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))

    def evaluate(ckpt: Path, chunk: int) -> None:
        t = time.time()
        rates = run_eval(cfg, ckpt, chunk, prompts, run_dir / "eval" / f"chunk{chunk}.parquet",
                         model_cfg=model_cfg)
        times["eval"] = times.get("eval", 0.0) + time.time() - t
        print(f"chunk {chunk}: {', '.join(f'{k} {v:.3f}' for k, v in rates.items())} "
              f"({time.time() - t:.0f}s eval)", flush=True)

    evaluate(base, 0)
    prev = base
    if not args.base_only:
        for k in range(1, len(steps) + 1):
            t = time.time()
            out = run_dir / f"chunk{k}"
            if not out.exists():
                train_chunk(cfg, chunk=k, init=prev, prompts=prompts, out=out,
                            model_cfg=model_cfg)
            times["train"] = times.get("train", 0.0) + time.time() - t
            evaluate(out, k)
            prev = out
        t = time.time()
        evals = [str(run_dir / "eval" / f"chunk{k}.parquet") for k in range(len(steps) + 1)]
        fit = subprocess.run(
            [sys.executable, "-m", "scalerl", "fit", *evals, *fit_options(sweep, run),
             "--out", str(run_dir / "fit")], capture_output=True, text=True)
        times["fit"] = time.time() - t
        lines = [ln for ln in fit.stderr.splitlines() if "] [" in ln or "warning" in ln]
        print("\n".join(lines) or fit.stderr[-2000:])

    from family_pass_rates import family_table

    for name, frame in family_table(work, None).items():
        print(f"\n{name}\n{frame.round(2).to_string()}")
    print("\nseconds: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
