"""Upstream dataset formats: Polaris "k/n" difficulty, DeepCoder starter code, TACO / APPS
`input_output` with the one-element-list convention of call-based outputs, and the
test-program sets (HumanEval, MBPP, AceCode, KodCode)."""

import json
from pathlib import Path

import pytest

from scalerl.config import ConfigError
from scalerl.data.config import SourceConfig
from scalerl.rewards.code_verifier import same_function_output
from scalerl.tasks import MalformedRowError
from scalerl.tasks.code_tests import TestSpecError, normalize_tests, parse_tests
from scalerl.tasks.loaders import (
    STARTER_HEADER,
    load_file,
    parse_difficulty,
    read_records,
    rows_to_examples,
    starter_fn_name,
    with_starter_code,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


@pytest.mark.parametrize("value,expected", [
    ("6/8", (2, 0.75)), ("8/8", (0, 1.0)), ("0/8", (8, 0.0)), (" 3 / 4 ", (1, 0.75)),
    ("1/3", (2, 1 / 3)), (3, (3, None)), ("3", (3, None)), (2.0, (2, None)),
    ("EASY", (1, None)), ("VERY_HARD", (5, None)), ("UNKNOWN_DIFFICULTY", (0, None)),
    ("interview", (2, None)), ("competition", (3, None)), (None, (0, None)), ("", (0, None)),
    ("easy", (1, None)), ("medium", (2, None)), ("hard", (3, None)),  # KodCode gpt_difficulty
])
def test_parse_difficulty(value, expected):
    difficulty, rate = parse_difficulty(value)
    assert difficulty == expected[0]
    if expected[1] is None:
        assert rate is None
    else:
        assert rate == pytest.approx(expected[1], abs=1e-12)


@pytest.mark.parametrize("value,msg", [
    ("9/8", "pass count"), ("1/0", "pass count"), ("hardest", "must be a number"),
    (True, "must be a number"), (2.5, "must be an integer"), ("6/8/8", "must be a number"),
])
def test_parse_difficulty_rejects(value, msg):
    with pytest.raises(MalformedRowError, match=msg):
        parse_difficulty(value, "polaris row 3")


def test_polaris_jsonl_gives_pass_rates():
    res = load_file(FIX / "polaris.jsonl", task="math", format="polaris", source="polaris")
    assert [e.answer for e in res.examples] == ["26", "\\frac{3}{28}", "55", "4"]
    assert [e.pass_rate for e in res.examples] == [0.75, 0.25, 1.0, 0.0]
    assert [e.difficulty for e in res.examples] == [2, 6, 0, 8]  # failed samples of 8
    assert "pass_rate" not in res.examples[0].to_row()  # not a prompts.parquet column
    # without the format the difficulty column is not read
    assert load_file(FIX / "polaris.jsonl", task="math").examples[0].pass_rate is None


def test_deepcoder_starter_code_goes_into_the_prompt():
    raw = read_records(FIX / "deepcoder_lcbv5.jsonl")
    leet, stdin = load_file(FIX / "deepcoder_lcbv5.jsonl", task="code",
                            format="deepcoder").examples
    expected_block = (f"{STARTER_HEADER}\n```python\nclass Solution:\n    def twoSum(self, nums: "
                      "List[int], target: int) -> List[int]:\n```\n")
    assert leet.prompt == raw[0]["problem"] + "\n\n" + expected_block
    assert stdin.prompt == raw[1]["problem"]  # empty starter code: no block
    spec = parse_tests(leet.tests)
    assert (spec.type, spec.fn_name, spec.unwrap_single) == ("function", "twoSum", False)
    assert spec.inputs[1] == [[3, 2, 4], 6] and spec.outputs == ([0, 1], [1, 2], [0, 1])
    assert parse_tests(stdin.tests).type == "stdio"


def test_with_starter_code_blank_and_trailing_whitespace():
    assert with_starter_code("Solve it.", "  \n\t\n") == "Solve it."
    assert with_starter_code("Solve it.\n", "\ndef f(x):\n\t") == (
        f"Solve it.\n\n{STARTER_HEADER}\n```python\ndef f(x):\n```\n")


def test_starter_fn_name():
    leet = ("# Definition for a binary tree node.\n# class TreeNode:\n#     def val(self):\n"
            "class Solution:\n    def __init__(self):\n        pass\n"
            "    def maxDepth(self, root: Optional[TreeNode]) -> int:\n        ")
    assert starter_fn_name(leet) == "maxDepth"
    assert starter_fn_name("def count_bits(n):\n\t") == "count_bits"
    assert starter_fn_name("") is None and starter_fn_name("x = 1") is None


def test_functional_cases_without_func_name_use_the_starter_code():
    cases = json.dumps([{"input": "5", "output": "25", "testtype": "functional"}])
    row = {"problem": "Square n.", "tests": cases, "metadata": {},
           "starter_code": "class Solution:\n    def square(self, n: int) -> int:\n        "}
    (ex,) = rows_to_examples([row], task="code", source="s", format="deepcoder").examples
    assert parse_tests(ex.tests).fn_name == "square"
    with pytest.raises(MalformedRowError, match="fn_name"):
        rows_to_examples([{**row, "starter_code": ""}], task="code", source="s")
    # an APPS object without fn_name is stdin/stdout, as upstream grades it
    apps = {"question": "Echo.", "input_output": '{"inputs": ["a\\n"], "outputs": ["a\\n"]}',
            "starter_code": "def helper(x):\n\t"}
    (ex,) = rows_to_examples([apps], task="code", source="s", format="apps").examples
    assert parse_tests(ex.tests).type == "stdio"


def test_primeintellect_function_calls_are_apps_wrapped():
    fn, io = load_file(FIX / "deepcoder_primeintellect.jsonl", task="code",
                       format="deepcoder").examples
    spec = parse_tests(fn.tests)
    assert (spec.fn_name, spec.unwrap_single, spec.inputs) == (
        "count_vowels", True, (["banana"], ["rhythm"], ["aeiou"]))
    assert spec.outputs == ([3], [0], [5])
    assert STARTER_HEADER in fn.prompt and "def count_vowels(s):" in fn.prompt
    assert parse_tests(io.tests).inputs == ("hello\n", "Abc\n")
    mixed = [{"type": "function_call", "fn_name": "f", "input": [1], "output": [1]},
             {"input": "1", "output": "1", "testtype": "functional"}]
    with pytest.raises(TestSpecError, match="mix 'function_call'"):
        normalize_tests(mixed, "f")


def test_taco_and_apps_input_output():
    taco = load_file(FIX / "taco.jsonl", task="code", format="taco", source="taco",
                     columns={"solution": "solutions"}).examples
    specs = [parse_tests(e.tests) for e in taco]
    assert [(s.type, s.fn_name, s.unwrap_single) for s in specs] == [
        ("function", "sorted_evens", True), ("function", "largest_gap", True),
        ("stdio", None, False)]
    assert specs[0].inputs[0] == [[3, 2, 4, 1]] and specs[0].outputs[0] == [[2, 4]]
    assert specs[1].inputs[0] == [1, 5, 3] and specs[1].outputs == ([4], [0], [5])
    assert specs[2].outputs == ("6\n20\n", "-9\n")
    assert [e.difficulty for e in taco] == [1, 2, 1]  # EASY, MEDIUM, EASY
    assert taco[1].solution.startswith("def largest_gap(a, b, c):")  # first of the JSON list
    assert "def sorted_evens(nums):" in taco[0].prompt and STARTER_HEADER not in taco[2].prompt
    apps = load_file(FIX / "apps.jsonl", task="code", format="apps", source="apps").examples
    assert [e.prompt_id for e in apps] == ["apps-4001", "apps-17"]
    assert [e.difficulty for e in apps] == [1, 2] and apps[0].solution == ""
    spec = parse_tests(apps[0].tests)
    assert (spec.fn_name, spec.unwrap_single, spec.outputs) == ("digit_sum", True,
                                                                ([0], [15], [18]))
    assert parse_tests(spec.to_json()) == spec


def test_format_and_task_must_agree():
    with pytest.raises(ValueError, match="format 'polaris' is a math dataset; set task: math"):
        rows_to_examples([], task="code", source="s", format="polaris")
    with pytest.raises(ValueError, match="unknown dataset format"):
        rows_to_examples([], task="code", source="s", format="bigcodebench")
    with pytest.raises(ConfigError, match="format: deepcoder is a code dataset; set task: code"):
        SourceConfig(kind="file", path="x.jsonl", format="deepcoder")
    with pytest.raises(TestSpecError, match="unwrap_single"):
        parse_tests({"type": "stdio", "inputs": ["1"], "outputs": ["1"], "unwrap_single": True})


@pytest.mark.parametrize("got,expected,unwrap,ok", [
    (9, [9], True, True),  # wrapped scalar (APPS / TACO)
    ([0, 1], [[0, 1]], True, True),  # wrapped list
    ((0, 1), [[0, 1]], True, True),  # tuples compare as lists
    ([[0, 1]], [[0, 1]], True, True),  # the function returned the whole list itself
    ([9], [9], True, True),  # an unwrapped one-element answer, equal as is
    ([], [[]], True, True),  # wrapped empty list
    ({1: "a"}, [{"1": "a"}], True, True),  # JSON string keys
    (8, [9], True, False),
    (1, [1, 2, 3], True, False),  # not one element: no unwrapping (upstream would accept)
    (1, [True], True, False),  # bool never equals int
    ([[9]], [9], True, False),  # no wrapping of the returned value
    (9, [9], False, False),  # LiveCodeBench outputs are plain values
    ([9], [9], False, True),
])
def test_unwrap_rule(got, expected, unwrap, ok):
    assert same_function_output(got, expected, unwrap) is ok


def test_typing_prelude_only_for_programs_using_typing_names():
    from scalerl.rewards.code_verifier import FUNCTION_PRELUDE, _with_prelude

    plain = "def f(x):\n    return Counter_ish(x)  # no typing name\n"
    assert _with_prelude(plain) == plain
    leet = "class Solution:\n    def f(self, xs: List[int]) -> Optional[int]:\n        pass\n"
    assert _with_prelude(leet) == FUNCTION_PRELUDE + leet


def test_test_program_formats_from_their_fixtures():
    """The hand-written rows of each card's layout become program specs and prompts (the
    sandbox side is tests/data/test_real_formats_e2e.py)."""
    ex = load_file(FIX / "humaneval.jsonl", task="code", format="humaneval").examples
    assert [e.prompt_id for e in ex] == ["humaneval-HumanEval/901", "humaneval-HumanEval/902",
                                         "humaneval-HumanEval/903", "humaneval-Python/904"]
    spec = parse_tests(ex[1].tests)
    assert spec.setup.lstrip().startswith("def encode_rot") and spec.entry_point == "decode_rot"
    assert ex[1].solution.startswith(spec.setup) and ex[1].solution.endswith("% 26) + ord(\"a\")) for ch in s])\n")
    mbpp = load_file(FIX / "mbpp.jsonl", task="code", format="mbpp").examples
    assert mbpp[2].solution.startswith("def second_largest(nums):\r\n")
    assert "-1, -2" not in parse_tests(mbpp[2].tests).test  # challenge tests are not graded
    kod = load_file(FIX / "kodcode.jsonl", task="code", format="kodcode").examples
    assert [e.difficulty for e in kod] == [1, 2, 3]  # gpt_difficulty easy / medium / hard
    ace = load_file(FIX / "acecode.jsonl", task="code", format="acecode").examples
    assert ace[0].prompt.startswith("You are tasked with") and ace[0].solution == ""
    assert ace[1].solution.startswith("Here is a solution:")  # the inference with pass_rate 1


def test_test_program_rows_from_parquet_list_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = read_records(FIX / "mbpp.jsonl")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mbpp.parquet")
    ex = load_file(tmp_path / "mbpp.parquet", task="code", format="mbpp").examples
    assert [parse_tests(e.tests).test for e in ex] == [
        parse_tests(e.tests).test for e in load_file(FIX / "mbpp.jsonl", task="code",
                                                     format="mbpp").examples]


def test_rows_whose_tests_need_third_party_packages_are_malformed():
    """EvalPlus-style tests that import numpy cannot run in the sandbox (standard library
    only): the row is an error naming it, or skipped with skip_malformed."""
    row = {"task_id": "HumanEval/0", "prompt": "def f(x):\n    '''doc'''\n",
           "canonical_solution": "    return x\n", "entry_point": "f",
           "test": "import numpy as np\n\ndef check(candidate):\n    assert np.allclose(candidate(1), 1)\n"}
    with pytest.raises(MalformedRowError, match=r"s row 0: field 'tests'.*'numpy'"):
        rows_to_examples([row], task="code", source="s", format="humaneval")
    result = rows_to_examples([row], task="code", source="s", format="humaneval",
                              skip_malformed=True)
    assert result.examples == [] and "numpy" in result.skipped[0]
