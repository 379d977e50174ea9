"""Code grading: stdin/stdout and function-call harnesses, comparison rules, score() for code."""

import json
import os

import pytest

from scalerl.rewards import SandboxLimits, check_code, isolation, run_python, score
from scalerl.rewards.code_verifier import same_stdout, same_value

LIMITS = SandboxLimits(wall_s=3.0, cpu_s=2, memory_mb=256)
STDIO = json.dumps({"type": "stdio", "inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", "7"]})


def test_stdio_program_passes_and_fails():
    good = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert check_code(good, STDIO, LIMITS) == (True, "passed 2/2 tests")
    ok, detail = check_code("a, b = map(int, input().split())\nprint(a - b)\n", STDIO, LIMITS)
    assert not ok and detail == "case 0: wrong answer"
    ok, detail = check_code("raise ValueError('boom')", STDIO, LIMITS)
    assert not ok and "exit code 1" in detail and "ValueError" in detail


def test_script_runs_as_main_with_stdin():
    res = run_python("import sys\nif __name__ == '__main__':\n    print(sys.stdin.read()[::-1])",
                     stdin=b"abc", limits=LIMITS)
    assert (res.returncode, res.stdout, res.timed_out) == (0, b"cba\n", False)


def test_function_tests_plain_and_leetcode_style():
    tests = json.dumps({"type": "function", "fn_name": "twoSum", "inputs": [[[2, 7, 11], 9]],
                        "outputs": [[0, 1]]})
    leet = ("class Solution:\n    def twoSum(self, nums, target):\n"
            "        seen = {}\n        for i, v in enumerate(nums):\n"
            "            if target - v in seen:\n                return (seen[target - v], i)\n"
            "            seen[v] = i\n")
    assert check_code(leet, tests, LIMITS)[0]  # a tuple return compares equal to a list
    ok, detail = check_code("def other(): pass", tests, LIMITS)
    assert not ok and detail == "function not defined"
    ok, detail = check_code("def twoSum(a, b):\n    return a[b]", tests, LIMITS)
    assert not ok and detail == "case 0: raised IndexError"
    ok, detail = check_code("def twoSum(", tests, LIMITS)
    assert not ok and "SyntaxError" in detail


def test_program_that_does_not_compile_fails_without_a_sandbox_run(monkeypatch):
    import scalerl.rewards.code_verifier as cv

    def no_run(*args, **kwargs):
        raise AssertionError("a program that does not compile must not reach the sandbox")

    monkeypatch.setattr(cv, "run_python", no_run)
    tests = json.dumps({"type": "function", "fn_name": "f", "inputs": [[1]], "outputs": [1]})
    assert check_code("def f(x):\nreturn x", tests, LIMITS) == (
        False, "IndentationError: expected an indented block after function definition on "
        "line 1 (line 2)")
    assert check_code("dpef(x):\n    return x", STDIO, LIMITS) == (
        False, "SyntaxError: invalid syntax (line 1)")
    assert cv.syntax_error("def f(x):\n    return 1x") is not None  # warning-free, error kept
    assert cv.syntax_error("def f(x):\n    return '\\d'") is None  # a warning is not an error
    with pytest.raises(AssertionError, match="must not reach"):  # compiling code does reach it
        check_code("def f(x):\n    return x", tests, LIMITS)


def test_function_call_results_are_per_case():
    tests = json.dumps({"type": "function", "fn_name": "f", "inputs": [[1], [2], [3]],
                        "outputs": [1, 4, 10]})
    ok, detail = check_code("def f(x):\n    return x * x", tests, LIMITS)
    assert not ok and detail == "case 2: wrong answer"


def test_bad_spec_is_reported_not_raised():
    assert check_code("x = 1", "{not json", LIMITS) == (False, "bad test spec: tests is not "
                                                        "valid JSON: Expecting property name "
                                                        "enclosed in double quotes: line 1 "
                                                        "column 2 (char 1)")


@pytest.mark.parametrize("got,expected,equal", [
    ([1, 2], [1, 2], True), ((1, 2), [1, 2], True), ([1, [2, (3,)]], [1, [2, [3]]], True),
    (True, 1, False), (1, True, False), (1.0, 1, True), (0.1 + 0.2, 0.3, True),
    (0.31, 0.3, False), ({1: "a"}, {"1": "a"}, True), ("1", 1, False), (None, None, True),
    ({1, 2}, [2, 1], True), ([1, 2], [1, 2, 3], False),
])
def test_same_value(got, expected, equal):
    assert same_value(got, expected) is equal


def test_same_stdout_ignores_trailing_whitespace_only():
    assert same_stdout("3 \n4\n\n", "3\n4")
    assert same_stdout("1 2  3\n", "1 2 3")  # token fallback
    assert not same_stdout("34\n", "3\n4")


def test_score_code_rows_need_a_fenced_block_after_thinking():
    row = {"prompt_id": "c", "task": "code", "answer": None,
           "tests": json.dumps({"type": "function", "fn_name": "f", "inputs": [[[1, 2]]],
                                "outputs": [[2, 1]]})}
    good = "<think>rev</think>```python\ndef f(x):\n    return x[::-1]\n```"
    assert score(row, good, limits=LIMITS).correct
    assert "no fenced code block" in score(row, "<think>a</think>def f(x): pass",
                                           limits=LIMITS).detail
    assert "no </think>" in score(row, "```python\ndef f(x):\n    return x[::-1]\n```",
                                  limits=LIMITS).detail


def test_isolation_mode_is_reported():
    expected = ("uid+namespaces+view", "uid+namespaces") if os.geteuid() == 0 else (
        "rlimits-only",)
    assert isolation() in expected


def test_score_many_runs_identical_programs_once_but_grades_each_row():
    def row(outputs):
        return {"task": "code", "tests": json.dumps(
            {"type": "function", "fn_name": "f", "inputs": [[1], [2]], "outputs": outputs})}

    text = "</think>```python\ndef f(x):\n    return 2 * x\n```"
    rows = [row([2, 4]), row([2, 4]), row([3, 6]), row([2, 4])]
    from scalerl.rewards import score_many

    got = [s.correct for s in score_many(rows, [text] * 4, workers=2, limits=LIMITS)]
    assert got == [True, True, False, True]
