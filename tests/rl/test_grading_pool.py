"""Grading off the decode loop (`scalerl.rl.grading`): threaded verdicts equal serial ones."""

import pandas as pd
import pytest

import scalerl.rl.grading as grading
from scalerl.rewards import score_many
from scalerl.rl.grading import GeneratorGrader, GradedStream
from scalerl.rollout.base import Completion, Request
from scalerl.tasks.synthetic import generate_code, generate_math


@pytest.fixture
def mixed(tmp_path):
    """A prompt file and 12 completions: right and wrong math and code answers, duplicates."""
    math = generate_math(3, seed=5, difficulties=(1, 2))
    code = generate_code(2, seed=5, difficulties=(1,))
    path = tmp_path / "prompts.parquet"
    pd.DataFrame([{**ex.to_row(), "split": "train"} for ex in (*math, *code)]).to_parquet(path)
    texts = []
    for ex in math:
        texts += [(ex, ex.solution), (ex, ex.solution.replace(f"{{{ex.answer}}}", "{-1}"))]
    for ex in code:
        texts += [(ex, ex.solution), (ex, "```python\ndef f(x):\n    return x\n```"),
                  (ex, ex.solution)]
    texts.append((math[0], "no answer at all"))
    completions = [Completion(Request(ex.prompt_id, (1,), sample_idx=i), [1], [0.0], [True],
                              [0], text, "stop", False, False)
                   for i, (ex, text) in enumerate(texts)]
    rows = [{**ex.to_row(), "split": "train"} for ex, _ in texts]
    return path, completions, rows


def test_threaded_verdicts_equal_serial_ones_and_run_once_per_sample(mixed, monkeypatch):
    path, completions, rows = mixed
    serial = score_many(rows, [c.text for c in completions], workers=1)
    assert {s.correct for s in serial} == {True, False}
    calls: list[tuple[str, ...]] = []
    real = grading.score_many

    def counting(task_rows, texts, **kwargs):
        calls.append(tuple(texts))
        return real(task_rows, texts, **kwargs)

    monkeypatch.setattr(grading, "score_many", counting)
    grader = GeneratorGrader(path, workers=4)
    futures = grader.submit(completions)
    assert [f.result(timeout=60) for f in futures] == serial
    n_unique = len({(c.request.prompt_id, c.text) for c in completions})
    assert len(calls) == n_unique == len(completions) - 2  # the two duplicate code samples
    assert all(len(texts) == 1 for texts in calls)
    assert [f.result() for f in grader.submit(completions)] == serial  # now from the cache
    assert len(calls) == n_unique
    assert grader(completions) == serial  # the serial path agrees
    grader.close()


def test_graded_stream_hands_back_every_completion_with_its_verdict(mixed):
    path, completions, rows = mixed
    serial = score_many(rows, [c.text for c in completions], workers=1)
    stream = GradedStream(GeneratorGrader(path, workers=3))
    stream.put(completions[:5])
    stream.put([])
    stream.put(completions[5:])
    out: list[Completion] = []
    while len(stream) or not out:
        out += stream.ready()
    stream.close()
    assert sorted(c.request.sample_idx for c in out) == list(range(len(completions)))
    by_idx = {c.request.sample_idx: c.score for c in out}
    assert [by_idx[i] for i in range(len(completions))] == serial


def test_graded_stream_with_a_plain_grader_and_errors(mixed):
    path, completions, _ = mixed
    stream = GradedStream(lambda cs: [c.text[:3] for c in cs])  # a callable without submit
    stream.put(completions[:2])
    assert [c.score for c in stream.ready()] == [completions[0].text[:3],
                                                 completions[1].text[:3]]
    bad = Completion(Request("nope", (1,)), [1], [0.0], [True], [0], "x", "stop", False, False)
    with pytest.raises(KeyError, match="'nope' is not in the train split"):
        GradedStream(GeneratorGrader(path)).put([bad])
