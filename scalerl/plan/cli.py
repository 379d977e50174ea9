"""`scalerl plan --config RUN_OR_SWEEP.yaml --gpu H100-80GB`: will the run(s) fit the devices,
and how long and how many GPU-hours will they take?

CONFIG is a run.yaml (a RunConfig, as `scalerl train` reads it) or a sweep config (it has
`sweep:` and `models:`, like config/gpu.yaml; every run of the sweep is planned); several
--config files merge in order (a layout over a sweep: `--config config/gpu.yaml --config
config/layout-1node-8gpu.yaml`). For each run the plan prints the tokens per step, the
trainer ranks and which device does what on each node, one row per stage and device (need per
device, capacity, verdict) and the memory terms; every problem goes to stderr as one line
naming the knob to change. Exit code 0 when every run fits, 2 otherwise.

With `--gpu NAME` (a device of `scalerl.plan.timing.DEVICES`: H100-80GB, H200-141GB,
A100-80GB, B200-180GB, L40S-48GB; its memory unless --gpu-mem says otherwise) each run also
gets a time estimate: generation, trainer and weight-push seconds per step, the bottleneck,
and the run's GPU-hours (training: the sweep's chunks x steps; evaluation: one pass over the
held-out prompts per checkpoint, the base model included); a sweep ends with its total. `--mfu` states the trainer's MFU,
`--calibration` reads benchmarks/gpu_check.sh's gpu_check.json measured on that device,
`--usd-per-gpu-hour` turns GPU-hours into money.

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
    parser.add_argument("--gpu", default=None,
                        help="device of the time estimate (H100-80GB, H200-141GB, A100-80GB, "
                        "B200-180GB, L40S-48GB); also its memory unless --gpu-mem is given")
    parser.add_argument("--mfu", type=float, default=None,
                        help="trainer MFU of the time estimate (default 0.11, or the "
                        "calibration's)")
    parser.add_argument("--calibration", default=None,
                        help="gpu_check.json of benchmarks/gpu_check.sh on that device: "
                        "measured efficiencies for the time estimate")
    parser.add_argument("--usd-per-gpu-hour", type=float, default=None,
                        help="price of one GPU-hour, to print the cost")


def _device_memory(args: argparse.Namespace) -> tuple[int, int | None]:
    """(bytes of one device, CUDA device count or None)."""
    if args.gpu_mem is not None:
        return parse_size(args.gpu_mem), None
    if args.gpu is not None:
        from scalerl.plan.timing import resolve_device

        return resolve_device(args.gpu).memory_bytes, None
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
    from scalerl.rl.run_config import RunConfig

    steps = RunConfig.from_dict(dict(run)).steps_in_chunk(1)  # one chunk: what train runs
    return [(str(run.get("run", "run")), inputs, {"steps": steps})]


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
    planned = plan_inputs_from_sweep(runs, models, device_memory_bytes=memory,
                                     devices=args.devices or sweep.train_devices,
                                     nodes=sweep.train_nodes,
                                     prompt_tokens=args.prompt_tokens or DEFAULT_PROMPT_TOKENS)
    from scalerl.rl.run_config import RunConfig

    out = []
    for (title, inputs), run in zip(planned, runs):
        cfg_run = RunConfig.from_dict(run)
        steps = sum(cfg_run.steps_in_chunk(k) for k in range(1, sweep.chunks + 1))
        evaluated = cfg_run.eval.max_prompts or sweep.val_prompts
        out.append((title, inputs, {"steps": steps, "eval_prompts": evaluated,
                                    "eval_samples": cfg_run.eval.samples_per_prompt,
                                    "evals": sweep.chunks + 1}))  # + the base (chunk 0)
    return out


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
    failed, estimates = 0, {}
    device, efficiency = _time_device(args)
    for title, inputs, extent in planned:
        report = check_fits(inputs, title)
        text = report.format(detail=not args.brief)
        if device is not None and report.fits:
            from scalerl.plan.timing import estimate_time

            estimates[title] = estimate_time(inputs, device, efficiency=efficiency, **extent)
            text += "\n" + estimates[title].format(args.usd_per_gpu_hour)
        print(text + "\n")
        for problem in report.problems:
            print(f"scalerl plan: {title}: error: {problem}", file=sys.stderr)
        failed += not report.fits
    print(f"{len(planned) - failed} of {len(planned)} run(s) fit")
    if estimates:
        from scalerl.plan.timing import sweep_summary

        print(sweep_summary(estimates, args.usd_per_gpu_hour))
    return 2 if failed else 0


def _time_device(args: argparse.Namespace):
    """(device, efficiency) of the time estimate, or (None, None) without --gpu."""
    if args.gpu is None:
        for flag in ("mfu", "calibration", "usd_per_gpu_hour"):
            if getattr(args, flag) is not None:
                raise ConfigError(f"--{flag.replace('_', '-')} belongs to the time estimate: "
                                  "give the device with --gpu (e.g. --gpu H100-80GB)")
        return None, None
    import dataclasses

    from scalerl.plan.timing import Efficiency, load_calibration, resolve_device

    device = resolve_device(args.gpu)
    efficiency = (load_calibration(args.calibration, device) if args.calibration
                  else Efficiency())
    if args.mfu is not None:
        if not 0 < args.mfu <= 1:
            raise ConfigError(f"--mfu {args.mfu}: a share of the peak in (0, 1]")
        efficiency = dataclasses.replace(efficiency, mfu=args.mfu,
                                         source=f"{efficiency.source}, MFU given")
    return device, efficiency
