"""`scalerl eval`: evaluate one checkpoint of a run into eval/chunk{K}.parquet.

    scalerl eval --config results/runs/RUN/run.yaml --checkpoint results/runs/RUN/chunk3 \\
        --chunk 3 --prompts results/data/prompts.parquet --out results/runs/RUN/eval/chunk3.parquet

Chunk 0 is the base model (pass its directory as --checkpoint): step 0, compute 0, R0.
Downstream sets: `--prompts aime.jsonl --split all --dataset aime` (same schema, own file); a
set in an upstream layout: `--prompts HumanEval.jsonl --format humaneval --dataset humaneval`.
Generation settings come from the run config (engine, generation cap, interruption budgets);
`--samples`, `--max-prompts` override its `eval` section. Progress goes to stderr.
"""

from __future__ import annotations

import argparse

from scalerl.config import ConfigError, key_value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="the run's RunConfig (run.yaml)")
    parser.add_argument("--checkpoint", required=True,
                        help="model directory: a trainer checkpoint, or the base model (chunk 0)")
    parser.add_argument("--chunk", type=int, required=True, help="chunk index (0 = base model)")
    parser.add_argument("--prompts", required=True,
                        help="prompts.parquet (or a .parquet/.jsonl downstream set)")
    parser.add_argument("--out", required=True, help="output Parquet file (written atomically)")
    parser.add_argument("--split", default="val",
                        help="rows of --prompts to use: val (default), train, or all")
    parser.add_argument("--dataset", default=None,
                        help="value of the `dataset` column (default: val, or the file's stem)")
    parser.add_argument("--format", default="",
                        help="--prompts is a dataset in this upstream layout (humaneval, mbpp, "
                        "acecode, kodcode, deepcoder, taco, apps, polaris), converted; "
                        "default: prompts.parquet columns")
    parser.add_argument("--max-prompts", type=int, default=None,
                        help="prompts per task (0 = all); default: the run's eval.max_prompts")
    parser.add_argument("--samples", type=int, default=None,
                        help="samples per prompt (k of mean@k); default: eval.samples_per_prompt")
    parser.add_argument("--model-config", default=None,
                        help="the model's MODEL.yaml (dtype, prompt format, FP32 head); default: "
                        "the base directory's base_info.json, else defaults")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                        help="override an identifying column: run, model, gen_len, recipe, seed")


def _parse_labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, value = key_value(item, "--label")
        labels[key] = value
    return labels


def run(args: argparse.Namespace) -> int:
    from scalerl.eval.runner import run_eval
    from scalerl.models.loading import load_model_config
    from scalerl.rl.run_config import load_run_config

    if args.chunk < 0:
        raise ConfigError(f"--chunk {args.chunk}: must be >= 0 (0 = the base model)")
    if args.max_prompts is not None and args.max_prompts < 0:
        raise ConfigError("--max-prompts must be >= 0 (0 = all)")
    if args.samples is not None and args.samples < 1:
        raise ConfigError("--samples must be >= 1")
    if args.split not in ("val", "train", "all"):
        raise ConfigError(f"--split {args.split!r}: choose val, train or all")
    run_cfg = load_run_config(args.config)
    run_eval(
        run_cfg, args.checkpoint, args.chunk, args.prompts, args.out,
        split=args.split, dataset=args.dataset, format=args.format,
        max_prompts=args.max_prompts,
        samples=args.samples, labels=_parse_labels(args.label),
        model_cfg=load_model_config(args.model_config, args.checkpoint),
    )
    return 0
