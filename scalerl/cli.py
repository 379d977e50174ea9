"""`scalerl <command>`: the command-line entry point.

Each command lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`;
this file only lists them and imports the chosen one, so `scalerl --help` stays fast (no torch
import) and each command owns its options. Errors derived from `ValueError`/`FileNotFoundError`
are printed as one readable line (exit code 2) instead of a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scalerl import __version__

# name -> (module, one-line help). Modules implement add_arguments(parser) and run(args).
COMMANDS: dict[str, tuple[str, str]] = {
    "data": ("scalerl.data.cli", "build and filter the prompt set (prompts.parquet)"),
    "base": ("scalerl.basemodel.cli", "build the base model: tiny model + SFT warm start, or a HF model"),
    "plan": ("scalerl.plan.cli", "check that a run or sweep fits the device memory (no work)"),
    "train": ("scalerl.train", "run one training chunk of one run (checkpoint + steps.parquet)"),
    "eval": ("scalerl.eval.cli", "evaluate a checkpoint on held-out prompts into Parquet"),
    "fit": ("scalerl.fit.commands.fit", "fit sigmoidal compute-performance curves and extrapolate"),
    "report": ("scalerl.fit.commands.report", "collect fits of a sweep into the scaling report"),
    "predict": ("scalerl.fit.commands.predict", "predict runs' final value and A from their logs or evals so far"),
    "across": ("scalerl.fit.commands.across", "predict a run of an untried model size (or length) from runs of other sizes"),
    "race": ("scalerl.fit.commands.race", "stop runs of a sweep whose predicted A is clearly below the best"),
    "watch": ("scalerl.fit.commands.watch", "follow runs while they train: forecasts, verdicts, updated plot"),
    "prior": ("scalerl.fit.commands.prior", "rebuild the curve prior of the forecasts from a corpus of public RL curves"),
}


def _top_parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="scalerl",
        description="Predictable RL post-training of language models (ScaleRL).",
        epilog=f"commands:\n{lines}\n\nRun `scalerl COMMAND --help` for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"scalerl {__version__}")
    parser.add_argument("command", nargs="?", help="one of: " + ", ".join(COMMANDS))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _top_parser()
    if not argv or argv[0] not in COMMANDS:
        args, _ = top.parse_known_args(argv)
        if args.command is None:
            top.print_help()
            return 0 if not argv else 2
        top.error(f"unknown command {args.command!r}; choose one of: {', '.join(COMMANDS)}")
    name, rest = argv[0], argv[1:]
    module_name, help_ = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            print(f"scalerl {name}: this command is not available in this build ({err})",
                  file=sys.stderr)
            return 2
        raise
    parser = argparse.ArgumentParser(prog=f"scalerl {name}", description=help_)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"scalerl {name}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
