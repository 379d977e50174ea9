"""Where verdicts are computed (`scalerl.rl.grading`): the generator's grader and `grade`."""

import pandas as pd
import pytest

import scalerl.rl.grading as grading
from scalerl.rewards import Score
from scalerl.rl.grading import GeneratorGrader, grade
from scalerl.rollout.base import Completion, Request
from scalerl.tasks.synthetic import generate_code, generate_math


@pytest.fixture
def examples(tmp_path):
    math, code = generate_math(2, seed=3, difficulties=(1,)), generate_code(1, seed=3,
                                                                          difficulties=(1,))
    rows = [{**ex.to_row(), "split": "train"} for ex in (*math, *code)]
    path = tmp_path / "prompts.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path, math, code[0]


def _completion(prompt_id: str, text: str, score=None) -> Completion:
    return Completion(Request(prompt_id, (1,)), [1], [0.0], [True], [0], text, "stop", False,
                      False, score=score)


def _count_score_many(monkeypatch) -> list[int]:
    """Batch sizes of every score_many call the grading module makes (real grading kept)."""
    sizes: list[int] = []
    real = grading.score_many

    def counting(rows, texts, **kwargs):
        sizes.append(len(texts))
        return real(rows, texts, **kwargs)

    monkeypatch.setattr(grading, "score_many", counting)
    return sizes


def test_generator_grader_grades_math_and_code_and_checks_each_sample_once(examples,
                                                                          monkeypatch):
    path, (m0, m1), c0 = examples
    sizes = _count_score_many(monkeypatch)
    grader = GeneratorGrader(path)
    wrong = m1.solution.replace(f"{{{m1.answer}}}", f"{{{int(m1.answer) + 1}}}")
    first = grader([_completion(m0.prompt_id, m0.solution), _completion(m1.prompt_id, wrong),
                    _completion(m0.prompt_id, m0.solution)])
    assert [s.correct for s in first] == [True, False, True]
    assert [s.reward for s in first] == [1.0, -1.0, 1.0]
    assert sizes == [2]  # the duplicate sample of m0 was verified once
    # a later decode step: the cached sample is not re-run, the code sample is
    second = grader([_completion(m0.prompt_id, m0.solution), _completion(c0.prompt_id,
                                                                         c0.solution)])
    assert [s.correct for s in second] == [True, True]
    assert sizes == [2, 1]


def test_generator_grader_rejects_a_prompt_outside_its_table(examples):
    path, _, _ = examples
    with pytest.raises(KeyError, match="'nope' is not in the train split"):
        GeneratorGrader(path)([_completion("nope", "x")])


def test_generator_grader_cache_is_bounded(examples):
    path, (m0, m1), _ = examples
    grader = GeneratorGrader(path, cache_size=1)
    grader([_completion(m0.prompt_id, m0.solution), _completion(m1.prompt_id, m1.solution)])
    assert list(grader._cache) == [(m1.prompt_id, m1.solution)]  # the most recent one


class _Source:
    def __init__(self, rows):
        self.rows = rows

    def row(self, prompt_id):
        return self.rows[prompt_id]


def test_grade_keeps_generator_verdicts_and_computes_the_missing_ones(examples, monkeypatch):
    _, (m0, m1), _ = examples
    sizes = _count_score_many(monkeypatch)
    source = _Source({m.prompt_id: {**m.to_row(), "split": "train"} for m in (m0, m1)})
    # a generator's verdict is taken as it came, even one that disagrees with the verifier
    given = Score(correct=False, reward=-1.0, detail="from the generator")
    out = grade([_completion(m0.prompt_id, m0.solution, score=given),
                 _completion(m1.prompt_id, m1.solution)], source, workers=1)
    assert out[0] is given
    assert out[1].correct and sizes == [1]
    assert grade([_completion(m0.prompt_id, m0.solution, score=given)], source, 1) == [given]
    assert sizes == [1]  # nothing missing: the verifier is not called
