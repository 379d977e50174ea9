"""`evaluate_rows`: the whole eval set goes to the engine, verdicts come from worker threads,
and the rows equal those of generating everything and grading it serially."""

import pytest

from scalerl.eval.runner import evaluate_rows
from scalerl.rewards import score_many
from scalerl.rollout.base import Completion, Engine, Request
from scalerl.tasks.code_tests import spec_type
from scalerl.tasks.synthetic import generate_code, generate_math


class OutOfOrderEngine(Engine):
    """Finishes the queued requests two per step, last submitted first (a continuous-batching
    engine returns samples as they end, not in request order); texts are scripted."""

    def __init__(self, texts):
        self.texts, self.queue, self.submits = texts, [], []

    def submit(self, requests):
        self.submits.append(len(requests))
        self.queue.extend(requests)

    def step(self):
        done = []
        for req in self.queue[-2:][::-1]:
            text = self.texts[(req.prompt_id, req.sample_idx)]
            n = len(text) % 7 + 1
            done.append(Completion(req, [0] * n, [0.0] * n, [True] * n, [0] * n, text,
                                   "stop", False, n % 2 == 0))
        self.queue = self.queue[:-2]
        return done

    def num_in_flight(self):
        return len(self.queue)

    def update_weights(self, state_dict, version):
        raise NotImplementedError


@pytest.fixture
def case():
    """4 math + 2 code prompts x 4 samples: right, wrong, duplicated and unanswered texts."""
    examples = generate_math(4, seed=2, difficulties=(1, 2)) + generate_code(2, seed=2,
                                                                            difficulties=(1,))
    rows = [ex.to_row() for ex in examples]
    texts = {}
    for ex in examples:
        wrong = ("<think>x</think>\\boxed{-7}" if ex.task == "math"
                 else "```python\ndef f(x):\n    return None\n```")
        for k, text in enumerate((ex.solution, wrong, ex.solution, "<think>no answer")):
            texts[(ex.prompt_id, k)] = text
    requests = [Request(ex.prompt_id, (1, 2), sample_idx=k) for ex in examples for k in range(4)]
    return rows, texts, requests


def _serial_rows(rows, texts, requests):
    """Reference: every completion generated first, then one serial score_many call."""
    engine = OutOfOrderEngine(texts)
    completions = engine.generate(requests)
    by_id = {r["prompt_id"]: r for r in rows}
    grades = score_many([by_id[c.request.prompt_id] for c in completions],
                        [c.text for c in completions], workers=1)
    return [{"task": by_id[c.request.prompt_id]["task"],
             "test_type": spec_type(by_id[c.request.prompt_id].get("tests"))
             if by_id[c.request.prompt_id]["task"] == "code" else "answer",
             "prompt_id": c.request.prompt_id,
             "sample_idx": c.request.sample_idx, "reward": 1.0 if g.correct else -1.0,
             "correct": bool(g.correct), "n_tokens": c.n_tokens, "truncated": False,
             "interrupted": c.interrupted, "response": c.text}
            for c, g in zip(completions, grades)]


def test_threaded_grading_of_the_whole_set_equals_serial_grading(case):
    rows, texts, requests = case
    expected = _serial_rows(rows, texts, requests)
    assert {r["correct"] for r in expected} == {True, False}
    engine = OutOfOrderEngine(texts)
    out = evaluate_rows(engine, rows, requests, score_many, grade_workers=4)
    assert engine.submits == [len(requests)]  # one submission: the engine batches
    assert out == expected
    assert [(r["prompt_id"], r["sample_idx"]) for r in out] == [
        (q.prompt_id, q.sample_idx) for q in requests]  # request order, not finishing order


def test_slices_of_prompts_give_the_same_rows(case):
    rows, texts, requests = case
    engine = OutOfOrderEngine(texts)
    out = evaluate_rows(engine, rows, requests, score_many, prompts_per_batch=4,
                        grade_workers=1)
    assert engine.submits == [16, 8]  # 4 prompts x 4 samples, then the rest
    assert out == _serial_rows(rows, texts, requests)


def test_identical_samples_are_graded_once(case):
    rows, texts, requests = case
    calls = []

    def counting(task_rows, batch_texts):
        calls.append(batch_texts[0])
        return score_many(task_rows, batch_texts, workers=1)

    evaluate_rows(OutOfOrderEngine(texts), rows, requests, counting, grade_workers=2)
    assert len(calls) == len({(q.prompt_id, texts[(q.prompt_id, q.sample_idx)])
                              for q in requests}) == len(requests) - 6
