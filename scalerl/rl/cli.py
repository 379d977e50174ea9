"""`scalerl train`: run one training chunk of one run.

    scalerl train --config run.yaml --chunk K --init PREV_DIR --prompts prompts.parquet \\
        --out results/runs/RUN/chunk{K}

--init is the base model directory for chunk 0 and chunk K−1's output for K > 0 (default: the
run config's `base` for chunk 0); --prompts defaults to the run config's `prompts`. OUT
receives the checkpoint (HF model + tokenizer + trainer_state.pt/json) and steps.parquet.
Intra-chunk saves go to OUT.partial; rerunning a killed chunk resumes from there.

With `trainer_ranks: N > 1` in the run config the command re-executes itself under
`torchrun --standalone --nproc-per-node N` (FSDP2 trainer ranks, `scalerl.dist`), unless it
already is a rank of an outside torchrun/srun (RANK and WORLD_SIZE set), whose world size then
wins. Under the relaunch a failing rank makes torchrun exit with 1 (its own code is logged).

Exit codes: 0 done, 2 bad input (config, paths), 3 training cannot go on: it diverged
(non-finite loss or gradient; the message names the step) or No-Positive-Resampling retired
every training prompt.
"""

from __future__ import annotations

import argparse
from typing import Any

from scalerl.config import key_value

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("--config", required=True, help="the run's RunConfig (YAML/JSON)")
    parser.add_argument("--chunk", type=int, required=True, help="chunk index K (0-based)")
    parser.add_argument("--init", default=None,
                        help="base model dir (K = 0) or chunk K-1's output dir (K > 0); "
                             "default: the config's `base` for K = 0")
    parser.add_argument("--prompts", default=None,
                        help="prompts.parquet (train split used); default: the config's `prompts`")
    parser.add_argument("--out", required=True, help="output checkpoint directory of chunk K")
    parser.add_argument("--model-config", default=None,
                        help="the model's MODEL.yaml of `scalerl base` (dtype, prompt format); "
                             "default: the base directory's base_info.json, else defaults")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a RunConfig field, dotted for nested ones, value parsed "
                             "as YAML (e.g. --set steps_per_chunk=5 --set "
                             "recipe.overrides.optimizer.lr=1e-4); repeatable")


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """['a.b=1', 'c=x'] -> {'a': {'b': 1}, 'c': 'x'} (values parsed as YAML)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, value = key_value(item, "--set")
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(value)
    return out


def _argv(args: argparse.Namespace) -> list[str]:
    """The `scalerl train ...` arguments of `args` (for the torchrun relaunch)."""
    argv = ["train", "--config", args.config, "--chunk", str(args.chunk), "--out", args.out]
    for flag, value in (("--init", args.init), ("--prompts", args.prompts),
                        ("--model-config", args.model_config)):
        if value is not None:
            argv += [flag, value]
    for item in args.set:
        argv += ["--set", item]
    return argv


def run(args: argparse.Namespace) -> int:
    import sys

    from scalerl.dist.env import launch_command, launched_rank
    from scalerl.models.loading import load_model_config
    from scalerl.rl.curriculum import AllPromptsRetired
    from scalerl.rl.run_config import load_run_config
    from scalerl.rl.trainer import NonFiniteError, train_chunk

    cfg = load_run_config(args.config, parse_overrides(args.set))
    if args.chunk < 0:
        raise ValueError(f"--chunk {args.chunk}: must be >= 0")
    init = args.init or (cfg.base if args.chunk == 0 else None)
    if init is None:
        raise ValueError("--init is required (the base model for chunk 0 when the config has no "
                         "`base`, else the previous chunk's output directory)")
    prompts = args.prompts or cfg.prompts
    if prompts is None:
        raise ValueError("--prompts is required (the config has no `prompts`)")
    if cfg.trainer_ranks > 1 and not launched_rank():
        import subprocess

        return subprocess.call(launch_command(cfg.trainer_ranks, _argv(args)))
    try:
        model_cfg = load_model_config(args.model_config, init) if args.model_config else None
        train_chunk(cfg, chunk=args.chunk, init=init, prompts=prompts, out=args.out,
                    model_cfg=model_cfg)
    except NonFiniteError as err:
        print(f"scalerl train: training diverged: {err}", file=sys.stderr)
        return 3
    except AllPromptsRetired as err:
        print(f"scalerl train: no training prompts left: {err}", file=sys.stderr)
        return 3
    return 0
