"""The canonical hidden-test format of code tasks, and converters from public dataset formats.

Canonical (the `tests` column of prompts.parquet, a JSON string), one of:
- `{"type": "function", "fn_name": "f", "inputs": [[arg, ...], ...], "outputs": [value, ...]}`:
  call `fn_name(*args)` (or `Solution().fn_name(*args)`, LeetCode style) and compare the return
  value with the output (plain JSON data; tuples compare as lists). With `"unwrap_single":
  true` (APPS / TACO convention, below) a one-element list output `[v]` also accepts `v`;
- `{"type": "stdio", "inputs": ["stdin text", ...], "outputs": ["expected stdout", ...]}`:
  run the program with the input on stdin and compare stdout line by line, ignoring trailing
  whitespace (then, as a fallback, token by token);
- `{"type": "program", "test": "test code", "setup": "code", "entry_point": "f"}` (setup and
  entry point optional): a test program (HumanEval / MBPP / AceCode / KodCode). The setup runs
  first in the solution's module (HumanEval: the prompt's signature, docstring and helpers;
  MBPP: `test_setup_code`), then the solution, then the test code, which sees the solution's
  names, `candidate` (the entry point) and a module `solution` (`from solution import f`),
  then every pytest-style `test*` function, `Test*` class and `unittest.TestCase` it defines.
  Pass = every test ran to the end inside the limits; the harness proves it
  (`scalerl.rewards.sandbox`; docs/design.md, "Code tasks graded by test programs"). The test
  and setup code may import the standard library, `solution` and `pytest` (a minimal stand-in:
  `raises`, `approx`, `mark.parametrize`, `fixture`, `capsys`, `tmp_path`, `monkeypatch`); a
  third-party import (numpy, ...) is a `TestSpecError` here, since the sandbox has only the
  standard library.

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

`program_tests(style, tests, setup=..., entry_point=...)` builds program specs from the test
columns of the test-program datasets (loader formats of `scalerl.tasks.loaders`):
- `humaneval` (openai_humaneval, HumanEvalPlus, HumanEvalPack): `test` defines
  `check(candidate)`, `entry_point` names the function; the prompt is the setup and
  `check(candidate)` is appended unless the test calls `check` itself;
- `mbpp` (full: `test_list` + `test_setup_code`; sanitized: `test_list` + `test_imports`):
  the assert lines, the setup code before the solution (`challenge_test_list` is not graded,
  as upstream);
- `acecode` (AceCode-87K `test_cases`): a list of assert strings;
- `kodcode` (KodCode-V1 `test`): pytest code importing from `solution`.
For mbpp and acecode the entry point is the first function the first assert calls (as
AceCode's own grader takes it), e.g. `f` in `assert math.isclose(f(1), 2.0)`; for kodcode the
loader passes the function of `test_info` when it lists exactly one plain function (a `def`
that is not a method). The entry point is only guarded more strictly (the sandbox also guards
it when the solution makes it a class).

Deliberately left out: special judges (floating tolerance per problem, multiple valid answers),
BigCodeBench-style tests that need third-party packages, and non-Python languages.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import json
import sys
from typing import Any, Literal

__all__ = ["TestSpec", "TestSpecError", "parse_tests", "normalize_tests", "program_tests",
           "PROGRAM_STYLES", "spec_type"]

PROGRAM_STYLES = ("humaneval", "mbpp", "acecode", "kodcode")
# what test programs may import: the standard library, the solution and the pytest stand-in
_IMPORTABLE = frozenset(sys.stdlib_module_names) | {"solution", "pytest", "__future__"}
_BUILTINS = frozenset(dir(builtins))


class TestSpecError(ValueError):
    """A test specification is malformed; the message says which part."""

    __test__ = False  # not a pytest test class


@dataclasses.dataclass(frozen=True)
class TestSpec:
    """Parsed canonical tests."""

    __test__ = False

    type: Literal["function", "stdio", "program"]
    inputs: tuple  # function: tuple of argument lists; stdio: tuple of str; program: ()
    outputs: tuple
    fn_name: str | None = None
    unwrap_single: bool = False  # function: a one-element list output [v] also accepts v
    test: str = ""  # program: the test code
    setup: str = ""  # program: code run before the solution, in its module
    entry_point: str | None = None  # program: the solution's function bound as `candidate`

    def to_json(self) -> str:
        if self.type == "program":
            program: dict[str, Any] = {"type": "program", "test": self.test}
            if self.setup:
                program["setup"] = self.setup
            if self.entry_point is not None:
                program["entry_point"] = self.entry_point
            return json.dumps(program, separators=(",", ":"))
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
    if kind == "program":
        return _parse_program(data)
    if kind not in ("function", "stdio"):
        raise TestSpecError(f"tests.type must be 'function', 'stdio' or 'program', got {kind!r}")
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


def _parse_program(data: dict) -> TestSpec:
    test, setup, entry = data.get("test"), data.get("setup", ""), data.get("entry_point")
    if not isinstance(test, str) or not test.strip():
        raise TestSpecError("program tests need a non-empty string 'test' (the test code)")
    if not isinstance(setup, str):
        raise TestSpecError(f"program tests: 'setup' must be a string, got {setup!r:.60}")
    if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
        raise TestSpecError(f"program tests: 'entry_point' must be an identifier, got {entry!r}")
    test_tree = _compiled("test", test)
    _check_imports("setup", _compiled("setup", setup))
    _check_imports("test", test_tree)
    if not _checks_something(test_tree):
        raise TestSpecError("program tests: 'test' has no assert statement, test function or "
                            "unittest.TestCase class, so it would pass any program")
    return TestSpec(type="program", inputs=(), outputs=(), test=test, setup=setup,
                    entry_point=entry)


def _compiled(part: str, code: str) -> ast.Module:
    try:
        tree = ast.parse(code)
        compile(tree, f"<{part}>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as err:
        raise TestSpecError(f"program tests: '{part}' does not compile: {err}") from None
    return tree


def _check_imports(part: str, tree: ast.Module) -> None:
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [])
        for name in names:
            if name.split(".")[0] not in _IMPORTABLE:
                raise TestSpecError(
                    f"program tests: '{part}' imports {name!r}, which is not in the standard "
                    "library; the sandbox runs the standard library only (drop such rows, e.g. "
                    "with skip_malformed: true)")


def _checks_something(tree: ast.Module) -> bool:
    """An assert, a test function / method, or a class deriving from a *TestCase."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            return True
        if isinstance(node, ast.ClassDef) and any(
                (b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")).endswith("TestCase")
                for b in node.bases):
            return True
    return False


def _calls_check(tree: ast.Module) -> bool:
    """Whether the module calls `check(...)` at top level (HumanEvalPack tests do)."""
    return any(isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
               and isinstance(node.value.func, ast.Name) and node.value.func.id == "check"
               for node in tree.body)


def _first_called(tree: ast.Module) -> str | None:
    """The first non-builtin function called by name in the first assert, else None."""
    first = next((node for node in tree.body if isinstance(node, ast.Assert)), None)
    if first is None:
        return None
    calls = sorted((node for node in ast.walk(first) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name) and node.func.id not in _BUILTINS),
                   key=lambda node: (node.lineno, node.col_offset))
    return calls[0].func.id if calls else None


def _lines(value: Any, what: str) -> list[str]:
    """A list of code strings (a JSON list or a list / array column), else TestSpecError."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TestSpecError(f"{what} must be a list of strings, got {value!r:.60}") from None
    if hasattr(value, "tolist"):  # a numpy array from a Parquet list column
        value = value.tolist()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TestSpecError(f"{what} must be a list of strings, got {value!r:.60}")
    return list(value)


def _code(value: Any, what: str) -> str:
    """Setup code given as one string or as a list of lines (MBPP sanitized test_imports)."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        if not isinstance(decoded, list):
            return value
    return "\n".join(_lines(value, what))


def program_tests(style: str, tests: Any, *, setup: Any = "",
                  entry_point: str | None = None) -> TestSpec:
    """A program spec from the test columns of a test-program dataset (module docstring)."""
    if style not in PROGRAM_STYLES:
        raise ValueError(f"unknown test-program style {style!r}; known: {list(PROGRAM_STYLES)}")
    setup = _code(setup, f"{style} setup")
    if style == "humaneval":
        if not isinstance(tests, str) or not entry_point:
            raise TestSpecError("humaneval tests need the 'test' code (defining check) and an "
                                "'entry_point'")
        test = tests.rstrip() + "\n"
        if not _calls_check(_compiled("test", test)):
            test += "\n\ncheck(candidate)\n"
    elif style in ("mbpp", "acecode"):
        asserts = _lines(tests, f"{style} tests")
        if not asserts:
            raise TestSpecError(f"{style} tests: the list of asserts is empty")
        test = "\n".join(a.rstrip() for a in asserts) + "\n"
        entry_point = entry_point or _first_called(_compiled("test", test))
    else:  # kodcode
        if not isinstance(tests, str):
            raise TestSpecError(f"kodcode tests must be pytest code (a string), got {tests!r:.60}")
        test = tests
    spec: dict[str, Any] = {"type": "program", "test": test, "setup": setup}
    if entry_point:
        spec["entry_point"] = entry_point
    return parse_tests(spec)


def spec_type(tests: str | None) -> str:
    """The test type of a prompts row's `tests` ("function", "stdio", "program"), "answer"
    for a row without tests (math)."""
    if tests is None or (isinstance(tests, float) and tests != tests):
        return "answer"
    return parse_tests(tests).type


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
    if isinstance(raw, dict) and raw.get("type") in ("function", "stdio", "program"):
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
