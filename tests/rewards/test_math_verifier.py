"""Math grading: answer extraction, the integer fast path, math-verify equivalences, timeouts."""

import time

import pytest

from scalerl.rewards import MathVerifierPool, check_math, check_math_many, score, score_many
from scalerl.rewards.extract import answer_part, extract_code, last_boxed, plain_int
from scalerl.rewards.math_verifier import fast_check


@pytest.fixture(scope="module")
def pool():
    p = MathVerifierPool(workers=2, timeout_s=4.0)
    yield p
    p.close()


def test_answer_part_takes_text_after_last_think_close():
    assert answer_part("<think>a</think>b</think>c") == "c"
    assert answer_part("<think>never closed \\boxed{3}") is None


def test_last_boxed_balances_braces_and_takes_the_last():
    assert last_boxed(r"\boxed{1} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"\fbox{7}") == "7"
    assert last_boxed(r"\boxed{3") is None
    assert last_boxed("no box") is None


def test_extract_code_takes_the_last_fenced_block():
    text = "```python\nA\n```\nand\n```py\nB\n```"
    assert extract_code(text) == "B\n"
    assert extract_code("def f(): pass") is None


@pytest.mark.parametrize("text,value", [
    ("432", 432), ("-7", -7), ("+7", 7), ("1,000", 1000), ("1\\,000", 1000), ("1{,}000", 1000),
    ("12 345", 12345), ("$42$", 42), ("007", 7),
    ("1,2", None), ("12,34", None), ("1 2", None), ("1/2", None), ("0.5", None), ("x", None),
])
def test_plain_int(text, value):
    assert plain_int(text) == value


def test_fast_path_decides_integers_without_workers():
    assert fast_check("1,000", "1000") == (True, "integer: equal")
    assert fast_check("432", "431") == (False, "integer: not equal")
    assert fast_check("1/2", "0.5") is None  # not integers: left to math-verify
    assert fast_check("5", "  ")[0] is False


@pytest.mark.parametrize("gold,pred,equal", [
    (r"\frac{1}{2}", "0.5", True),
    ("0.5", r"\frac{1}{2}", True),
    (r"\frac{1}{2}", "1/2", True),
    (r"\frac{1}{2}", r"\dfrac{1}{2}", True),
    ("1000", "1,000", True),
    (r"\sqrt{2}/2", r"\frac{\sqrt{2}}{2}", True),
    ("432", "432.0", True),
    ("3", "x=3", True),
    (r"\pi", r"\pi", True),
    (r"\frac{1}{3}", "0.33", False),
    ("432", "4a2", False),
    ("1,2", "12", False),
])
def test_math_verify_equivalences(pool, gold, pred, equal):
    ok, detail = check_math(gold, pred, pool)
    assert ok is equal, detail


def test_pathological_input_returns_incorrect_within_the_timeout(pool):
    # 9^(9^(9^(9^9))) hangs a naive sympy evaluation (measured: > 10 s without a timeout)
    t0 = time.monotonic()
    ok, detail = check_math("2", r"9^{9^{9^{9^9}}}", pool)
    # bounded by the timeout, with room for a worker restart on a loaded 2-core machine
    assert not ok and time.monotonic() - t0 < pool.timeout_s + 10.0, detail


def test_hard_deadline_kills_a_stuck_worker_and_the_pool_recovers():
    # a 0.5 s deadline is shorter than math-verify's 1 s SIGALRM granularity, so the parent's
    # kill is what ends this request
    p = MathVerifierPool(workers=1, timeout_s=0.5)
    try:
        p.verify_many([("1", "1")])  # start-up (import) is not charged to requests
        t0 = time.monotonic()
        (ok, detail), = p.verify_many([("2", r"\frac{9^{9^{9}}}{9^{9^{9}}}")])
        waited = time.monotonic() - t0
        # the parent's kill ended it (a timeout verdict, one restart); the time bound only
        # guards against a hang, with room for a loaded machine
        assert not ok and detail.startswith("timeout") and waited < 30.0, (detail, waited)
        assert p.stats["timeouts"] == 1 and p.stats["restarts"] == 1
        assert p.verify_many([(r"\frac{1}{2}", "0.5")]) == [(True, "math-verify: equal")]
    finally:
        p.close()


def test_parse_failures_are_incorrect_and_counted(pool):
    before = dict(pool.stats)
    assert pool.verify_many([("1", r"\text{}")]) == [(False, "answer does not parse")]
    assert pool.verify_many([(r"\text{}", "1")]) == [(False, "reference answer does not parse")]
    assert pool.stats["failures"] - before["failures"] == 2
    assert pool.stats["timeouts"] == before["timeouts"]


def test_check_math_many_mixes_fast_and_slow_paths(pool):
    pairs = [("12", "12"), (r"\frac{1}{2}", "0.5"), ("3", "4"), (r"\frac{2}{4}", "0.25")]
    assert [ok for ok, _ in check_math_many(pairs, pool)] == [True, True, False, False]


def test_score_math_rows(pool):
    row = {"prompt_id": "a", "task": "math", "answer": "432", "tests": None}
    good = score(row, "<think>7+5+0=12 4+8+1=13 0+3+1=4</think>\\boxed{432}", pool=pool)
    assert (good.correct, good.reward) == (True, 1.0)
    for text, why in [("<think>no close \\boxed{432}", "no </think>"),
                      ("<think>x</think>432", "no \\boxed{}"),
                      ("\\boxed{432}<think>x</think>the end", "no \\boxed{}"),
                      ("<think>x</think>\\boxed{431}", "not equal")]:
        s = score(row, text, pool=pool)
        assert (s.correct, s.reward) == (False, -1.0) and why in s.detail, (text, s.detail)


def test_score_many_keeps_order_and_validates(pool):
    rows = [{"task": "math", "answer": "1/2"}, {"task": "math", "answer": "7"}]
    texts = ["</think>\\boxed{0.5}", "</think>\\boxed{8}"]
    assert [s.correct for s in score_many(rows, texts, pool=pool)] == [True, False]
    with pytest.raises(ValueError, match="2 task rows but 1"):
        score_many(rows, texts[:1])
    with pytest.raises(ValueError, match="task must be"):
        score({"task": "poetry"}, "x")
    with pytest.raises(ValueError, match="no 'answer'"):
        score({"task": "math", "answer": None}, "</think>\\boxed{1}")


def test_verdicts_are_cached_but_timeouts_are_not(pool):
    before = pool.stats["requests"]
    pair = (r"\frac{3}{7}", r"\frac{6}{14}")
    assert pool.verify_many([pair, pair]) == [(True, "math-verify: equal")] * 2
    assert pool.verify_many([pair]) == [(True, "math-verify: equal")]
    assert pool.stats["requests"] - before == 1
