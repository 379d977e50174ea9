"""`scalerl plan --config RUN_OR_SWEEP.yaml --gpu-mem 80GB`: will the run(s) fit the devices?

CONFIG is a run.yaml (a RunConfig, as `scalerl train` reads it) or a sweep config (it has
`sweep:` and `models:`, like config/gpu.yaml; every run of the sweep is planned); several
--config files merge in order (a layout over a sweep: `--config config/gpu.yaml --config
config/layout-1node-8gpu.yaml`). For each run the plan prints the tokens per step, the
trainer ranks and which device does what on each node, one row per stage and device (need per
device, capacity, verdict) and the memory terms; every problem goes to stderr as one line
naming the knob to change. Exit code 0 when every run fits, 2 otherwise.

The architecture comes from `--model` (a model directory, tiny size or hub id), else the
run's `base` directory when it exists, else its `model` label (tiny sizes and the built-in
Qwen3 table); for a sweep from each `models.NAME.config.model`. Sizes take B, KB, MB, GB, TB
(or KiB ... TiB): all binary (2^30 bytes per GB; a GPU sold as "80GB" holds about 79.2 GiB).

Deliberately left out: writing files (the plan is printed) and measuring the device.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scalerl.config import ConfigError, deep_merge, load_mapping
from scalerl.models.config import DTYPES

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes of a size such as 80GB, 79.2GiB, 81920MB or 85899345920 (units are binary)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"--gpu-mem {text!r}: expected a size such as 80GB, 79.2GiB or "
                          "81920MB")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, action="append",
                        help="run.yaml or sweep config (YAML/JSON); repeat it to apply a layout "
                        "over a sweep config, later files winning, as snakemake merges "
                        "--configfile (e.g. --config config/gpu.yaml --config "
                        "config/layout-1node-8gpu.yaml)")
    parser.add_argument("--gpu-mem", default=None,
                        help="memory of one device, e.g. 80GB (default: CUDA device 0's)")
    parser.add_argument("--devices", type=int, default=None,
                        help="devices of the train job per node (default: sweep "
                        "resources.train.gpu; run.yaml: the CUDA devices here, else 1)")
    parser.add_argument("--model", default=None,
                        help="run.yaml: model directory, tiny size or hub id of the "
                        "architecture (default: the run's base directory or model label)")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="run.yaml: the model dtype when no base_info.json records it "
                        "(default float32, the ModelConfig default)")
    parser.add_argument("--prompt-tokens", type=int, default=None,
                        help="longest prompt in tokens (default 1024; an assumption)")
    parser.add_argument("--run", default=None, help="sweep: plan only this run id")
    parser.add_argument("--brief", action="store_true", help="only the per-device rows")


def _device_memory(args: argparse.Namespace) -> tuple[int, int | None]:
    """(bytes of one device, CUDA device count or None)."""
    if args.gpu_mem is not None:
        return parse_size(args.gpu_mem), None
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("no CUDA device here: give the device memory with --gpu-mem, "
                          "e.g. --gpu-mem 80GB")
    return torch.cuda.get_device_properties(0).total_memory, torch.cuda.device_count()


def _run_yaml_inputs(run: Mapping[str, Any], args, memory: int, cuda_devices: int | None):
    from scalerl.plan.adapters import DEFAULT_PROMPT_TOKENS, model_dtype_of, plan_inputs_from_run
    from scalerl.plan.arch import resolve_arch

    base = run.get("base")
    source = args.model or (base if base and Path(base).is_dir() else run.get("model", "tiny-m"))
    dtype = args.dtype or (model_dtype_of(source) if Path(str(source)).is_dir() else None)
    inputs = plan_inputs_from_run(
        run, resolve_arch(source), device_memory_bytes=memory,
        devices=args.devices or cuda_devices or 1, model_dtype=dtype or "float32",
        prompt_tokens=args.prompt_tokens or DEFAULT_PROMPT_TOKENS)
    return [(str(run.get("run", "run")), inputs)]


def _sweep_inputs(cfg: Mapping[str, Any], args, memory: int):
    from scalerl.plan.adapters import (
        DEFAULT_PROMPT_TOKENS,
        arch_of_model_config,
        plan_inputs_from_sweep,
        sweep_runs,
    )

    sweep = sweep_runs(cfg)
    runs = [r for r in sweep.runs if args.run is None or r["run"] == args.run]
    if not runs:
        raise ConfigError(f"--run {args.run!r} is not a run of this sweep; runs: "
                          f"{', '.join(r['run'] for r in sweep.runs)}")
    used = {r["model"] for r in runs}
    models = {label: (arch_of_model_config(spec, label), spec.get("dtype", "float32"))
              for label, spec in sweep.models.items() if label in used}
    return plan_inputs_from_sweep(runs, models, device_memory_bytes=memory,
                                  devices=args.devices or sweep.train_devices,
                                  nodes=sweep.train_nodes,
                                  prompt_tokens=args.prompt_tokens or DEFAULT_PROMPT_TOKENS)


def run(args: argparse.Namespace) -> int:
    from scalerl.plan.adapters import is_sweep_config
    from scalerl.plan.check import check_fits

    cfg: dict = {}
    for path in args.config:
        deep_merge(cfg, load_mapping(path))
    memory, cuda_devices = _device_memory(args)
    if is_sweep_config(cfg):
        planned = _sweep_inputs(cfg, args, memory)
    else:
        if args.run is not None:
            raise ConfigError("--run selects a run of a sweep config; this is a run.yaml")
        planned = _run_yaml_inputs(cfg, args, memory, cuda_devices)
    failed = 0
    for title, inputs in planned:
        report = check_fits(inputs, title)
        print(report.format(detail=not args.brief) + "\n")
        for problem in report.problems:
            print(f"scalerl plan: {title}: error: {problem}", file=sys.stderr)
        failed += not report.fits
    print(f"{len(planned) - failed} of {len(planned)} run(s) fit")
    return 2 if failed else 0
