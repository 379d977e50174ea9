"""Pass rate per task family and difficulty, per run and checkpoint, from a sweep's eval tables.

    .venv/bin/python benchmarks/family_pass_rates.py RESULTS [--chunks 0 6]

Joins every `runs/*/eval/chunk*.parquet` with `data/prompts.parquet` on prompt_id; a family is
the prompt's source without `synth-` plus its difficulty (`add1`, `sub2`, `code1`, ...). Prints
one table per run (rows: checkpoints, columns: families, then the task means), and the
length of the longest correct response per family at each run's last checkpoint: the evidence
behind "does a longer generation raise the ceiling" (a family whose correct answers never need
more than the shorter budget cannot gain from the longer one).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def _family_order(name: str) -> tuple:
    """Families by name, then difficulty as a number (chain2 before chain10), task means last."""
    stem = name.rstrip("0123456789")
    level = name[len(stem):]
    return (name.startswith("all "), stem, int(level) if level else 0)


def family_table(results: Path, chunks: list[int] | None) -> dict[str, pd.DataFrame]:
    prompts = pd.read_parquet(results / "data" / "prompts.parquet")
    prompts["family"] = (prompts["source"].str.replace("synth-", "", regex=False)
                         + prompts["difficulty"].astype(str))
    out = {}
    for run in sorted((results / "runs").iterdir()):
        files = sorted((run / "eval").glob("chunk*.parquet"),
                       key=lambda p: int(p.stem.removeprefix("chunk")))
        rows, last = [], None
        for path in files:
            chunk = int(path.stem.removeprefix("chunk"))
            if chunks and chunk not in chunks and path != files[-1]:
                continue
            table = pd.read_parquet(path).merge(prompts[["prompt_id", "family"]], on="prompt_id")
            row = table.groupby("family")["correct"].mean()
            for task, sub in table.groupby("task"):
                row[f"all {task}"] = sub["correct"].mean()
            row.name = f"step {int(table['step'].iloc[0])}"
            rows.append(row)
            last = table
        frame = pd.DataFrame(rows)
        frame = frame[sorted(frame.columns, key=_family_order)]
        if last is not None:
            longest = last[last["correct"]].groupby("family")["n_tokens"].max()
            frame.loc["longest correct (tokens)"] = longest
        out[run.name] = frame
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--chunks", type=int, nargs="*", default=None,
                        help="only these checkpoints (the last is always shown)")
    args = parser.parse_args()
    for run, frame in family_table(args.results, args.chunks).items():
        print(f"\n{run}\n{frame.round(3).to_string()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
