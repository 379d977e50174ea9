"""Re-extract the public model-size families (curves + sources.csv) from bare git mirrors.

Each family is a set of RL runs that differ only in model size (same recipe, data, schedule),
copied value for value from a file committed in a public GitHub repository (no smoothing,
resampling or digitising). Run `python3 extract.py`; mirrors are read from
`$MIRROR_ROOT/<owner>+<name>/repo` (default /work/.mirror, as the parent directory's
extract.py) with `git show <commit>:<path>`.

Output, next to this file: one `<family>__<model>__<metric>.csv` per run (`step,value`) and
`sources.csv` (the parent collection's columns plus `source`, `params`, `task`, `family`).

Parsing: `wide_csv_points` reads a table whose first column is the step and whose other
columns are one run each (a W&B line-plot export with only the value columns kept); a run's
points are the rows where its column is non-empty. The parent's `build` (with this
collection's columns) reads each file once, and its `check` rejects short curves, non-numbers
and steps that do not increase.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from extract import MANIFEST_FIELDS, build, slug  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent
FIELDS = MANIFEST_FIELDS + ["source", "params", "task", "family"]


def wide_csv_points(text: str, column: str, step_column: str = "Step"):
    """(step, value, None) for one run's column of a step-by-run table."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows or column not in rows[0] or step_column not in rows[0]:
        raise KeyError(f"columns {step_column!r} and {column!r} not both in the table")
    return [(r[step_column], r[column], None) for r in rows if r[column].strip()]


# -- josancamon19/rl-scaling-laws: Qwen3-Base 0.6B-14B, GRPO on GSM8K (verl) ---------------
QWEN3 = "josancamon19/rl-scaling-laws"
# results/export.csv was last changed here (the newest commit holds the same file)
QWEN3_COMMIT = "7646ee5ec36e81848f921deb8ce05f46f632a97e"
QWEN3_PATH = "results/export.csv"
# Non-embedding parameters, from the repository's README ("Sizes tested: Non-embedding
# parameters: 0.44B, 1.4B, 3.6B, 6.95B, 13.2B").
QWEN3_PARAMS = {"0.6b": 0.44e9, "1.7b": 1.4e9, "4b": 3.6e9, "8b": 6.95e9, "14b": 13.2e9}
QWEN3_NOTE = (
    "W&B export of verl's validation mean@1 on the GSM8K test set (1319 problems; values are "
    "multiples of 1/1319) at every test_freq steps (4; 1 for the 14B run), cleaned by the "
    "repository's scripts/clean_export.py (keeps the mean@1 columns, renames them to the model "
    "size; the original metric names are not committed). Recipe per README and train.sh: "
    "Qwen3-<size>-Base, GRPO (verl), 512 prompts x 3 rollouts per step, lr 1e-6, KL 0.001 "
    "(low_var_kl), 512 prompt + 512 response tokens, 4 epochs of GSM8K train (~58 steps); "
    "same for every size. params = non-embedding parameters as the README lists them. ")
QWEN3_RUNS = {
    "0.6b": "Step 0 = 0.037, far below the other sizes: the README's 0.6B 'strict' reward "
            "baseline is 0.0%, so this run may have used the strict (#### format) reward while "
            "the others used custom_flexible; the repository does not say.",
    "1.7b": "", "4b": "", "8b": "",
    "14b": "Evaluated every step (test_freq=1, per train.sh's comment).",
}


def qwen3(size: str) -> dict:
    model = f"Qwen3-{size.upper()}-Base"
    return dict(
        file=f"qwen3-gsm8k-grpo__{slug(model)}__val-gsm8k-mean-at-1.csv", repo=QWEN3,
        path=QWEN3_PATH, commit=QWEN3_COMMIT, metric=f"column '{size}' (val mean@1)",
        kind="eval", model=model, algorithm="GRPO (verl)",
        notes=(QWEN3_NOTE + QWEN3_RUNS[size]).strip(),
        source=f"https://github.com/{QWEN3}/blob/{QWEN3_COMMIT}/{QWEN3_PATH}",
        params=f"{QWEN3_PARAMS[size]:.4g}", task="gsm8k", family="qwen3-gsm8k-grpo",
        parse=lambda t, c=size: wide_csv_points(t, c))


FAMILIES = [qwen3(s) for s in ("0.6b", "1.7b", "4b", "8b", "14b")]


if __name__ == "__main__":
    rows = build(FAMILIES, OUT_DIR, FIELDS)
    print(f"{len(rows)} curves in {len({r['family'] for r in rows})} family(ies)",
          file=sys.stderr)
