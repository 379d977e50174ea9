"""The canonical hidden-test format of code tasks, and converters from public dataset formats.

Canonical (the `tests` column of prompts.parquet, a JSON string), one of:
- `{"type": "function", "fn_name": "f", "inputs": [[arg, ...], ...], "outputs": [value, ...]}`:
  call `fn_name(*args)` (or `Solution().fn_name(*args)`, LeetCode style) and compare the return
  value with the output (plain JSON data; tuples compare as lists). With `"unwrap_single":
  true` (APPS / TACO convention, below) a one-element list output `[v]` also accepts `v`;
- `{"type": "stdio", "inputs": ["stdin text", ...], "outputs": ["expected stdout", ...]}`:
  run the program with the input on stdin and compare stdout line by line, ignoring trailing
  whitespace (then, as a fallback, token by token).

`normalize_tests(raw, fn_name=None)` accepts the formats found in public code-RL datasets:
- APPS / TACO (`input_output` column, also DeepCoder's taco subset):
  `{"inputs": [...], "outputs": [...], "fn_name": optional}`. With `fn_name` (call-based) each
  input is the argument list and upstream wraps each expected return value in a one-element
  list (`"outputs": [[9], [[0, 1]]]` for returns `9` and `[0, 1]`); the upstream grader (APPS
  `testing_util.run_test`, reused by TACO and rllm) passes a case when the returned value equals
  `outputs[i]` or, `outputs[i]` being a list, `outputs[i][0]`. Such specs get
  `unwrap_single: true` (see `scalerl.rewards.code_verifier.same_function_output`); without
  `fn_name` the inputs / outputs are stdin / stdout texts (a list of lines is joined);
- LiveCodeBench / DeepCoder (lcbv5): a list of `{"input", "output", "testtype": "stdin" |
  "functional"}`, functional inputs being newline-separated JSON arguments, with the function
  name passed separately (DeepCoder `metadata.func_name`);
- DeepCoder (primeintellect): a list of `{"type": "stdin_stdout" | "function_call", "input",
  "output", "fn_name"?}`; function_call outputs follow the APPS convention (graded upstream by
  the same TACO runner), so they also get `unwrap_single: true`. LiveCodeBench functional
  outputs are plain JSON values and do not;
- the canonical format itself.

Deliberately left out: special judges (floating tolerance per problem, multiple valid answers)
and non-Python languages.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

__all__ = ["TestSpec", "TestSpecError", "parse_tests", "normalize_tests"]


class TestSpecError(ValueError):
    """A test specification is malformed; the message says which part."""

    __test__ = False  # not a pytest test class


@dataclasses.dataclass(frozen=True)
class TestSpec:
    """Parsed canonical tests."""

    __test__ = False

    type: Literal["function", "stdio"]
    inputs: tuple  # function: tuple of argument lists; stdio: tuple of str
    outputs: tuple
    fn_name: str | None = None
    unwrap_single: bool = False  # function: a one-element list output [v] also accepts v

    def to_json(self) -> str:
        data: dict[str, Any] = {"type": self.type, "inputs": list(self.inputs),
                                "outputs": list(self.outputs)}
        if self.fn_name is not None:
            data["fn_name"] = self.fn_name
        if self.unwrap_single:
            data["unwrap_single"] = True
        return json.dumps(data, separators=(",", ":"))

    def __len__(self) -> int:
        return len(self.inputs)


def parse_tests(tests: str | dict) -> TestSpec:
    """Parse and validate the canonical JSON test spec."""
    if isinstance(tests, str):
        try:
            data = json.loads(tests)
        except json.JSONDecodeError as err:
            raise TestSpecError(f"tests is not valid JSON: {err}") from None
    else:
        data = tests
    if not isinstance(data, dict):
        raise TestSpecError(f"tests must be a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind not in ("function", "stdio"):
        raise TestSpecError(f"tests.type must be 'function' or 'stdio', got {kind!r}")
    inputs, outputs = data.get("inputs"), data.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise TestSpecError("tests.inputs and tests.outputs must be lists")
    if len(inputs) != len(outputs):
        raise TestSpecError(f"tests has {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise TestSpecError("tests has no cases")
    fn_name = data.get("fn_name")
    unwrap = data.get("unwrap_single", False)
    if not isinstance(unwrap, bool) or (unwrap and kind != "function"):
        raise TestSpecError(f"tests.unwrap_single must be a bool, and true only for function "
                            f"tests; got {unwrap!r} for {kind} tests")
    if kind == "function":
        if not isinstance(fn_name, str) or not fn_name.isidentifier():
            raise TestSpecError(f"function tests need an identifier fn_name, got {fn_name!r}")
        if not all(isinstance(a, list) for a in inputs):
            raise TestSpecError("function tests: every input must be a list of arguments")
    elif not all(isinstance(x, str) for x in inputs + outputs):
        raise TestSpecError("stdio tests: every input and output must be a string")
    return TestSpec(type=kind, inputs=tuple(inputs), outputs=tuple(outputs), fn_name=fn_name,
                    unwrap_single=unwrap)


def _json_lines(text: str) -> list:
    """LiveCodeBench functional input: one JSON value per line."""
    try:
        return [json.loads(line) for line in text.split("\n") if line.strip()]
    except json.JSONDecodeError as err:
        raise TestSpecError(f"functional test input is not JSON lines: {err}") from None


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise TestSpecError(f"functional test output is not JSON: {value[:60]!r}") from None
    return value


def _from_case_list(cases: list, fn_name: str | None, starter_fn: str | None) -> TestSpec:
    stdio_in, stdio_out, fn_in, fn_out = [], [], [], []
    wrapped = set()  # "function_call" (APPS convention) / "functional" (plain LiveCodeBench)
    for i, case in enumerate(cases):
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise TestSpecError(f"test case {i} needs 'input' and 'output' keys, got {case!r:.80}")
        kind = case.get("testtype", case.get("type", "stdin"))
        if kind in ("stdin", "stdin_stdout", "stdio"):
            stdio_in.append(str(case["input"]))
            stdio_out.append(str(case["output"]))
        elif kind in ("functional", "function_call", "function"):
            fn_name = (case.get("fn_name") or (case.get("metadata") or {}).get("func_name")
                       or fn_name or starter_fn)
            args = case["input"]
            fn_in.append(_json_lines(args) if isinstance(args, str) else list(args))
            fn_out.append(_maybe_json(case["output"]))
            wrapped.add(kind == "function_call")
        else:
            raise TestSpecError(f"test case {i}: unknown test type {kind!r}")
    if stdio_in and fn_in:
        raise TestSpecError("tests mix stdin and functional cases; split them into two rows")
    if len(wrapped) > 1:
        raise TestSpecError("tests mix 'function_call' (APPS-wrapped outputs) and 'functional' "
                            "cases; split them into two rows")
    if fn_in:
        return parse_tests({"type": "function", "fn_name": fn_name, "inputs": fn_in,
                            "outputs": fn_out, "unwrap_single": wrapped == {True}})
    return parse_tests({"type": "stdio", "inputs": stdio_in, "outputs": stdio_out})


def normalize_tests(raw: Any, fn_name: str | None = None,
                    starter_fn: str | None = None) -> TestSpec:
    """Convert a public-dataset test spec (see module docstring) to the canonical `TestSpec`.

    `fn_name`: the function name given beside the tests (DeepCoder `metadata.func_name`);
    `starter_fn`: the function the starter code defines, used by functional case lists that
    name no function. APPS / TACO objects without `fn_name` stay stdin/stdout tests, as
    upstream grades them, whatever the starter code defines.
    """
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as err:
            raise TestSpecError(f"tests is not valid JSON: {err}") from None
    if isinstance(raw, dict) and raw.get("type") in ("function", "stdio"):
        return parse_tests(raw)
    if isinstance(raw, dict) and "inputs" in raw and "outputs" in raw:  # APPS / TACO
        fn = raw.get("fn_name") or fn_name
        if fn:
            return parse_tests({"type": "function", "fn_name": fn,
                                "inputs": [a if isinstance(a, list) else [a]
                                           for a in raw["inputs"]],
                                "outputs": raw["outputs"], "unwrap_single": True})
        to_text = lambda v: "\n".join(map(str, v)) if isinstance(v, list) else str(v)  # noqa: E731
        return parse_tests({"type": "stdio", "inputs": [to_text(v) for v in raw["inputs"]],
                            "outputs": [to_text(v) for v in raw["outputs"]]})
    if isinstance(raw, list):
        return _from_case_list(raw, fn_name, starter_fn)
    raise TestSpecError(f"unrecognised test format ({type(raw).__name__}); expected the canonical "
                        "object, an APPS-style {inputs, outputs} object or a list of cases")
