"""The canonical code-test format and the converters from public dataset formats."""

import json

import pytest

from scalerl.tasks.code_tests import (
    TestSpecError,
    normalize_tests,
    parse_tests,
    program_tests,
    spec_type,
)


def test_parse_canonical_function_and_stdio():
    spec = parse_tests('{"type":"function","fn_name":"f","inputs":[[1],[2]],"outputs":[2,3]}')
    assert (spec.type, spec.fn_name, spec.inputs, len(spec)) == ("function", "f", ([1], [2]), 2)
    assert parse_tests(spec.to_json()) == spec
    spec = parse_tests({"type": "stdio", "inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert spec.type == "stdio" and spec.fn_name is None


@pytest.mark.parametrize("bad,msg", [
    ("not json", "not valid JSON"),
    ("[1]", "JSON object"),
    ('{"type":"x","inputs":[],"outputs":[]}', "tests.type"),
    ('{"type":"stdio","inputs":["a"],"outputs":[]}', "1 inputs but 0 outputs"),
    ('{"type":"stdio","inputs":[],"outputs":[]}', "no cases"),
    ('{"type":"function","inputs":[[1]],"outputs":[1]}', "fn_name"),
    ('{"type":"function","fn_name":"f","inputs":[1],"outputs":[1]}', "list of arguments"),
    ('{"type":"stdio","inputs":[1],"outputs":["1"]}', "must be a string"),
])
def test_parse_rejects_malformed(bad, msg):
    with pytest.raises(TestSpecError, match=msg):
        parse_tests(bad)


def test_normalize_apps_taco():
    spec = normalize_tests({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
    assert spec.type == "stdio" and spec.outputs == ("3\n", "7\n")
    spec = normalize_tests(json.dumps({"inputs": [[1, 2]], "outputs": [3], "fn_name": "add"}))
    assert (spec.type, spec.fn_name, spec.inputs) == ("function", "add", ([1, 2],))
    spec = normalize_tests({"inputs": [["a", "b"]], "outputs": [["c"]]})  # list of lines
    assert spec.inputs == ("a\nb",) and spec.outputs == ("c",)


def test_normalize_livecodebench_and_deepcoder():
    lcb = [{"input": "[1,2]\n3", "output": "4", "testtype": "functional"}]
    spec = normalize_tests(json.dumps(lcb), fn_name="twoSum")
    assert (spec.fn_name, spec.inputs, spec.outputs) == ("twoSum", ([[1, 2], 3],), (4,))
    prime = [{"type": "stdin_stdout", "input": "5\n", "output": "25\n"}]
    assert normalize_tests(prime).inputs == ("5\n",)
    call = [{"type": "function_call", "fn_name": "sq", "input": [3], "output": [9]}]
    assert normalize_tests(call).outputs == ([9],)
    with pytest.raises(TestSpecError, match="mix"):
        normalize_tests(lcb + [{"input": "1", "output": "1", "testtype": "stdin"}], "f")
    with pytest.raises(TestSpecError, match="unrecognised"):
        normalize_tests(42)


# ---- test programs (HumanEval / MBPP / AceCode / KodCode) ----------------------------------

def test_program_spec_round_trips_and_validates():
    spec = parse_tests({"type": "program", "test": "assert f(1) == 2\n", "setup": "import math",
                        "entry_point": "f"})
    assert (spec.type, spec.entry_point, spec.setup, spec.inputs) == ("program", "f",
                                                                      "import math", ())
    assert parse_tests(spec.to_json()) == spec
    assert spec_type(spec.to_json()) == "program" and spec_type(None) == "answer"
    assert spec_type('{"type":"stdio","inputs":["1"],"outputs":["1"]}') == "stdio"


@pytest.mark.parametrize("bad,msg", [
    ({"type": "program"}, "non-empty string 'test'"),
    ({"type": "program", "test": "assert (\n"}, "'test' does not compile"),
    ({"type": "program", "test": "assert f()", "setup": "def ("}, "'setup' does not compile"),
    ({"type": "program", "test": "assert f()", "entry_point": "not valid"}, "identifier"),
    ({"type": "program", "test": "x = f()\nprint(x)\n"}, "would pass any program"),
    ({"type": "program", "test": "import numpy as np\nassert np.allclose(f(), 1)"},
     "imports 'numpy', which is not in the standard library"),
    ({"type": "program", "test": "from scipy import stats\nassert f()"}, "'scipy'"),
])
def test_program_spec_rejects(bad, msg):
    with pytest.raises(TestSpecError, match=msg):
        parse_tests(bad)


def test_program_tests_may_import_the_stdlib_solution_and_pytest():
    test = ("import math, collections.abc\nimport pytest\nfrom solution import f\n"
            "from unittest import TestCase\n\nclass T(TestCase):\n"
            "    def test_f(self):\n        self.assertTrue(f())\n")
    assert parse_tests({"type": "program", "test": test}).test == test


def test_humaneval_appends_check_unless_the_test_calls_it():
    spec = program_tests("humaneval", "def check(candidate):\n    assert candidate(1) == 2\n",
                         setup="def f(x):\n    '''doc'''\n", entry_point="f")
    assert spec.test.endswith("\n\n\ncheck(candidate)\n") and spec.entry_point == "f"
    pack = "def check(f):\n    assert f(1) == 2\n\ncheck(f)"
    assert program_tests("humaneval", pack, entry_point="f").test == pack + "\n"
    with pytest.raises(TestSpecError, match="entry_point"):
        program_tests("humaneval", pack)


def test_mbpp_and_acecode_asserts_and_their_entry_point():
    spec = program_tests("mbpp", ["assert math.isclose(area(1), 3.14)", "assert area(0) == 0"],
                         setup="import math")
    assert spec.test == "assert math.isclose(area(1), 3.14)\nassert area(0) == 0\n"
    assert (spec.setup, spec.entry_point) == ("import math", "area")
    # sanitized MBPP: test_imports is a list of import lines; a JSON-encoded list also works
    spec = program_tests("mbpp", '["assert sorted(g(3)) == [1]"]', setup=["import math",
                                                                        "import re"])
    assert (spec.setup, spec.entry_point) == ("import math\nimport re", "g")
    assert program_tests("acecode", ["assert h('a') is True"]).entry_point == "h"
    with pytest.raises(TestSpecError, match="empty"):
        program_tests("acecode", [])
    with pytest.raises(TestSpecError, match="list of strings"):
        program_tests("mbpp", [1, 2])


def test_kodcode_is_pytest_code_as_given():
    code = "from solution import f\n\ndef test_f():\n    assert f() == 1\n"
    spec = program_tests("kodcode", code)
    assert (spec.test, spec.entry_point) == (code, None)
    with pytest.raises(ValueError, match="unknown test-program style"):
        program_tests("bigcodebench", code)
