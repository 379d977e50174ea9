"""The canonical code-test format and the converters from public dataset formats."""

import json

import pytest

from scalerl.tasks.code_tests import TestSpecError, normalize_tests, parse_tests


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
