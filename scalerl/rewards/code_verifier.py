"""Code answer checking: run the extracted program against hidden tests in the sandbox.

`check_code(code, tests_json)` returns (all tests passed, detail). A program that does not
compile fails here without a sandbox run: `compile()` only parses and generates bytecode, it
runs nothing of the program, and a tiny model's answers are often broken (about one code answer
in ten at the default sweep's tiny-m), each saving a ~10 ms sandbox child. Function tests run
in ONE sandboxed child (the harness calls the function on every input and streams back the return
values); stdin/stdout tests run one child per case and stop at the first failure. Comparison
happens here, in the parent, against expected outputs the child never sees:
- function: the returned value (parsed with `ast.literal_eval` from the harness's channel)
  must equal the expected JSON value; tuples compare as lists, bools never equal ints, floats
  compare with a relative tolerance of 1e-9; every case must report exactly once. Specs with
  `unwrap_single` (APPS / TACO `input_output` with `fn_name`, DeepCoder primeintellect
  `function_call`) follow the upstream convention that wraps each expected return value in a
  one-element list: a case passes when the value equals `outputs[i]`, or when `outputs[i]` is
  a one-element list `[v]` and the value equals `v` (`same_function_output`). Upstream APPS
  `testing_util` also tries `outputs[i][0]` for longer lists; that accepts a wrong `1` for an
  expected `[1, 2, 3]` and never helps a wrapped output (always one element), so it is not
  copied. Left ambiguous, as upstream: for an unwrapped one-element answer `[v]`, a bare `v`
  passes too. A function program that uses a capitalised `typing` name (LeetCode starter code
  annotates with `List[int]`) runs after `from typing import *`, as the LiveCodeBench and TACO
  graders import it; others run as given (the import costs a sandbox child ~13 ms);
- stdio: stdout equals the expected text line by line after stripping trailing whitespace,
  or, failing that, token by token;
- program: ONE sandboxed child runs the setup, the solution and the test program
  (`run_python(mode="program")`, the runner of `program_tests.py`). It passes only when the
  result channel ends with `done NONCE N`, NONCE being the run's secret (`RunResult.nonce`),
  written once, as the last line, with exit code 0: the runner writes it only after every
  test returned, in the original process. Anything else is a fail whose detail names why
  (`program_verdict`): the first failing test (`fail LABEL: Exception: message`), a timeout,
  an exit before the tests finished (os._exit / sys.exit at import or in the entry point, a
  signal), a report line carrying a wrong nonce (a printed "success" guess), or output after
  the report. A program using a capitalised typing name gets the typing prelude, as above.

Deliberately left out: partial credit (the recipe's reward is binary) and special judges.
"""

from __future__ import annotations

import ast
import math
import re
import typing
import warnings
from typing import Any

from scalerl.rewards.sandbox import RunResult, SandboxLimits, run_python
from scalerl.tasks.code_tests import TestSpec, TestSpecError, parse_tests

__all__ = ["check_code", "syntax_error", "same_value", "same_function_output", "same_stdout",
           "program_verdict"]

# prepended to function-test programs that use typing names (starter code: List[int])
FUNCTION_PRELUDE = "from typing import *  # noqa\n"
_TYPING_NAMES = frozenset(n for n in typing.__all__ if n[:1].isupper())
_CAPITALISED = re.compile(r"\b[A-Z]\w*")


def _with_prelude(code: str) -> str:
    """`code`, after FUNCTION_PRELUDE when it mentions a capitalised typing name."""
    if _TYPING_NAMES.intersection(_CAPITALISED.findall(code)):
        return FUNCTION_PRELUDE + code
    return code


def same_value(got: Any, expected: Any) -> bool:
    """Structural equality of plain data: tuples as lists, bool != int, float tolerance."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, int | float) and isinstance(expected, int | float):
        if isinstance(got, float) or isinstance(expected, float):
            return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
        return got == expected
    if isinstance(got, list | tuple) and isinstance(expected, list | tuple):
        return len(got) == len(expected) and all(map(same_value, got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        # JSON turns int keys into strings: compare keys as strings
        g = {str(k): v for k, v in got.items()}
        e = {str(k): v for k, v in expected.items()}
        return g.keys() == e.keys() and all(same_value(g[k], e[k]) for k in g)
    if isinstance(got, set | frozenset) and isinstance(expected, list | tuple):
        return len(got) == len(expected) and got == set(map(_hashable, expected))
    return type(got) is type(expected) and got == expected


def same_function_output(got: Any, expected: Any, unwrap_single: bool = False) -> bool:
    """Whether a returned value passes a function case: `same_value(got, expected)`, or, with
    `unwrap_single` (upstream APPS / TACO wrapping), `expected == [v]` and `same_value(got, v)`.
    """
    if same_value(got, expected):
        return True
    return (unwrap_single and isinstance(expected, list) and len(expected) == 1
            and same_value(got, expected[0]))


def _hashable(v: Any) -> Any:
    return tuple(map(_hashable, v)) if isinstance(v, list) else v


def same_stdout(got: str, expected: str) -> bool:
    """Equal up to trailing whitespace per line and trailing blank lines, else token-equal."""
    g = [line.rstrip() for line in got.strip("\n").splitlines()]
    e = [line.rstrip() for line in expected.strip("\n").splitlines()]
    while g and not g[-1]:
        g.pop()
    while e and not e[-1]:
        e.pop()
    return g == e or got.split() == expected.split()


def _parse_results(blob: bytes, n: int) -> tuple[list[Any], str | None]:
    """Per-case return values from the harness channel; (values, error) on tampering."""
    values: list[Any] = [None] * n
    seen = [False] * n
    for raw in blob.decode("utf-8", "replace").splitlines():
        parts = raw.split(" ", 2)
        if raw == "missing":
            return values, "function not defined"
        if len(parts) < 3 or not parts[0].isdigit() or int(parts[0]) >= n:
            return values, "malformed result channel"
        i, status, payload = int(parts[0]), parts[1], parts[2]
        if seen[i]:
            return values, f"case {i} reported twice"
        seen[i] = True
        if status == "err":
            values[i] = _Error(payload)
            continue
        try:
            values[i] = ast.literal_eval(payload)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return values, f"case {i}: unreadable return value"
    missing = seen.count(False)
    if missing:
        return values, f"{missing} of {n} cases produced no result"
    return values, None


class _Error:
    def __init__(self, name: str) -> None:
        self.name = name


def _check_function(code: str, spec: TestSpec, limits: SandboxLimits) -> tuple[bool, str]:
    res = run_python(_with_prelude(code), mode="function", fn_name=spec.fn_name,
                     inputs=list(spec.inputs), limits=limits)
    values, problem = _parse_results(res.results, len(spec))
    if res.timed_out:
        return False, f"timeout after {limits.wall_s:g} s"
    if problem is not None:
        return False, _with_stderr(problem, res.stderr)
    for i, (got, expected) in enumerate(zip(values, spec.outputs)):
        if isinstance(got, _Error):
            return False, f"case {i}: raised {got.name}"
        if not same_function_output(got, expected, spec.unwrap_single):
            return False, f"case {i}: wrong answer"
    return True, f"passed {len(spec)}/{len(spec)} tests"


def program_verdict(res: RunResult, wall_s: float) -> tuple[bool, str]:
    """(passed, detail) of a program-test run (module docstring): pass only on the nonce."""
    if res.timed_out:
        return False, f"timeout after {wall_s:g} s"
    lines = res.results.decode("utf-8", "replace").splitlines()
    done = [line for line in lines if line.startswith("done ")]
    proof = [line for line in done if line.split(" ")[1:2] == [res.nonce]]
    if proof and len(done) == 1 and lines[-1] == proof[0] and res.returncode == 0:
        n = proof[0].split(" ")[2]
        ran = f", then {n} tests" if n != "0" else ""
        return True, f"passed: the test program ran to the end{ran}"
    failed = next((line[5:] for line in lines if line.startswith("fail ")), None)
    if failed is not None:
        return False, _with_stderr(f"test failed: {failed[:200]}", b"")
    if done and not proof:
        return False, "forged completion report: a 'done' line without this run's nonce"
    if proof:
        return False, (f"output after the completion report (exit code {res.returncode})"
                       if lines[-1] != proof[0] or len(done) > 1 else
                       f"exit code {res.returncode} after the completion report")
    how = (f"killed by signal {-res.returncode} (a resource limit or the program itself)"
           if res.returncode is not None and res.returncode < 0 else
           f"exit code {res.returncode}")
    return False, _with_stderr(f"exited before the tests finished ({how})", res.stderr)


def _check_program(code: str, spec: TestSpec, limits: SandboxLimits) -> tuple[bool, str]:
    res = run_python(_with_prelude(code), mode="program", limits=limits,
                     program={"test": spec.test, "setup": spec.setup,
                              "entry_point": spec.entry_point})
    return program_verdict(res, limits.wall_s)


def _check_stdio(code: str, spec: TestSpec, limits: SandboxLimits) -> tuple[bool, str]:
    for i, (stdin, expected) in enumerate(zip(spec.inputs, spec.outputs)):
        res = run_python(code, mode="script", stdin=stdin.encode(), limits=limits)
        if res.timed_out:
            return False, f"case {i}: timeout after {limits.wall_s:g} s"
        if res.returncode != 0:
            return False, _with_stderr(f"case {i}: exit code {res.returncode}", res.stderr)
        if not same_stdout(res.stdout.decode("utf-8", "replace"), expected):
            return False, f"case {i}: wrong answer"
    return True, f"passed {len(spec)}/{len(spec)} tests"


def _with_stderr(msg: str, stderr: bytes) -> str:
    last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] if stderr else []
    return f"{msg} ({last[0][:120]})" if last else msg


def syntax_error(code: str) -> str | None:
    """"SyntaxError: MSG (line N)" when `code` does not compile, else None.

    Compiling runs nothing of `code`; it is the same compile the sandbox child does first
    (same interpreter, no inherited __future__ flags). Anything but a SyntaxError (e.g. a null
    byte, a nesting limit) is left to the sandbox run, which reports it as before.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "invalid escape sequence" warnings
            compile(code, "solution.py", "exec", dont_inherit=True)
    except SyntaxError as err:  # also IndentationError, TabError
        return f"{type(err).__name__}: {err.msg} (line {err.lineno})"
    except Exception:  # noqa: BLE001 - the sandbox run decides
        return None
    return None


def check_code(code: str, tests: str | TestSpec,
               limits: SandboxLimits | None = None) -> tuple[bool, str]:
    """(all tests pass, detail) for `code` against the canonical `tests` (JSON or TestSpec)."""
    try:
        spec = tests if isinstance(tests, TestSpec) else parse_tests(tests)
    except TestSpecError as err:
        return False, f"bad test spec: {err}"
    problem = syntax_error(code)
    if problem is not None:
        return False, problem
    limits = limits or SandboxLimits()
    if spec.type == "function":
        return _check_function(code, spec, limits)
    if spec.type == "program":
        return _check_program(code, spec, limits)
    return _check_stdio(code, spec, limits)
