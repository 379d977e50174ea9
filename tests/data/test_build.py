"""`build_prompts` / `scalerl data`: filters with per-reason counts, split, atomic output."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scalerl.cli import main
from scalerl.config import ConfigError
from scalerl.data import (
    PROMPT_COLUMNS,
    DataConfig,
    build_prompts,
    prompts_metadata,
    read_prompts,
)
from scalerl.data.filters import allocate, is_contaminated, ngram_index, split_by_hash
from scalerl.tasks import MalformedRowError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "data"
SYNTH = {"sources": [{"kind": "synthetic_math", "n": 300, "seed": 1},
                     {"kind": "synthetic_code", "n": 16, "seed": 1}], "val_size": 40}


def cfg(**data) -> DataConfig:
    return DataConfig.from_dict(data)


def test_synthetic_build_is_deterministic_and_split_exactly():
    frame, report = build_prompts(cfg(**SYNTH))
    again, _ = build_prompts(cfg(**SYNTH))
    assert frame.equals(again)
    assert tuple(frame.columns) == PROMPT_COLUMNS
    assert report["output_rows"]["val"] == 40 == (frame["split"] == "val").sum()
    assert frame["prompt"].is_unique and frame["prompt_id"].is_unique
    assert set(frame["task"]) == {"math", "code"}
    # every source holds val rows in proportion to its size (largest remainder)
    sizes = frame.groupby("source").size()
    assert report["input_rows"] == 316
    assert report["input_rows"] - report["dropped_total"] == len(frame) == sizes.sum()
    code = frame[frame["task"] == "code"].iloc[0]
    assert pd.isna(code["answer"]) and json.loads(code["tests"])["type"] == "function"


def test_exhausted_generator_space_is_deduplicated():
    # 1-digit additions: only 10 x 10 = 100 distinct prompts exist
    src = [{"kind": "synthetic_math", "n": 150, "families": ["add"], "difficulties": [1]}]
    frame, report = build_prompts(cfg(sources=src, val_size=0))
    assert (len(frame), report["dropped"]["duplicate"]) == (100, 50)


def test_a_different_split_seed_changes_only_the_assignment():
    a, _ = build_prompts(cfg(**SYNTH))
    b, _ = build_prompts(cfg(**{**SYNTH, "split_seed": 5}))
    assert set(a["prompt_id"]) == set(b["prompt_id"]) and not a["split"].equals(b["split"])


def test_file_sources_drop_duplicates_unparseable_and_contaminated():
    c = cfg(sources=[{"kind": "file", "task": "math", "path": str(FIX / "polaris_small.jsonl")}],
            val_size=0, filters={"eval_sets": [str(FIX / "eval_prompts.jsonl")]})
    frame, report = build_prompts(c)
    d = report["dropped"]
    # row 5 repeats row 4 up to case/whitespace; "\frac{" does not parse; the divisors question
    # is in the eval set
    assert (d["duplicate"], d["answer_unparseable"], d["contaminated"]) == (1, 1, 1)
    assert len(frame) == 5 and not frame["prompt"].str.contains("divisors").any()


def test_code_reference_solutions_must_pass_their_tests():
    c = cfg(sources=[{"kind": "file", "task": "code", "path": str(FIX / "deepcoder_small.jsonl"),
                      "columns": {"solution": "solution"}}], val_size=1)
    frame, report = build_prompts(c)
    assert report["dropped"]["solution_fails"] == 1  # prints the input instead of reversing it
    assert len(frame) == 4 and not frame["prompt"].str.contains("reversed").any()


def test_train_rows_sharing_ngrams_with_val_are_dropped(tmp_path):
    base = "a train prompt with a long shared stretch of words that goes on and on"
    rows = [{"problem": base + " variant one", "answer": "1"},
            {"problem": base + " variant two", "answer": "2"}]
    path = tmp_path / "near.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    src = [{"kind": "file", "task": "math", "path": str(path)}]
    frame, report = build_prompts(cfg(sources=src, val_size=1))
    assert report["dropped"]["contaminated"] == 1 and list(frame["split"]) == ["val"]
    frame, report = build_prompts(cfg(sources=src, val_size=1, filters={"ngram_n": 20}))
    assert report["dropped"]["contaminated"] == 0 and len(frame) == 2


def test_malformed_rows_fail_or_are_counted():
    src = [{"kind": "file", "task": "math", "path": str(FIX / "malformed.jsonl")}]
    with pytest.raises(MalformedRowError, match="row 1"):
        build_prompts(cfg(sources=src, val_size=0))
    frame, report = build_prompts(cfg(sources=src, val_size=0, skip_malformed=True))
    assert report["dropped"]["malformed"] == 2 and len(frame) == 2
    assert len(report["malformed_examples"]) == 2


def test_prompt_length_and_pass_rate_hook():
    src = [{"kind": "synthetic_math", "n": 40, "seed": 3, "families": ["add"],
            "difficulties": [3, 4]}]
    frame, report = build_prompts(cfg(sources=src, val_size=0,
                                      filters={"max_prompt_chars": 8}))
    assert report["dropped"]["prompt_length"] > 0 and frame["prompt"].str.len().max() <= 8

    def pass_rate(rows):  # pretend 3-digit problems are solved half the time, 4-digit never
        return [0.5 if r["difficulty"] == 3 else 0.0 for r in rows]

    frame, report = build_prompts(
        cfg(sources=src, val_size=4, filters={"min_pass_rate": 0.1, "max_pass_rate": 0.9}),
        pass_rate_fn=pass_rate)
    train = frame[frame["split"] == "train"]
    assert set(train["difficulty"]) == {3} and report["dropped"]["pass_rate"] > 0
    assert (frame["split"] == "val").sum() == 4  # val is never difficulty-filtered


def test_config_errors_are_clear():
    with pytest.raises(ConfigError, match="path is required"):
        cfg(sources=[{"kind": "file"}])
    with pytest.raises(ConfigError, match="min_pass_rate"):
        cfg(filters={"min_pass_rate": 0.8, "max_pass_rate": 0.2})
    with pytest.raises(ValueError, match="val_size 500 exceeds"):
        build_prompts(cfg(sources=[{"kind": "synthetic_math", "n": 10}], val_size=500))


def test_filter_helpers_by_hand():
    assert allocate(200, [4000, 1000]) == [160, 40]
    assert allocate(2, [1, 1, 1]) == [1, 1, 0]  # ties go to the earlier group
    split = split_by_hash(["a", "b", "c", "d"], ["x", "x", "y", "y"], 2, seed=0)
    assert split.count("val") == 2 and split[:2].count("val") == 1
    index = ngram_index(["47+385=", "one two three four five six"], n=4)
    assert is_contaminated("47+385=", index) and not is_contaminated("47+386=", index)
    assert is_contaminated("zero two three four five", index)  # shares "two three four five"
    assert is_contaminated("three four", index)  # a short text inside a reference
    assert not is_contaminated("two four", index)


def test_cli_writes_parquet_and_report_atomically(tmp_path, capsys):
    config = tmp_path / "data.yaml"
    config.write_text(yaml.safe_dump({"sources": [{"kind": "synthetic_math", "n": 60}],
                                      "val_size": 10}))
    out, rep = tmp_path / "out" / "prompts.parquet", tmp_path / "out" / "report.json"
    assert main(["data", "--config", str(config), "--out", str(out), "--report", str(rep)]) == 0
    frame = read_prompts(out)
    assert len(read_prompts(out, split="val")) == 10 and len(frame) > 10
    report = json.loads(rep.read_text())
    assert report["output_rows"]["total"] == len(frame)
    assert prompts_metadata(out)["config_hash"] == report["config_hash"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["prompts.parquet", "report.json"]
    config.write_text("sources: [{kind: nonsense}]\n")
    assert main(["data", "--config", str(config), "--out", str(out)]) == 2
    assert "nonsense" in capsys.readouterr().err
