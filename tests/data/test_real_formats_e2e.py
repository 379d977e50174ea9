"""Fixtures in the upstream schemas (Polaris, DeepCoder lcbv5 / primeintellect, TACO, APPS, and
the test-program sets HumanEval (+ HumanEvalPack), MBPP full and sanitized, AceCode, KodCode),
written by hand from each dataset card, go through the loaders -> build -> prompts.parquet ->
the real sandbox: every reference solution passes (nothing dropped), and for every row a
correct answer scores 1 and a wrong one 0."""

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
    ("humaneval.jsonl", "humaneval", "code", "humaneval", {}),
    ("mbpp.jsonl", "mbpp", "code", "mbpp", {}),
    ("mbpp_sanitized.jsonl", "mbpp-sanitized", "code", "mbpp",
     {"prompt": "prompt", "setup": "test_imports"}),
    ("acecode.jsonl", "acecode", "code", "acecode", {}),
    ("kodcode.jsonl", "kodcode", "code", "kodcode", {}),
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
                                 "apps": 2, "humaneval": 4, "mbpp": 3, "mbpp-sanitized": 1,
                                 "acecode": 3, "kodcode": 3}
    path = tmp_path_factory.mktemp("e2e") / "prompts.parquet"
    write_prompts(frame, path)
    return read_prompts(path).to_dict(orient="records")


def test_correct_answers_score_one_and_wrong_ones_zero(prompts_rows):
    names = {f: (name, task) for f, name, task, _, _ in SOURCES}
    picked, completions, expect, labels = [], [], [], []
    for case in read_records(FIX / "answers.jsonl"):
        name, task = names[case["file"]]
        raw = read_records(FIX / case["file"])[case["row"]]
        problem = next(raw[k] for k in ("problem", "question", "text", "prompt") if k in raw)
        (row,) = [r for r in prompts_rows if r["source"] == name and problem in r["prompt"]]
        for kind, ok in (("correct", True), ("wrong", False)):
            picked.append(row)
            completions.append(_completion(task, case[kind]))
            expect.append(ok)
            labels.append(f"{case['file']}:{case['row']}:{kind}")
    assert len(picked) == 2 * 27
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


def test_program_rows_record_their_format(prompts_rows):
    """Each test-program row holds a canonical program spec; the prompt is built the way its
    set expects (HumanEval: the signature in a fence; MBPP: the text and one example assert;
    KodCode: the declarations to implement)."""
    from scalerl.tasks.code_tests import parse_tests
    from scalerl.tasks.loaders import HUMANEVAL_HEADER, KODCODE_DECLARATION, MBPP_EXAMPLE

    rows = {r["prompt_id"]: r for r in prompts_rows}
    humaneval = rows["humaneval-HumanEval/901"]
    spec = parse_tests(humaneval["tests"])
    assert (spec.type, spec.entry_point) == ("program", "running_max")
    assert spec.test.rstrip().endswith("check(candidate)") and "def running_max" in spec.setup
    assert humaneval["prompt"].startswith(HUMANEVAL_HEADER + "\n```python\nfrom typing")
    pack = parse_tests(rows["humaneval-Python/904"]["tests"])
    assert pack.test.count("check(") == 2  # its own call, nothing appended
    mbpp = rows["mbpp-902"]
    assert mbpp["prompt"] == ("Write a function to find the area of a circle.\n" + MBPP_EXAMPLE
                              + "\nassert math.isclose(circle_area(1), 3.141592653589793)\n")
    assert parse_tests(mbpp["tests"]).setup == "import math"
    assert parse_tests(mbpp["tests"]).entry_point == "circle_area"
    kod = rows["kodcode-Leetcode_901_I"]
    assert kod["prompt"].endswith(KODCODE_DECLARATION.format("def top_k_frequent(nums, k):"))
    assert parse_tests(kod["tests"]).entry_point == "top_k_frequent"
    assert "declarations:\ndef push(self, x):\ndef print_stack(stack):" in rows[
        "kodcode-Data_Structure_903_I"]["prompt"]
