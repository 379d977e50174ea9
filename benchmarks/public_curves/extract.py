"""Build the public curve collection (/work/public_curves) from files committed in public GitHub repos.

Every value written here is copied, as its original text, from a file in a public repository at a
named commit; nothing is smoothed, resampled, interpolated or rescaled. A point is dropped only when
the source has no value for that run at that step (W&B CSV exports hold one column per run, with
empty cells where a run has no point).

Sources are read from bare git mirrors of the repositories (the `fetch` tool of the steering
machine puts them under /work/.mirror/<owner>+<name>/repo), so `python extract.py` re-creates every
CSV and sources.csv byte for byte where those mirrors exist. Set MIRROR_ROOT to use another place.

Parsers (also used by the held-out collection's script, which imports this file):
  * wandb_csv_points  - a W&B "Export CSV" of a line plot: first column is the x axis ("Step",
                        "train/global_step" or "Relative Time (Process)"), then per run three
                        columns "<run> - <metric>", "...__MIN", "...__MAX" (identical when not
                        grouped). The step comes from the x column or, when the x axis is time,
                        from the run's "<run> - _step" column (then the time is the compute column).
  * notebook_table_points - the HTML progress table that transformers' Trainer prints in a Jupyter
                        output cell (TRL GRPOTrainer, logging every step): columns Step, Training
                        Loss, reward, reward_std, ...
  * plain_csv_points  - an ordinary CSV with a step column and a value column.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

MIRROR_ROOT = Path(os.environ.get("MIRROR_ROOT", "/work/.mirror"))
OUT_DIR = Path(__file__).resolve().parent
MIN_POINTS = 8


def git_show(repo: str, commit: str, path: str) -> str:
    """Text of `path` at `commit` in the bare mirror of `repo` (owner/name)."""
    git_dir = MIRROR_ROOT / repo.replace("/", "+") / "repo"
    out = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                         capture_output=True, check=True)
    return out.stdout.decode("utf-8")


def wandb_csv_points(text: str, column: str, step_column: str | None = None):
    """(step, value, compute) triples for one run's column of a W&B line-plot CSV export.

    With step_column=None the step is the CSV's first column and compute is None; otherwise the
    step is read from `step_column` and compute is the first column (e.g. relative time in s).
    """
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0]
    if column not in header:
        raise KeyError(f"column {column!r} not in W&B export (has {len(header)} columns)")
    j = header.index(column)
    k = header.index(step_column) if step_column else None
    points = []
    for r in rows[1:]:
        if j >= len(r) or r[j].strip() == "":
            continue
        if k is None:
            points.append((r[0], r[j], None))
        else:
            if r[k].strip() == "":
                raise ValueError(f"row with a value but no {step_column!r}: {r[:1]}")
            points.append((r[k], r[j], r[0]))
    return points


def notebook_table_points(text: str, column: str):
    """(step, value, None) from the Trainer progress table in a notebook's output cells.

    The notebook must hold exactly one HTML table with a 'Step' header and `column` (an SFT warm-up
    table without `column` is ignored).
    """
    nb = json.loads(text)
    tables = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            h = out.get("data", {}).get("text/html", "")
            if isinstance(h, list):
                h = "".join(h)
            heads = [html.unescape(re.sub(r"<.*?>", "", x)).strip()
                     for x in re.findall(r"<th.*?</th>", h, re.S)]
            if "<table" in h and "Step" in heads and column in heads:
                tables.append(h)
    if len(tables) != 1:
        raise ValueError(f"expected one Trainer table with {column!r}, found {len(tables)}")
    h = tables[0]
    heads = [html.unescape(re.sub(r"<.*?>", "", x)).strip() for x in re.findall(r"<th.*?</th>", h, re.S)]
    j = heads.index(column)
    s = heads.index("Step")
    points = []
    for tr in re.findall(r"<tr.*?>(.*?)</tr>", h, re.S):
        cells = [html.unescape(re.sub(r"<.*?>", "", x)).strip() for x in re.findall(r"<td.*?</td>", tr, re.S)]
        if not cells:
            continue  # the header row
        points.append((cells[s], cells[j], None))
    return points


def plain_csv_points(text: str, step_column: str, value_column: str, keep=lambda row: True):
    rows = list(csv.DictReader(io.StringIO(text)))
    return [(r[step_column], r[value_column], None) for r in rows if keep(r)]


def check(points, name):
    """Reject what a forecaster must not be fed silently: too few points, non-numbers, steps that
    do not increase."""
    if len(points) < MIN_POINTS:
        raise ValueError(f"{name}: {len(points)} points < {MIN_POINTS}")
    prev = None
    for step, value, _ in points:
        s, _v = float(step), float(value)
        if prev is not None and s <= prev:
            raise ValueError(f"{name}: step {step} does not increase after {prev}")
        prev = s
    computes = [float(c) for _, _, c in points if c is not None]
    if any(b < a for a, b in zip(computes, computes[1:])):
        raise ValueError(f"{name}: compute decreases")


def write_curve(out_dir: Path, fname: str, points):
    with_compute = any(c is not None for _, _, c in points)
    lines = ["step,value,compute" if with_compute else "step,value"]
    for step, value, compute in points:
        lines.append(f"{step},{value},{compute}" if with_compute else f"{step},{value}")
    (out_dir / fname).write_text("\n".join(lines) + "\n", encoding="ascii")


MANIFEST_FIELDS = ["file", "repo", "path", "commit", "metric", "kind", "model", "algorithm",
                   "n_points", "notes"]


def build(specs, out_dir: Path, fields=MANIFEST_FIELDS):
    """Extract every spec into out_dir and write out_dir/sources.csv with `fields`."""
    manifest = []
    cache = {}
    for sp in specs:
        if "text" in sp:
            text = sp["text"]()
        else:
            key = (sp["repo"], sp["commit"], sp["path"])
            if key not in cache:
                cache[key] = git_show(*key)
            text = cache[key]
        points = sp["parse"](text)
        check(points, sp["file"])
        write_curve(out_dir, sp["file"], points)
        manifest.append({**{k: sp.get(k, "") for k in fields}, "n_points": len(points)})
        print(f"{sp['file']}: {len(points)} points, steps {points[0][0]}..{points[-1][0]}")
    with open(out_dir / "sources.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(manifest)
    return manifest


def slug(s: str) -> str:
    """ASCII file-name part: parentheses dropped, any other run of odd characters -> '-'."""
    s = s.replace("(", "").replace(")", "")
    return re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._-]+", "-", s)).strip("-")


# ----------------------------------------------------------------------------------------------
# Public sources
# ----------------------------------------------------------------------------------------------

DEEPGRPO = "befocuss/Deep-GRPO"
# The paper-figure data were removed from the repository's newest tree; this is the last commit
# that holds them (recipe/DEEP_GRPO/paper_draw/data/...).
DEEPGRPO_COMMIT = "7158a967c61c1e9d302ccb09ea18bf1acc1749b3"
DG = "recipe/DEEP_GRPO/paper_draw/data/"
GSM8K_VAL = "val-core/GSM8K/reward/mean@1"
DG_NOTE = ("W&B CSV export used for the paper's figures; verl val-core GSM8K test reward "
           "(rule-based exact match, 0/1) mean@1 over the GSM8K test set (1319 problems; values are "
           "multiples of 1/1319), evaluated every 5 training steps; recipe: 64 prompts x 8 rollouts "
           "per step, lr 1e-6 (repo's GSM8K GRPO script).")


def deepgrpo(run, csv_file, algorithm, extra_note="", short=None):
    col = f"{run} - {GSM8K_VAL}"
    return dict(
        file=f"deepgrpo__{slug(short or run)}__val-core-GSM8K-reward-mean-at-1.csv",
        repo=DEEPGRPO, path=DG + csv_file, commit=DEEPGRPO_COMMIT, metric=col, kind="eval",
        model="Qwen2.5-0.5B-Instruct", algorithm=algorithm,
        notes=(DG_NOTE + " Column '" + col + "'; points = rows with a value. " + extra_note).strip(),
        parse=lambda t, c=col: wandb_csv_points(t, c))


def deepgrpo_timed(run, algorithm, extra_note=""):
    col = f"{run} - {GSM8K_VAL}"
    return dict(
        file=f"deepgrpo__{slug(run)}__val-core-GSM8K-reward-mean-at-1.csv",
        repo=DEEPGRPO, path=DG + "scale_budget.csv", commit=DEEPGRPO_COMMIT, metric=col,
        kind="eval", model="Qwen2.5-0.5B-Instruct", algorithm=algorithm,
        notes=(DG_NOTE + " Export with x axis 'Relative Time (Process)': step = the run's '_step' "
               "column, compute = relative wall-clock time of the process in seconds. " + extra_note).strip(),
        parse=lambda t, c=col, s=f"{run} - _step": wandb_csv_points(t, c, step_column=s))


DEEP = "Deep-GRPO (tree/branch rollouts; verl, GRPO advantage)"
PUBLIC = [
    # grpo_scale_rollout.csv: the baseline GRPO runs with more rollouts and the no-branch variants.
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-GRPO-n32-01131200", "grpo_scale_rollout.csv",
             "GRPO", "32 rollouts per prompt (run name n32)."),
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-GRPO-n64", "grpo_scale_rollout.csv",
             "GRPO", "64 rollouts per prompt (run name n64)."),
    deepgrpo("qwen2.5-0.5b-instruct-gsm8k-crpo-no-branch", "grpo_scale_rollout.csv",
             "GRPO", "The paper's GRPO baseline (plot script labels it 'GRPO'); also in "
             "training_dynamics/test_reward.csv with the same values."),
    deepgrpo("qwen2.5-0.5b-instruct-gsm8k-crpo-no-branch-n16-new", "grpo_scale_rollout.csv",
             "GRPO", "No-branch (plain GRPO) run, 16 rollouts per prompt (run name n16)."),
    # The main Deep-GRPO run, taken from the time-axis export so that it carries compute.
    deepgrpo_timed("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-gamma2.0-lam1.0-01161659", DEEP,
                   "The paper's main DEEP-GRPO run (plot script labels it 'DEEP-GRPO'); the same "
                   "values appear in grpo_scale_rollout.csv, loss_weight.csv, sampling_strategy.csv "
                   "and training_dynamics/test_reward.csv."),
    deepgrpo_timed("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p2b4-gamma2.0-lam1.0-01182022", DEEP,
                   "Budget ablation (p2b4)."),
    deepgrpo_timed("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1b4-gamma2.0-lam1.0-01182022", DEEP,
                   "Budget ablation (p1b4)."),
    deepgrpo_timed("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1b8-gamma2.0-lam1.0-expandall-01182022", DEEP,
                   "Budget ablation (p1b8, expand all)."),
    # loss_weight.csv: lambda ablation.
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-gamma2.0-lam0.1-01161659", "loss_weight.csv",
             DEEP, "Loss-weight ablation lambda=0.1."),
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-gamma2.0-lam0.5-01161659", "loss_weight.csv",
             DEEP, "Loss-weight ablation lambda=0.5."),
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-gamma2.0-lam2.0-01161659", "loss_weight.csv",
             DEEP, "Loss-weight ablation lambda=2.0."),
    # sampling_strategy.csv: gamma (branch-point sampling) ablation.
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-gamma0.1-lam1.0-01161659", "sampling_strategy.csv",
             DEEP, "Sampling-strategy ablation gamma=0.1."),
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-gamma-20.0-lam1.0-01161659", "sampling_strategy.csv",
             DEEP, "Sampling-strategy ablation gamma=-20.0."),
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-gamma1.0-lam1.0-01161659", "sampling_strategy.csv",
             DEEP, "Sampling-strategy ablation gamma=1.0."),
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-gamma3.0-lam1.0-01161659", "sampling_strategy.csv",
             DEEP, "Sampling-strategy ablation gamma=3.0."),
    deepgrpo("Qwen2.5-0.5B-Instruct-GSM8K-CRPO-sp-p1-b8-random-lam1.0-01161659", "sampling_strategy.csv",
             DEEP, "Sampling-strategy ablation: random branch points."),
]

TREERL_COL = "Qwen2.5-0.5B-Instruct-TreeRL - val-core/openai/gsm8k/acc/mean@1"
PUBLIC.append(dict(
    file="deepgrpo__Qwen2.5-0.5B-Instruct-TreeRL__val-core-openai-gsm8k-acc-mean-at-1.csv",
    repo=DEEPGRPO, path=DG + "tree_methods_training_instability/test_reward.csv",
    commit=DEEPGRPO_COMMIT, metric=TREERL_COL, kind="eval", model="Qwen2.5-0.5B-Instruct",
    algorithm="TreeRL (tree-search RL baseline, verl)",
    notes=("W&B CSV export for the paper's 'tree methods training instability' figure: GSM8K test "
           "accuracy (verl val-core acc mean@1) every 5 steps; the run degrades late (the point of "
           "that figure). Points = rows with a value."),
    parse=lambda t: wandb_csv_points(t, TREERL_COL)))

UNSLOTH = "unslothai/notebooks"
UNSLOTH_COMMIT = "8081c7e480275013fa38cf2bfbaf902af5ccf589"  # last commit touching these notebooks
UNSLOTH_NOTE = ("Per-step training reward printed by TRL GRPOTrainer (via Unsloth) in the committed "
                "notebook's output table (logging every step, 1 prompt per step); 'reward' is the SUM "
                "of the notebook's reward functions (format + answer rewards), so its scale is not "
                "[0,1] and it can be negative. Very noisy (one prompt x num_generations completions per "
                "step). The notebook code may have been edited after the outputs were recorded "
                "(e.g. max_steps), the table is what was logged. ")


def unsloth(nb, model, gens, extra=""):
    return dict(
        file=f"unsloth-notebooks__{slug(nb.removesuffix('.ipynb'))}__reward.csv",
        repo=UNSLOTH, path=f"nb/{nb}", commit=UNSLOTH_COMMIT, metric="reward (Trainer table column)",
        kind="train_reward", model=model, algorithm="GRPO (TRL GRPOTrainer + Unsloth, LoRA)",
        notes=(UNSLOTH_NOTE + f"num_generations={gens} in the notebook code. " + extra).strip(),
        parse=lambda t: notebook_table_points(t, "reward"))


PUBLIC += [
    unsloth("Qwen2.5_(3B)-GRPO.ipynb", "Qwen2.5-3B-Instruct (unsloth bnb-4bit)", 8, "GSM8K."),
    unsloth("Llama3.1_(8B)-GRPO.ipynb", "Llama-3.1-8B-Instruct (unsloth bnb-4bit)", 6,
            "GSM8K; the table also has 'rewards / correctness_reward_func' (2.0 per correct answer)."),
    unsloth("Mistral_v0.3_(7B)-GRPO.ipynb", "Mistral-7B-Instruct-v0.3 (unsloth bnb-4bit)", 6,
            "GSM8K; the table also has 'rewards / correctness_reward_func'."),
    unsloth("Advanced_Llama3_2_(3B)_GRPO_LoRA.ipynb", "Llama-3.2-3B-Instruct", 4,
            "Math (Open-R1 style format); 500 logged steps."),
    unsloth("Advanced_Llama3_1_(3B)_GRPO_LoRA.ipynb", "Llama-3.2-3B-Instruct", 8,
            "Math; 292 logged steps although the code says max_steps=1000 (run stopped early)."),
    unsloth("Qwen3_(4B)-GRPO.ipynb", "Qwen3-4B-Base", 4, "Math (after a short SFT format warm-up)."),
    unsloth("Qwen3_8B_FP8_GRPO.ipynb", "Qwen3-8B-FP8", 4, "Math."),
    unsloth("DeepSeek_R1_0528_Qwen3_(8B)_GRPO.ipynb", "DeepSeek-R1-0528-Qwen3-8B", 4,
            "Math with a language-consistency reward."),
]


if __name__ == "__main__":
    names = [s["file"] for s in PUBLIC]
    assert len(names) == len(set(names)), "duplicate output file names"
    m = build(PUBLIC, OUT_DIR)
    kinds = {}
    for row in m:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    print(f"{len(m)} curves: {kinds}", file=sys.stderr)
