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


def plain_csv_points(text: str, step_column: str, value_column: str, keep=lambda row: True,
                     drop_repeats: bool = False):
    """(step, value, None) of the rows that `keep`; `drop_repeats`: a row whose (step, value)
    already appeared is dropped (a table that holds the same run twice, back to back)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    points, seen = [], set()
    for r in rows:
        if not keep(r):
            continue
        key = (r[step_column], r[value_column])
        if drop_repeats and key in seen:
            continue
        seen.add(key)
        points.append((r[step_column], r[value_column], None))
    return points


def jsonl_points(text: str, step_key: str, value_key: str, compute_key: str | None = None):
    """(step, value, compute) from a JSON-lines log, one record per evaluation; numbers keep
    their original text (parsed as strings), records without `value_key` are skipped."""
    points = []
    for line in text.splitlines():
        if not line.strip():
            continue
        rec = json.loads(line, parse_float=str, parse_int=str)
        if rec.get(value_key) is None:
            continue
        points.append((rec[step_key], rec[value_key],
                       rec[compute_key] if compute_key else None))
    return points


def payload_points(text: str, *keys: str):
    """(step, value, None) of the `points` list at `keys` of a JSON figure payload (each point
    a {"step", "value", ...} record); numbers keep their original text."""
    node = json.loads(text, parse_float=str, parse_int=str)
    for key in keys:
        node = node[key]
    return [(p["step"], p["value"], None) for p in node["points"]]


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
                   "n_points", "notes", "source", "params", "task"]
# source: the leave-one-source-out group (one repository or paper); params: the model's nominal
# size in parameters ("" if unknown); task: math | code | game | other.


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
        source=DEEPGRPO, params="0.5e9", task="math",
        parse=lambda t, c=col: wandb_csv_points(t, c))


def deepgrpo_timed(run, algorithm, extra_note=""):
    col = f"{run} - {GSM8K_VAL}"
    return dict(
        file=f"deepgrpo__{slug(run)}__val-core-GSM8K-reward-mean-at-1.csv",
        repo=DEEPGRPO, path=DG + "scale_budget.csv", commit=DEEPGRPO_COMMIT, metric=col,
        kind="eval", model="Qwen2.5-0.5B-Instruct", algorithm=algorithm,
        notes=(DG_NOTE + " Export with x axis 'Relative Time (Process)': step = the run's '_step' "
               "column, compute = relative wall-clock time of the process in seconds. " + extra_note).strip(),
        source=DEEPGRPO, params="0.5e9", task="math",
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
    source=DEEPGRPO, params="0.5e9", task="math",
    parse=lambda t: wandb_csv_points(t, TREERL_COL)))

UNSLOTH = "unslothai/notebooks"
UNSLOTH_COMMIT = "8081c7e480275013fa38cf2bfbaf902af5ccf589"  # last commit touching these notebooks
UNSLOTH_NOTE = ("Per-step training reward printed by TRL GRPOTrainer (via Unsloth) in the committed "
                "notebook's output table (logging every step, 1 prompt per step); 'reward' is the SUM "
                "of the notebook's reward functions (format + answer rewards), so its scale is not "
                "[0,1] and it can be negative. Very noisy (one prompt x num_generations completions per "
                "step). The notebook code may have been edited after the outputs were recorded "
                "(e.g. max_steps), the table is what was logged. ")


def unsloth(nb, model, params, gens, extra=""):
    return dict(
        file=f"unsloth-notebooks__{slug(nb.removesuffix('.ipynb'))}__reward.csv",
        repo=UNSLOTH, path=f"nb/{nb}", commit=UNSLOTH_COMMIT, metric="reward (Trainer table column)",
        kind="train_reward", model=model, algorithm="GRPO (TRL GRPOTrainer + Unsloth, LoRA)",
        notes=(UNSLOTH_NOTE + f"num_generations={gens} in the notebook code. " + extra).strip(),
        source=UNSLOTH, params=params, task="math",
        parse=lambda t: notebook_table_points(t, "reward"))


PUBLIC += [
    unsloth("Qwen2.5_(3B)-GRPO.ipynb", "Qwen2.5-3B-Instruct (unsloth bnb-4bit)", "3e9", 8, "GSM8K."),
    unsloth("Llama3.1_(8B)-GRPO.ipynb", "Llama-3.1-8B-Instruct (unsloth bnb-4bit)", "8e9", 6,
            "GSM8K; the table also has 'rewards / correctness_reward_func' (2.0 per correct answer)."),
    unsloth("Mistral_v0.3_(7B)-GRPO.ipynb", "Mistral-7B-Instruct-v0.3 (unsloth bnb-4bit)", "7e9", 6,
            "GSM8K; the table also has 'rewards / correctness_reward_func'."),
    unsloth("Advanced_Llama3_2_(3B)_GRPO_LoRA.ipynb", "Llama-3.2-3B-Instruct", "3e9", 4,
            "Math (Open-R1 style format); 500 logged steps."),
    unsloth("Advanced_Llama3_1_(3B)_GRPO_LoRA.ipynb", "Llama-3.2-3B-Instruct", "3e9", 8,
            "Math; 292 logged steps although the code says max_steps=1000 (run stopped early)."),
    unsloth("Qwen3_(4B)-GRPO.ipynb", "Qwen3-4B-Base", "4e9", 4, "Math (after a short SFT format warm-up)."),
    unsloth("Qwen3_8B_FP8_GRPO.ipynb", "Qwen3-8B-FP8", "8e9", 4, "Math."),
    unsloth("DeepSeek_R1_0528_Qwen3_(8B)_GRPO.ipynb", "DeepSeek-R1-0528-Qwen3-8B", "8e9", 4,
            "Math with a language-consistency reward."),
]


# -- SPEED-RL (Zhang, Arora, Mei, Zanette 2025), MATH500 and DAPO-1k of 18 runs -----------------
SPEED = "Zanette-Labs/speed-rl"
# The metrics were committed with the plot functions and removed by the next commit.
SPEED_COMMIT = "cc3de63619f9aade52f9022e9ebcb39cce8a254e"
SPEED_NOTE = ("verl validation metrics of the paper's runs, summarised by the authors into "
              "metrics_summary/<run>/processed_metrics.json (one JSON record per evaluation, every "
              "25 training steps, step 0 = the base model); step = 'train_global_steps', compute = "
              "'accumulated_training_time' (wall-clock seconds). Run name: model size, algorithm "
              "(FAST = the paper's SPEED curriculum on top of it), training set, N = rollouts per "
              "prompt (N4+20: 4 screening + 20 continuation rollouts). Model per the repo's scripts "
              "and Experiment_log.md: Qwen2.5-Math-1.5B / Qwen2.5-Math-7B.")
SPEED_RUNS = [
    "1.5B-Math-DAPO-NuminaMath-N24", "1.5B-Math-FAST-DAPO-NuminaMath-N4+20",
    "1.5B-Math-FAST-RLOO-Numina-N4+20", "1.5B-Math-FAST-RLOO-dataDAPO-N4+20",
    "1.5B-Math-FAST-RLOO-dataDAPO-N6+18", "1.5B-Math-FAST-RLOO-dataDAPO-N8+16",
    "1.5B-Math-RLOO-Numina-N24", "1.5B-Math-RLOO-dataDAPO-N24",
    "7B-Math-DAPO-DeepScaleR-N24", "7B-Math-DAPO-dataDAPO-N24",
    "7B-Math-FAST-DAPO-DeepScaleR-N4+20", "7B-Math-FAST-DAPO-dataDAPO-N4+20",
    "7B-Math-FAST-GRPO-dataDAPO-N4+20", "7B-Math-FAST-RLOO-DeepScaleR-N4+20",
    "7B-Math-FAST-RLOO-dataDAPO-N4+20", "7B-Math-GRPO-dataDAPO-N24",
    "7B-Math-RLOO-DeepScaleR-N24", "7B-Math-RLOO-dataDAPO-N24",
]
SPEED_METRICS = {  # key -> (file tag, eval set)
    "val-core/MATH500-Qwen-instruct/acc/mean@1": ("MATH500-acc-mean-at-1",
                                                  "MATH500 (500 problems), greedy mean@1"),
    "val-core/math_dapo-Qwen-instruct/acc/mean@1": ("DAPO1k-acc-mean-at-1",
                                                    "DAPO-1k (1000 held-out DAPO-Math-17k "
                                                    "problems, Experiment_log.md), mean@1"),
}


def speed(run, key):
    tag, eval_set = SPEED_METRICS[key]
    size = run.split("-")[0]
    algo = run.split("-")[2] if "FAST" not in run else "SPEED-" + run.split("-")[3]
    return dict(
        file=f"speedrl__{slug(run)}__{tag}.csv", repo=SPEED,
        path=f"metrics_summary/{run}/processed_metrics.json", commit=SPEED_COMMIT, metric=key,
        kind="eval", model=f"Qwen2.5-Math-{size}", algorithm=f"{algo} (verl)",
        notes=f"{SPEED_NOTE} Eval set: {eval_set}.", source=SPEED,
        params={"1.5B": "1.5e9", "7B": "7e9"}[size], task="math",
        parse=lambda t, k=key: jsonl_points(t, "train_global_steps", k,
                                            "accumulated_training_time"))


PUBLIC += [speed(run, key) for key in SPEED_METRICS for run in SPEED_RUNS]

# -- Cognitive behaviors (Gandhi et al. 2025): Countdown accuracy of 3B models under PPO --------
COGBEH = "kanishkg/cognitive-behaviors"
COGBEH_COMMIT = "c210dd52bf67e4120e2f2f4b60f6dfd066f9d105"
COGBEH_NOTE = ("The paper's results table results/<model>_results.csv (one row per condition and "
               "checkpoint, every 10 PPO steps from step 0): column 'accuracy' = Countdown accuracy "
               "of the checkpoint; its values are multiples of 1/1024 (a few of the Qwen base_ppo "
               "rows of 1/200), i.e. the 1024-problem Countdown test split of TinyZero, on which "
               "this verl/TinyZero PPO code validates. Condition = the priming data of the SFT "
               "before RL (base_ppo: no priming; owmathqa*: continued pretraining on OpenWebMath "
               "before PPO).")
COGBEH_CONDITIONS = {
    "qwen": ("Qwen2.5-3B", ["base_ppo", "backtracking_backward", "only_backtracking", "human_cot",
                            "backtracking_verification", "no_positive_all_strategies",
                            "all_strategies", "empty_cot", "dots", "backtracking_subgoal"]),
    "llama": ("Llama-3.2-3B", ["backtracking_subgoal", "backtracking_backward",
                               "only_backtracking", "backtracking_verification",
                               "no_positive_all_strategies", "base_ppo", "all_strategies", "dots",
                               "empty_cot", "human_cot", "owmathqa2_ppo", "owmathqa_none_ppo1"]),
}


def cogbeh(family, condition):
    model = COGBEH_CONDITIONS[family][0]
    note = COGBEH_NOTE
    if (family, condition) == ("qwen", "human_cot"):
        note += " The table holds this condition twice, back to back, identical: taken once."
    return dict(
        file=f"cogbeh__{model}__{slug(condition)}__countdown-accuracy.csv", repo=COGBEH,
        path=f"results/{family}_results.csv", commit=COGBEH_COMMIT,
        metric=f"accuracy (rows with condition == {condition})", kind="eval", model=model,
        algorithm="PPO (verl/TinyZero; SFT priming before RL)", notes=note, source=COGBEH,
        params="3e9", task="game",
        parse=lambda t, c=condition: plain_csv_points(
            t, "step", "accuracy", keep=lambda r: r["condition"] == c, drop_repeats=True))


PUBLIC += [cogbeh(family, cond) for family, (_, conds) in COGBEH_CONDITIONS.items()
           for cond in conds]

# -- GRPO/REINFORCE ablations of Qwen2.5-Math-1.5B on MATH (CS336 assignment 5 style) -----------
GARG = "garg-aayush/building-from-scratch"
GARG_COMMIT = "714e4ca1f7923d9e603cf2c7567a026971cc216d"
GARG_NOTE = ("W&B history exported by the author into grpo/results/<study>/<study>_data.csv "
             "(columns run_name, metric, step, value); metric 'eval/reward' = the r1_zero reward "
             "(1 only for a correct, well-formatted answer) on 1024 MATH validation problems "
             "(max_val_examples = 1024; values are multiples of 1/1024), evaluated every 4 GRPO "
             "steps from step 0 (Qwen2.5-Math-1.5B base). A run that appears in several studies "
             "(identical values) is taken once. Algorithm from the run's config: loss_type and "
             "learning rate.")
GARG_RUNS = {  # run -> (study file, algorithm)
    "no_baseline": ("baselines", "REINFORCE without baseline, lr 3e-5"),
    "reinforce_baseline": ("baselines", "REINFORCE with group-mean baseline, lr 3e-5"),
    "no_baseline_lr1.5e-5": ("baselines", "REINFORCE without baseline, lr 1.5e-5 (stopped at "
                             "step 75 of 200)"),
    "len_norm_mean": ("length_normalization", "REINFORCE with baseline, mean length norm"),
    "len_norm_constant": ("length_normalization", "REINFORCE with baseline, constant length "
                          "norm"),
    "len_norm_microbatch": ("length_normalization", "REINFORCE with baseline, microbatch "
                            "length norm"),
    "lr_sweep_3e-6": ("lr_sweep", "REINFORCE with baseline, lr 3e-6 (stopped at step 43 of "
                      "100)"),
    "lr_sweep_1e-5": ("lr_sweep", "REINFORCE with baseline, lr 1e-5"),
    "lr_sweep_1.5e-5": ("lr_sweep", "REINFORCE with baseline, lr 1.5e-5"),
    "lr_sweep_3e-5": ("lr_sweep", "REINFORCE with baseline, lr 3e-5"),
    "off_policy_full_e1_tb256_ga64": ("off_policy_full_sweep", "GRPO-Clip, 1 epoch per "
                                      "rollout batch, train batch 256 (the best run)"),
    "off_policy_full_e1_tb128_ga32": ("off_policy_full_sweep", "GRPO-Clip, 1 epoch, train "
                                      "batch 128"),
    "off_policy_full_e2_tb256_ga64": ("off_policy_full_sweep", "GRPO-Clip, 2 epochs, train "
                                      "batch 256"),
    "off_policy_e1_tb256_ga64": ("off_policy_sweep", "GRPO-Clip, 1 epoch, train batch 256, "
                                 "50 steps"),
    "off_policy_e1_tb128_ga32": ("off_policy_sweep", "GRPO-Clip, 1 epoch, train batch 128, "
                                 "50 steps"),
    "off_policy_e2_tb256_ga64": ("off_policy_sweep", "GRPO-Clip, 2 epochs, train batch 256, "
                                 "50 steps"),
    "off_policy_e4_tb256_ga64": ("off_policy_sweep", "GRPO-Clip, 4 epochs, train batch 256, "
                                 "50 steps"),
    "off_policy_e2_tb128_ga32": ("off_policy_sweep", "GRPO-Clip, 2 epochs, train batch 128, "
                                 "50 steps"),
    "off_policy_e4_tb64_ga16": ("off_policy_sweep", "GRPO-Clip, 4 epochs, train batch 64 "
                                "(collapses to ~0 by step 27, where it stops)"),
    "question_only_e1_tb256_ga64": ("prompt_ablation", "GRPO-Clip, question-only prompt"),
    "sft_grpo_e1_tb256_ga64": ("sft_grpo", "GRPO-Clip after SFT (stopped at step 151 of 200)"),
    "sft_grpo_e1_tb256_ga64_lr1.5e-5": ("sft_grpo", "GRPO-Clip after SFT, lr 1.5e-5 (stopped "
                                        "at step 83)"),
    "sft_grpo_e1_tb256_ga64_ckpt20": ("sft_grpo", "GRPO-Clip after SFT checkpoint 20"),
    "sft_grpo_e1_tb256_ga64_ckpt10": ("sft_grpo", "GRPO-Clip after SFT checkpoint 10"),
    "std_dev": ("std_dev", "REINFORCE with baseline, no std normalisation"),
}


GARG_FILES = {"baselines": "baselines/baseline_ablation_data.csv",
              "std_dev": "std_dev/std_dev_normalization_data.csv"}


def garg(run):
    study, algorithm = GARG_RUNS[run]
    path = "grpo/results/" + GARG_FILES.get(study, f"{study}/{study}_data.csv")
    return dict(
        file=f"garg-grpo__{slug(run)}__eval-reward.csv", repo=GARG,
        path=path, commit=GARG_COMMIT,
        metric=f"value (rows with run_name == {run} and metric == eval/reward)", kind="eval",
        model="Qwen2.5-Math-1.5B", algorithm=algorithm, notes=GARG_NOTE, source=GARG,
        params="1.5e9", task="math",
        parse=lambda t, r=run: plain_csv_points(
            t, "step", "value", keep=lambda row: row["run_name"] == r
            and row["metric"] == "eval/reward"))


PUBLIC += [garg(run) for run in GARG_RUNS]


# -- LESSER (GradAlign data selection with output-layer features): Countdown under GRPO -------
LESSER = "davidzhangsan/LESSER"
LESSER_COMMIT = "001cb231142e31b7d0a996c39ca10d4c3a54afdb"
LESSER_NOTE = ("The paper's Figure 6 data payload data/rl/expected/figure6_payload.json (the "
               "authors' record of every evaluation read from their committed verl TensorBoard "
               "files): metric_tag val-core/countdown/reward/mean@16 = 'mean correctness over "
               "sampled responses; not pass@16' on the 500 held-out countdown4_test problems x 16 "
               "responses (values are multiples of 1/8000 to float32 precision), every 5 GRPO "
               "steps; no step-0 point (the payload: the base measurement used a different "
               "split). Qwen2.5-Math-1.5B-Instruct trained on a 34,000-problem Countdown + "
               "WebInstruct + DAPO mixture, 5 rounds of 10 GRPO steps, each round on 256 problems "
               "selected by the arm's rule; a step evaluated twice after a resume keeps the later "
               "evaluation (the payload's replay rule).")
LESSER_ARMS = {  # arm -> what selects the training problems
    "prod": "LESSER (projected output-layer gradient features)",
    "full": "full policy-gradient features (GradAlign)",
    "acc": "dynamic sampling (accuracy-based)",
    "rand": "random selection",
}


def lesser(arm, seed):
    keys = ("arms", arm) if seed == 42 else ("comparisons", "arms", f"{arm}_seed{seed}")
    return dict(
        file=f"lesser__{arm}_seed{seed}__countdown-mean-at-16.csv", repo=LESSER,
        path="data/rl/expected/figure6_payload.json", commit=LESSER_COMMIT,
        metric=".".join(keys) + ".points (val-core/countdown/reward/mean@16)", kind="eval",
        model="Qwen2.5-Math-1.5B-Instruct",
        algorithm=f"GRPO (verl/GradAlign), problems selected by {LESSER_ARMS[arm]}, seed {seed}",
        notes=LESSER_NOTE, source=LESSER, params="1.5e9", task="game",
        parse=lambda t, k=keys: payload_points(t, *k))


PUBLIC += [lesser(arm, seed) for seed in (42, 43) for arm in LESSER_ARMS]


if __name__ == "__main__":
    names = [s["file"] for s in PUBLIC]
    assert len(names) == len(set(names)), "duplicate output file names"
    m = build(PUBLIC, OUT_DIR)
    kinds = {}
    for row in m:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    print(f"{len(m)} curves: {kinds}", file=sys.stderr)
