"""`scalerl train`: run one training chunk of one run.

    scalerl train --config run.yaml --chunk K --init PREV_DIR --prompts prompts.parquet \\
        --out results/runs/RUN/chunk{K}

Chunks are numbered as the workflow and every output number them (docs/design.md, "The DAG"):
chunk 0 is the base model (evaluated, never trained), training chunk K >= 1 writes the
checkpoint `chunk{K}`, and its steps.parquet, rollouts.parquet and the eval Parquet of that
checkpoint all carry chunk = K. --init is the base model directory for chunk 1 and chunk
K−1's output for K > 1 (default: the run config's `base` for chunk 1); --prompts defaults to
the run config's `prompts`. OUT receives the checkpoint (HF model + tokenizer +
trainer_state.pt/json) and steps.parquet.
Intra-chunk saves go to OUT.partial; rerunning a killed chunk resumes from there.

With `trainer_ranks: N > 1` in the run config the command re-executes itself under
`torchrun --standalone --nproc-per-node N` (FSDP2 trainer ranks of the one trainer,
`scalerl.rl.trainer` with `scalerl.parallel`; across the nodes of a multi-node SLURM job:
srun + torchrun with a c10d rendezvous), unless it already is a rank of an outside
torchrun/srun (RANK and WORLD_SIZE set), whose world size then wins. Under the relaunch a
failing rank makes torchrun exit with 1 (its own code is logged).

Before any work the memory plan is checked (`scalerl.plan.preflight`, as `scalerl plan`) with
the longest train prompt of --prompts in tokens (the 32 longest by characters, formatted as
the trainer does) against the visible CUDA device; a run that cannot fit fails with the
planner's problems, each naming its knob. Without CUDA (or with `device: cpu`) the check is
skipped unless --gpu-mem gives a device size to plan for.

This module is the command of `scalerl train` (above the packages it joins: the trainer, the
planner and the launcher).

Exit codes: 0 done, 2 bad input (config, paths, a plan that does not fit), 3 training cannot
go on: it diverged
(non-finite loss or gradient; the message names the step) or No-Positive-Resampling retired
every training prompt, 4 a PipelineRL generator process died or failed (the message names it;
a rerun of the same command resumes from the last intra-chunk save).
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
    parser.add_argument("--chunk", type=int, required=True, help="training chunk K >= 1 "
                        "(chunk 1 starts from the base model, which is chunk 0)")
    parser.add_argument("--init", default=None,
                        help="base model dir (K = 1) or chunk K-1's output dir (K > 1); "
                             "default: the config's `base` for K = 1")
    parser.add_argument("--prompts", default=None,
                        help="prompts.parquet (train split used); default: the config's `prompts`")
    parser.add_argument("--out", required=True, help="output checkpoint directory of chunk K")
    parser.add_argument("--model-config", default=None,
                        help="the model's MODEL.yaml of `scalerl base` (dtype, prompt format); "
                             "default: the base directory's base_info.json, else defaults")
    parser.add_argument("--gpu-mem", default=None,
                        help="plan for a device of this size (e.g. 80GB) even without CUDA; "
                             "default: the visible CUDA device's memory, no check on CPU")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a RunConfig field, dotted for nested ones, value parsed "
                             "as YAML (e.g. --set steps_per_chunk=5 --set "
                             "recipe.optimizer.lr=1e-4); repeatable")


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

    from scalerl.models.loading import load_model_config
    from scalerl.parallel.world import launch_command, launched_rank
    from scalerl.rl.curriculum import AllPromptsRetired
    from scalerl.rl.pipeline import GeneratorError
    from scalerl.rl.run_config import load_run_config
    from scalerl.rl.trainer import NonFiniteError, train_chunk

    cfg = load_run_config(args.config, parse_overrides(args.set))
    if args.chunk < 1:
        raise ValueError(f"--chunk {args.chunk}: training chunks are numbered from 1 (chunk 1 "
                         "starts from the base model; chunk 0 is the base model itself)")
    init = args.init or (cfg.base if args.chunk == 1 else None)
    if init is None:
        raise ValueError("--init is required (the base model for chunk 1 when the config has no "
                         "`base`, else the previous chunk's output directory)")
    prompts = args.prompts or cfg.prompts
    if prompts is None:
        raise ValueError("--prompts is required (the config has no `prompts`)")
    model_cfg = load_model_config(args.model_config, init) if args.model_config else None
    if not launched_rank():  # checked once, before any rank starts
        check_plan(cfg, init, prompts, model_cfg, args.gpu_mem)
    if cfg.trainer_ranks > 1 and not launched_rank():
        import subprocess

        return subprocess.call(launch_command(cfg.trainer_ranks, _argv(args)))
    try:
        train_chunk(cfg, chunk=args.chunk, init=init, prompts=prompts, out=args.out,
                    model_cfg=model_cfg)
    except NonFiniteError as err:
        print(f"scalerl train: training diverged: {err}", file=sys.stderr)
        return 3
    except AllPromptsRetired as err:
        print(f"scalerl train: no training prompts left: {err}", file=sys.stderr)
        return 3
    except GeneratorError as err:
        partial = f"{args.out}.partial"
        print(f"scalerl train: {err}\nscalerl train: the chunk stopped; re-run the same command "
              f"to resume from its last intra-chunk save ({partial}, if any)", file=sys.stderr)
        return 4
    return 0


LONGEST_BY_CHARS = 32  # train prompts formatted to find the longest in tokens


def estimate_longest_prompt_tokens(prompts: str, model_dir: str, model_cfg: Any = None
                                   ) -> int | None:
    """An estimate for the memory plan: tokens of the longest of the `LONGEST_BY_CHARS` train
    prompts that are longest in characters, formatted as the trainer formats them (a prompt
    with fewer characters but more tokens is missed; the trainer's exact count over every
    prompt is `scalerl.rollout.vllm_settings.longest_prompt_tokens`); None when the file or
    tokenizer is not there."""
    from pathlib import Path

    from scalerl.models.loading import format_prompt, load_model_config, load_tokenizer
    from scalerl.rl.prompts import load_prompt_table

    if not Path(prompts).is_file() or not (Path(model_dir) / "config.json").is_file():
        return None
    texts = sorted((str(r["prompt"]) for r in load_prompt_table(prompts, "train")),
                   key=len, reverse=True)[:LONGEST_BY_CHARS]
    if not texts:
        return None
    tokenizer = load_tokenizer(model_dir)
    model_cfg = model_cfg or load_model_config(None, model_dir)
    return max(len(format_prompt(tokenizer, text, model_cfg)) for text in texts)


def check_plan(cfg: Any, init: str, prompts: str, model_cfg: Any, gpu_mem: str | None) -> Any:
    """`scalerl.plan.preflight` of the run (module docstring): PlanError when it does not fit,
    None when skipped (CPU without --gpu-mem), else the PlanReport."""
    import torch

    from scalerl.plan.adapters import DEFAULT_PROMPT_TOKENS, preflight
    from scalerl.plan.cli import parse_size

    if gpu_mem is None and (cfg.device == "cpu" or not torch.cuda.is_available()):
        return None
    from scalerl.utils.log import progress

    longest = estimate_longest_prompt_tokens(prompts, init, model_cfg)
    from scalerl.parallel.world import slurm_nodes

    nodes = max(1, slurm_nodes())
    asked = None  # --gpu-mem plans for the devices the run asks for on each node
    if gpu_mem:
        per_gen = cfg.vllm.tensor_parallel_size if cfg.engine == "vllm" else 1
        gens = cfg.generators if cfg.recipe.off_policy == "pipeline" else 0
        asked = -(-cfg.trainer_ranks // nodes) + -(-gens // nodes) * per_gen
    report = preflight(cfg, init, parse_size(gpu_mem) if gpu_mem else None,
                       devices=asked, nodes=nodes,
                       model_dtype=model_cfg.dtype if model_cfg is not None else None,
                       prompt_tokens=longest or DEFAULT_PROMPT_TOKENS)
    if report is not None:
        progress(f"train {cfg.run}: memory plan fits ({'measured' if longest else 'assumed'} "
                 f"longest prompt {longest or DEFAULT_PROMPT_TOKENS} tokens)")
    return report
