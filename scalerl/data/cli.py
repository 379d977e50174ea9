"""`scalerl data --config CFG.yaml --out prompts.parquet [--report report.json]`.

Builds the prompt set described by a `DataConfig` YAML/JSON (no --config: the built-in
default, synthetic math and code), writes prompts.parquet and the filter report atomically.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse

from scalerl.config import load_mapping


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="DataConfig YAML/JSON (default: built-in synthetic set)")
    parser.add_argument("--out", required=True, help="output prompts.parquet")
    parser.add_argument("--report", help="output filter report (JSON)")


def run(args: argparse.Namespace) -> int:
    from scalerl.config import config_hash
    from scalerl.data.build import build_prompts
    from scalerl.data.config import DataConfig
    from scalerl.data.io import write_prompts
    from scalerl.utils.io import write_json_atomic

    cfg = DataConfig.from_dict(load_mapping(args.config) if args.config else {})
    frame, report = build_prompts(cfg)
    write_prompts(frame, args.out, {"config_hash": config_hash(cfg)})
    if args.report:
        write_json_atomic(args.report, {**report, "config": cfg.to_dict()})
    return 0
