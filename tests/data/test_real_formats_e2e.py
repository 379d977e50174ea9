"""Fixtures in the upstream schemas (Polaris, DeepCoder lcbv5 / primeintellect, TACO, APPS) go
through the loaders -> build -> prompts.parquet -> the real sandbox: for every row a correct
answer scores 1 and a wrong one 0."""

from pathlib import Path

import pytest

from scalerl.data import DataConfig, build_prompts, read_prompts, write_prompts
from scalerl.rewards.score import score_many
from scalerl.tasks.loaders import read_records

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"
SOURCES = [  # (file, source name, task, format, extra columns)
    ("polaris.jsonl", "polaris", "math", "polaris", {}),
    ("deepcoder_lcbv5.jsonl", "lcbv5", "code", "deepcoder", {}),
    ("deepcoder_primeintellect.jsonl", "primeintellect", "code", "deepcoder", {}),
    ("taco.jsonl", "taco", "code", "taco", {"solution": "solutions"}),
    ("apps.jsonl", "apps", "code", "apps", {"solution": "solutions"}),
]


def _config(**filters) -> DataConfig:
    return DataConfig.from_dict({
        "sources": [{"kind": "file", "path": str(FIX / f), "name": name, "task": task,
                     "format": fmt, "columns": cols} for f, name, task, fmt, cols in SOURCES],
        "val_size": 0, "filters": {"verify_workers": 1, **filters}})


def _completion(task: str, answer: str) -> str:
    if task == "math":
        return f"<think>worked out</think>\nThe answer is \\boxed{{{answer}}}."
    return f"<think>plan</think>\n```python\n{answer}```\n"


@pytest.fixture(scope="module")
def prompts_rows(tmp_path_factory):
    frame, report = build_prompts(_config())
    assert report["dropped_total"] == 0, report["dropped"]  # every reference solution passed
    assert report["sources"] == {"polaris": 4, "lcbv5": 2, "primeintellect": 2, "taco": 3,
                                 "apps": 2}
    path = tmp_path_factory.mktemp("e2e") / "prompts.parquet"
    write_prompts(frame, path)
    return read_prompts(path).to_dict(orient="records")


def test_correct_answers_score_one_and_wrong_ones_zero(prompts_rows):
    names = {f: (name, task) for f, name, task, _, _ in SOURCES}
    picked, completions, expect, labels = [], [], [], []
    for case in read_records(FIX / "answers.jsonl"):
        name, task = names[case["file"]]
        raw = read_records(FIX / case["file"])[case["row"]]
        problem = raw.get("problem", raw.get("question"))
        (row,) = [r for r in prompts_rows if r["source"] == name and r["prompt"].startswith(problem)]
        for kind, ok in (("correct", True), ("wrong", False)):
            picked.append(row)
            completions.append(_completion(task, case[kind]))
            expect.append(ok)
            labels.append(f"{case['file']}:{case['row']}:{kind}")
    assert len(picked) == 2 * 13
    scores = score_many(picked, completions, workers=1)
    got = {label: (s.correct, s.detail) for label, s in zip(labels, scores)}
    assert {k: c for k, (c, _) in got.items()} == dict(zip(labels, expect)), got
    assert [s.reward for s in scores] == [1.0 if ok else -1.0 for ok in expect]


def test_dataset_pass_rate_drives_the_difficulty_filter():
    cfg = DataConfig.from_dict({
        "sources": [{"kind": "file", "path": str(FIX / "polaris.jsonl"), "task": "math",
                     "format": "polaris"}],
        "val_size": 0,
        "filters": {"dataset_pass_rate": True, "min_pass_rate": 0.1, "max_pass_rate": 0.9}})
    frame, report = build_prompts(cfg)
    # 6/8 and 2/8 stay; 8/8 (always solved) and 0/8 (never) go
    assert sorted(frame["difficulty"]) == [2, 6] and report["dropped"]["pass_rate"] == 2
    measured = []

    def pass_rate_fn(rows):  # only rows without a recorded rate are measured: none here
        measured.append(len(rows))
        return [0.0] * len(rows)

    frame, _ = build_prompts(cfg, pass_rate_fn=pass_rate_fn)
    assert measured == [0] and len(frame) == 2
