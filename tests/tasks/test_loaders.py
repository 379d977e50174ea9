"""Loaders of real datasets from local files, with column mappings and malformed rows."""

import json
from pathlib import Path

import pytest

from scalerl.tasks import MalformedRowError
from scalerl.tasks.code_tests import parse_tests
from scalerl.tasks.loaders import load_file, load_hub, read_records, rows_to_examples

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "data"


def test_polaris_style_jsonl():
    res = load_file(FIX / "polaris_small.jsonl", task="math",
                    columns={"difficulty": "difficulty"})
    assert len(res.examples) == 8 and res.skipped == []
    first = res.examples[0]
    assert (first.task, first.source, first.answer, first.difficulty) == (
        "math", "polaris_small", "\\frac{3}{4}", 3)  # "3" (a string) is accepted as 3
    assert first.tests is None and first.solution == ""
    assert load_file(FIX / "polaris_small.jsonl", task="math").examples[0].difficulty == 0


def test_parquet_with_column_mapping_and_ids():
    res = load_file(FIX / "math_small.parquet", task="math", source="mine",
                    columns={"prompt": "question", "answer": "final", "id": "uid"})
    assert [e.prompt_id for e in res.examples] == ["mine-q1", "mine-q2", "mine-q3"]
    assert res.examples[1].answer == "\\frac{3}{4}"


def test_deepcoder_style_code_rows_are_normalised():
    res = load_file(FIX / "deepcoder_small.jsonl", task="code",
                    columns={"solution": "solution"})
    specs = [parse_tests(e.tests) for e in res.examples]
    assert [s.type for s in specs] == ["stdio", "function", "function", "stdio", "stdio"]
    assert specs[1].fn_name == "twoSum" and specs[1].inputs[0] == [[2, 7, 11, 15], 9]
    assert specs[2].fn_name == "square" and specs[2].outputs == (9, 16)
    assert res.examples[0].solution.startswith("a, b =") and res.examples[4].solution == ""


def test_malformed_rows_error_names_row_and_field_or_are_skipped():
    with pytest.raises(MalformedRowError, match=r"malformed row 1: missing column 'answer'"):
        load_file(FIX / "malformed.jsonl", task="math")
    res = load_file(FIX / "malformed.jsonl", task="math", skip_malformed=True)
    assert [e.answer for e in res.examples] == ["4", "6"]
    assert len(res.skipped) == 2 and "row 2: field 'prompt'" in res.skipped[1]


def test_bad_values_and_mappings():
    with pytest.raises(MalformedRowError, match="'difficulty' must be a number"):
        rows_to_examples([{"problem": "p", "answer": "1", "difficulty": "tough"}], task="math",
                         source="s", columns={"difficulty": "difficulty"})
    with pytest.raises(MalformedRowError, match="field 'tests'"):
        rows_to_examples([{"problem": "p", "tests": "[1, 2]"}], task="code", source="s")
    with pytest.raises(ValueError, match="unknown column-mapping"):
        rows_to_examples([], task="math", source="s", columns={"question": "q"})
    with pytest.raises(ValueError, match="unsupported file type"):
        read_records(__file__)
    with pytest.raises(FileNotFoundError):
        read_records(FIX / "nope.jsonl")


def test_limit_and_json_list(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"problem": f"q{i}", "answer": str(i)} for i in range(5)]))
    assert len(load_file(path, task="math", limit=2).examples) == 2


def test_hub_needs_the_datasets_package(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(ImportError, match="pip install datasets"):
        load_hub("org/name", task="math")
