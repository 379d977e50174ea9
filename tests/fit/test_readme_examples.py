"""The README's worked examples ("Forecasting any run"), run as written.

`write_examples(folder)` writes the logs the README's commands read: `runs/`, the TensorBoard
log of two GRPO runs as verl writes them (an eval tag every 20 steps, a per-step training
reward; 400 of 600 planned steps done), and `wandb_export.csv`, a W&B chart's "Export CSV" of
the same evals. Every `scalerl ...` line of the README section is run in that folder (`scalerl
watch` with --max-polls 1, since the runs are not finished); the run names and verdicts of the
output tables shown in the README must be those printed.
"""

import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scalerl.cli import main
from scalerl.fit.curves.sigmoid import sigmoid

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Forecasting any run"
TAG = "val-core/openai/gsm8k/reward/mean@1"
RUNS = {"grpo_lr1e-6": 0.68, "grpo_lr3e-6": 0.55}  # run -> A
DONE, PLANNED = 400, 600


def evals(a: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """GSM8K accuracy every 20 steps up to DONE (1319 problems: binomial noise)."""
    steps = np.arange(0, DONE + 1, 20)
    p = sigmoid(np.maximum(steps, 1), a, 1.8, 150.0, 0.45)
    p[0] = 0.45
    return steps, np.random.default_rng(seed).binomial(1319, p) / 1319


def write_examples(folder: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    export = {}
    for i, (run, a) in enumerate(RUNS.items()):
        steps, acc = evals(a, i)
        rng = np.random.default_rng(100 + i)
        with SummaryWriter(str(folder / "runs" / run)) as w:
            for step in range(DONE + 1):
                p = sigmoid(max(step, 1), a, 1.8, 150.0, 0.45)
                w.add_scalar("critic/score/mean", rng.binomial(8, p) / 8, step)
                if step in steps:
                    w.add_scalar(TAG, float(acc[steps == step][0]), step)
        export["Step"] = steps
        for suffix in ("", "__MIN", "__MAX"):
            export[f"{run} - {TAG}{suffix}"] = acc
    pd.DataFrame(export).to_csv(folder / "wandb_export.csv", index=False)


def readme_section() -> str:
    text = README.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end if end > 0 else None]


@pytest.mark.slow  # ~20 s: five commands with 200 bootstrap replicates per fit
def test_readme_commands_run_and_print_what_it_shows(tmp_path, monkeypatch, capsys):
    write_examples(tmp_path)
    monkeypatch.chdir(tmp_path)
    section = readme_section()
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    commands = [line for block in blocks for line in block.splitlines()
                if line.startswith("scalerl ")]
    assert len(commands) >= 4, commands
    shown = re.findall(r"```text\n(.*?)```", section, flags=re.S)
    outputs = []
    for line in commands:
        argv = shlex.split(line)[1:]
        if argv[0] == "watch":
            argv += ["--max-polls", "1"]
        assert main(argv) == 0, line
        outputs.append(capsys.readouterr().out)

    def runs_and_verdicts(text):
        return [(t[0], t[-1]) for t in map(str.split, text.splitlines()) if t and t[0] in RUNS]

    assert shown
    for block in shown:  # each shown table was printed, with the same runs and verdicts
        assert runs_and_verdicts(block), block
        assert any(runs_and_verdicts(out) == runs_and_verdicts(block) for out in outputs), \
            f"README table not printed by its commands:\n{block}"
    assert (tmp_path / "watch" / "forecast.png").exists()
