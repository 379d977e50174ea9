"""Loaders for real math and code datasets: local Parquet / JSONL / JSON, or a Hugging Face id.

Rows are mapped to `TaskExample`s through a column mapping (canonical key -> dataset column):
- math (Polaris-53K, MATH style): `prompt` <- "problem", `answer` <- "answer";
- code (DeepCoder / LiveCodeBench / TACO style): `prompt` <- "problem", `tests` <- "tests"
  (converted to the canonical format by `scalerl.tasks.code_tests.normalize_tests`),
  `fn_name` <- "metadata.func_name" (a dotted path reads into a dict or a JSON string column),
  `starter_code` <- "starter_code".
Optional keys for both: `id`, `difficulty`, `solution` (a list, or a JSON list of strings as in
APPS / TACO `solutions`, gives its first element), and for code `fn_name`, `starter_code`,
and for test-program formats `entry_point`, `setup` and `test_info`.
A mapped column that a row lacks is an error naming the row and the field
(`MalformedRowError`), or, with `skip_malformed=True`, the row is skipped and its message kept
in `LoadResult.skipped`.

`FORMATS` names the column mappings of the upstream datasets (`format=` argument):
- `polaris` (POLARIS-Project/Polaris-Dataset-53K, JSONL): `problem`, `answer`, `difficulty`
  = the pass count of 8 samples of DeepSeek-R1-Distill-Qwen-7B as a string "k/n", e.g. "6/8";
- `deepcoder` (agentica-org/DeepCoder-Preview-Dataset, subsets lcbv5 / primeintellect / taco /
  codeforces): `problem`, `tests` (JSON string: a LiveCodeBench or primeintellect case list, or
  a TACO `{inputs, outputs, fn_name?}` object), `metadata` ({"func_name": ...} for LeetCode
  rows), `starter_code` (LeetCode rows: `class Solution:` with the method signature);
- `taco` (BAAI/TACO) and `apps` (codeparrot/apps): `question`, `input_output` (JSON string
  `{inputs, outputs, fn_name?}`), `starter_code`, `solutions` (JSON list of programs, not
  mapped by default), `difficulty` (labels "EASY".."VERY_HARD" / "introductory", "interview",
  "competition", mapped to 1..5 / 1..3; "UNKNOWN_DIFFICULTY" -> 0); apps also `problem_id`;
- test-program sets (canonical `program` tests, `scalerl.tasks.code_tests.program_tests`):
  - `humaneval` (openai_humaneval, evalplus/humanevalplus, HumanEvalPack: `task_id`, `prompt`,
    `canonical_solution`, `test` with `check(candidate)`, `entry_point`): the prompt asks to
    complete the signature and docstring (`HUMANEVAL_HEADER`, the prompt in a ```python
    fence) and is the tests' setup (run before the answer, as upstream runs prompt +
    completion); the reference solution is prompt + canonical_solution;
  - `mbpp` (google-research-datasets/mbpp full: `task_id`, `text`, `code`, `test_list`,
    `test_setup_code`, `challenge_test_list`): the prompt is the text plus the first assert
    (`MBPP_EXAMPLE`); the sanitized config maps `{prompt: prompt, setup: test_imports}`;
  - `acecode` (TIGER-Lab/AceCode-87K: `id`, `source`, `question`, `test_cases` (assert
    strings), `inferences` (model completions with their pass rates), `context_messages`):
    the question as is; the reference solution is the first inference that passed every test
    (`pass_rate` 1.0), if any;
  - `kodcode` (KodCode/KodCode-V1: `question_id`, `question`, `solution`, `test` (pytest code
    importing from `solution`), `test_info` (function declarations), `gpt_difficulty`
    "easy" / "medium" / "hard" -> 1..3): the question, then the declarations to implement
    (`KODCODE_DECLARATION`), as KodCode's own RL prompts.

Prompts: a non-empty starter code is appended to the problem in a block the model should
complete (`STARTER_HEADER`, the code in a ```python fence); when functional test cases
(LiveCodeBench / primeintellect lists) name no function, the one the starter code defines
(`def NAME(`, the `Solution` method for LeetCode) is used; APPS / TACO objects without
`fn_name` stay stdin/stdout tests, as upstream grades them. Difficulty: a number, a known label, or a pass count "k/n" - which sets
`pass_rate = k/n` (what the build's difficulty filter compares with `min_pass_rate` /
`max_pass_rate`) and `difficulty = n - k` (failed samples: higher is harder, like the synthetic
levels).

Hugging Face datasets load only when asked (`load_hub`), through the optional `datasets`
package (imported lazily; a clear error says how to install it) - never in tests.

Deliberately left out: chat templates (prompts are stored as raw text), special judges, and
streaming of datasets larger than memory.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from scalerl.tasks.base import MalformedRowError, TaskExample, make_prompt_id
from scalerl.tasks.code_tests import TestSpecError, normalize_tests, program_tests

__all__ = ["DEFAULT_COLUMNS", "FORMATS", "PROGRAM_FORMATS", "STARTER_HEADER", "HUMANEVAL_HEADER",
           "MBPP_EXAMPLE", "KODCODE_DECLARATION", "LoadResult", "read_records",
           "rows_to_examples", "load_file", "load_hub", "parse_difficulty", "with_starter_code",
           "starter_fn_name", "program_prompt"]

DEFAULT_COLUMNS: dict[str, dict[str, str]] = {
    "math": {"prompt": "problem", "answer": "answer"},
    "code": {"prompt": "problem", "tests": "tests", "fn_name": "metadata.func_name",
             "starter_code": "starter_code"},
}
# format name -> (task, column mapping over DEFAULT_COLUMNS[task]); see the module docstring
FORMATS: dict[str, tuple[str, dict[str, str]]] = {
    "polaris": ("math", {"difficulty": "difficulty"}),
    "deepcoder": ("code", {}),
    "taco": ("code", {"prompt": "question", "tests": "input_output", "difficulty": "difficulty"}),
    "apps": ("code", {"prompt": "question", "tests": "input_output", "difficulty": "difficulty",
                      "id": "problem_id"}),
    "humaneval": ("code", {"prompt": "prompt", "tests": "test", "entry_point": "entry_point",
                           "solution": "canonical_solution", "id": "task_id"}),
    "mbpp": ("code", {"prompt": "text", "tests": "test_list", "setup": "test_setup_code",
                      "solution": "code", "id": "task_id"}),
    "acecode": ("code", {"prompt": "question", "tests": "test_cases", "id": "id",
                         "solution": "inferences"}),
    "kodcode": ("code", {"prompt": "question", "tests": "test", "test_info": "test_info",
                         "solution": "solution", "id": "question_id",
                         "difficulty": "gpt_difficulty"}),
}
# formats graded by test programs: format -> style of scalerl.tasks.code_tests.program_tests
PROGRAM_FORMATS = {name: name for name in ("humaneval", "mbpp", "acecode", "kodcode")}
_KEYS = {"prompt", "answer", "tests", "fn_name", "starter_code", "id", "difficulty", "solution",
         "entry_point", "setup", "test_info"}
_OPTIONAL = {"fn_name", "starter_code", "id", "difficulty", "solution", "entry_point", "setup",
             "test_info"}
# difficulty labels of TACO (EASY..VERY_HARD) and APPS (introductory, interview, competition)
_LABELS = {"UNKNOWN_DIFFICULTY": 0, "EASY": 1, "MEDIUM": 2, "MEDIUM_HARD": 3, "HARD": 4,
           "VERY_HARD": 5, "introductory": 1, "interview": 2, "competition": 3,
           "easy": 1, "medium": 2, "hard": 3}  # last three: KodCode gpt_difficulty
_PASS_COUNT = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
STARTER_HEADER = ("### Starter code\nComplete the following starter code; keep its class and "
                  "function names and signatures:")
_DEF = re.compile(r"^[ \t]*def[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)
HUMANEVAL_HEADER = "Complete the following Python function; keep its name and signature:"
MBPP_EXAMPLE = "Your code should pass this test:"
KODCODE_DECLARATION = "Note that the function declaration is {}."
KODCODE_DECLARATIONS = ("Note that the functions you need to implement have the following "
                        "declarations:\n{}")


@dataclasses.dataclass
class LoadResult:
    examples: list[TaskExample]
    skipped: list[str]  # one message per malformed row that was skipped


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .parquet, .jsonl or .json (a list of objects) file as dicts."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".jsonl":
        rows = []
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise MalformedRowError(f"{path}:{lineno}: not valid JSON: {err}") from None
        return rows
    if suffix == ".json":
        data = json.loads(path.read_text())
        if not isinstance(data, list):
            raise MalformedRowError(f"{path}: expected a JSON list of row objects")
        return data
    raise ValueError(f"{path}: unsupported file type {suffix!r}; use .parquet, .jsonl or .json")


def _get(row: Mapping[str, Any], column: str) -> Any:
    """row[column], following a dotted path into dicts or JSON-encoded strings."""
    if column in row:
        return row[column]
    head, _, rest = column.partition(".")
    if not rest or head not in row:
        raise KeyError(column)
    value = row[head]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise KeyError(column) from None
    if not isinstance(value, Mapping):
        raise KeyError(column)
    return _get(value, rest)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or value == ""


def parse_difficulty(value: Any, where: str = "row") -> tuple[int, float | None]:
    """(difficulty, pass_rate) of a dataset difficulty value (see the module docstring).

    A pass count "k/n" (Polaris) gives (n - k, k / n); an integer-valued number or numeric
    string gives (that int, None); a TACO / APPS label its level; missing gives (0, None).
    """
    if _missing(value):
        return 0, None
    if isinstance(value, str):
        count = _PASS_COUNT.fullmatch(value)
        if count:
            k, n = int(count.group(1)), int(count.group(2))
            if n == 0 or k > n:
                raise MalformedRowError(f"{where}: field 'difficulty' {value!r} is not a pass "
                                        "count k/n with 0 <= k <= n and n > 0")
            return n - k, k / n
        if value.strip() in _LABELS:
            return _LABELS[value.strip()], None
    if isinstance(value, bool):
        raise MalformedRowError(f"{where}: field 'difficulty' must be a number, got {value!r}")
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise MalformedRowError(f"{where}: field 'difficulty' must be a number, a pass count "
                                f"'k/n' or a TACO/APPS label, got {value!r}; map another "
                                "column or drop 'difficulty' from columns") from None
    if not as_float.is_integer():
        raise MalformedRowError(f"{where}: field 'difficulty' must be an integer, got {value!r}")
    return int(as_float), None


def starter_fn_name(starter_code: str) -> str | None:
    """The function the starter code asks for: the first `def NAME(` other than `__init__`
    outside comments (LeetCode: the `Solution` method), else None."""
    names = [n for n in _DEF.findall(starter_code) if n != "__init__"]
    return names[0] if names else None


def with_starter_code(problem: str, starter_code: str) -> str:
    """The prompt: the problem, then (when non-empty) the starter code block to complete."""
    code = starter_code.strip("\n").rstrip()
    if not code:
        return problem
    return f"{problem.rstrip()}\n\n{STARTER_HEADER}\n```python\n{code}\n```\n"


def _first_solution(value: Any) -> str:
    """A reference solution: the value, or the first of a list / JSON list of programs."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        if isinstance(decoded, list) and all(isinstance(v, str) for v in decoded):
            value = decoded
    if isinstance(value, list | tuple):
        return str(value[0]) if value else ""
    return "" if _missing(value) else str(value)


def _declarations(test_info: Any, key: str = "function_declaration") -> list[str]:
    """KodCode `test_info`: the function declarations (or another `key` of its entries), from a
    list (or JSON list) of dicts."""
    if isinstance(test_info, str):
        try:
            test_info = json.loads(test_info)
        except json.JSONDecodeError:
            return []
    if hasattr(test_info, "tolist"):  # numpy array from a Parquet list column
        test_info = test_info.tolist()
    if not isinstance(test_info, list | tuple):
        return []
    return [str(d[key]).strip() for d in test_info
            if isinstance(d, Mapping) and str(d.get(key) or "").strip()]


def _function_names(test_info: Any) -> list[str]:
    return _declarations(test_info, "function_name")


def program_prompt(style: str, text: str, first_test: str = "", test_info: Any = None) -> str:
    """The prompt of a test-program row, built the way its dataset expects (module docstring).

    `first_test`: the first test line (MBPP's example assert); `test_info`: KodCode's
    function declarations.
    """
    if style == "humaneval":
        return f"{HUMANEVAL_HEADER}\n```python\n{text.rstrip()}\n```\n"
    if style == "mbpp":
        return f"{text.rstrip()}\n{MBPP_EXAMPLE}\n{first_test}\n"
    if style == "kodcode":
        decls = _declarations(test_info)
        if len(decls) == 1:
            return f"{text.rstrip()}\n\n{KODCODE_DECLARATION.format(decls[0])}"
        if decls:
            return f"{text.rstrip()}\n\n{KODCODE_DECLARATIONS.format(chr(10).join(decls))}"
    return text


def _program_example(style: str, values: Mapping[str, Any], prompt: str) -> tuple[str, str, Any]:
    """(prompt, tests JSON, solution) of a test-program row."""
    entry = values.get("entry_point")
    if style == "kodcode" and _missing(entry):  # the one plain function to implement, if one
        names = _function_names(values.get("test_info"))
        decls = _declarations(values.get("test_info"))
        plain = (len(names) == 1 == len(decls) and names[0].isidentifier()
                 and decls[0].startswith(f"def {names[0]}(") and "(self" not in decls[0])
        entry = names[0] if plain else None
    setup = values.get("setup", prompt if style == "humaneval" else "")
    spec = program_tests(style, values["tests"], setup=setup,
                         entry_point=None if _missing(entry) else str(entry))
    solution = values.get("solution")
    if style == "humaneval" and not _missing(solution):  # canonical_solution is the body only
        solution = prompt + str(solution)
    if style == "acecode":  # the first inference that passed every test
        inferences = solution.tolist() if hasattr(solution, "tolist") else solution
        solution = next((str(i.get("completion", "")) for i in inferences or ()
                         if isinstance(i, Mapping) and i.get("pass_rate") == 1.0), "")
    text = program_prompt(style, prompt, spec.test.split("\n", 1)[0], values.get("test_info"))
    return text, spec.to_json(), solution


def _example(row: Mapping[str, Any], i: int, task: str, source: str,
             columns: Mapping[str, str], style: str | None = None) -> TaskExample:
    where = f"{source} row {i}"
    values: dict[str, Any] = {}
    for key, column in columns.items():
        try:
            values[key] = _get(row, column)
        except KeyError:
            if key in _OPTIONAL:
                continue
            raise MalformedRowError(f"{where}: missing column {column!r} (field {key!r}); "
                                    f"columns present: {sorted(row)[:12]}") from None
    prompt = values.get("prompt")
    if _missing(prompt) or not isinstance(prompt, str):
        raise MalformedRowError(f"{where}: field 'prompt' ({columns['prompt']!r}) is empty or "
                                f"not a string: {prompt!r:.60}")
    answer = tests = None
    solution = values.get("solution")
    if task == "math":
        answer = values.get("answer")
        if _missing(answer) or isinstance(answer, list | dict):
            raise MalformedRowError(f"{where}: field 'answer' ({columns.get('answer')!r}) is "
                                    f"missing or not a scalar: {answer!r:.60}")
        answer = str(answer).strip()
    else:
        if _missing(values.get("tests")):
            raise MalformedRowError(f"{where}: field 'tests' ({columns.get('tests')!r}) is empty")
        if style is not None:
            try:
                prompt, tests, solution = _program_example(style, values, prompt)
            except TestSpecError as err:
                raise MalformedRowError(f"{where}: field 'tests': {err}") from None
            return _finish(values, source, prompt, task, None, tests, solution, where)
        starter = values.get("starter_code")
        starter = "" if _missing(starter) else str(starter)
        fn_name = values.get("fn_name")
        try:
            tests = normalize_tests(values["tests"], None if _missing(fn_name) else str(fn_name),
                                    starter_fn=starter_fn_name(starter))
        except TestSpecError as err:
            raise MalformedRowError(f"{where}: field 'tests': {err}") from None
        tests = tests.to_json()
        prompt = with_starter_code(prompt, starter)
    return _finish(values, source, prompt, task, answer, tests, solution, where)


def _finish(values: Mapping[str, Any], source: str, prompt: str, task: str, answer: str | None,
            tests: str | None, solution: Any, where: str) -> TaskExample:
    raw_id = values.get("id")
    prompt_id = make_prompt_id(source, prompt) if _missing(raw_id) else f"{source}-{raw_id}"
    difficulty, pass_rate = parse_difficulty(values.get("difficulty"), where)
    return TaskExample(prompt_id=prompt_id, task=task, source=source, prompt=prompt,
                       answer=answer, tests=tests, difficulty=difficulty,
                       solution=_first_solution(solution), pass_rate=pass_rate)


def rows_to_examples(rows: Iterable[Mapping[str, Any]], *, task: str, source: str,
                     columns: Mapping[str, str] | None = None, skip_malformed: bool = False,
                     limit: int = 0, format: str = "") -> LoadResult:
    """Map raw rows to examples (see module docstring); `limit` > 0 keeps the first `limit`;
    `format` (a `FORMATS` name, "" for none) sets the columns that `columns` does not."""
    if task not in DEFAULT_COLUMNS:
        raise ValueError(f"task must be 'math' or 'code', got {task!r}")
    preset: dict[str, str] = {}
    if format:
        if format not in FORMATS:
            raise ValueError(f"unknown dataset format {format!r}; known: {sorted(FORMATS)}")
        format_task, preset = FORMATS[format]
        if format_task != task:
            raise ValueError(f"format {format!r} is a {format_task} dataset; set task: "
                             f"{format_task} (got {task!r})")
    mapping = {**DEFAULT_COLUMNS[task], **preset, **(columns or {})}
    unknown = set(mapping) - _KEYS
    if unknown:
        raise ValueError(f"unknown column-mapping key(s) {sorted(unknown)}; valid: {sorted(_KEYS)}")
    style = PROGRAM_FORMATS.get(format)
    examples, skipped = [], []
    for i, row in enumerate(rows):
        if limit and len(examples) >= limit:
            break
        try:
            examples.append(_example(row, i, task, source, mapping, style))
        except MalformedRowError as err:
            if not skip_malformed:
                raise MalformedRowError(f"{err} (set skip_malformed: true to skip such rows)") \
                    from None
            skipped.append(str(err))
    return LoadResult(examples, skipped)


def load_file(path: str | Path, *, task: str, source: str | None = None,
              columns: Mapping[str, str] | None = None, skip_malformed: bool = False,
              limit: int = 0, format: str = "") -> LoadResult:
    """Load a local Parquet / JSONL / JSON dataset file."""
    return rows_to_examples(read_records(path), task=task, source=source or Path(path).stem,
                            columns=columns, skip_malformed=skip_malformed, limit=limit,
                            format=format)


def load_hub(dataset_id: str, *, task: str, split: str = "train", config_name: str | None = None,
             source: str | None = None, columns: Mapping[str, str] | None = None,
             skip_malformed: bool = False, limit: int = 0, format: str = "") -> LoadResult:
    """Load a Hugging Face dataset (needs the `datasets` package and network or a local cache)."""
    try:
        import datasets
    except ImportError:
        raise ImportError("loading from the Hugging Face hub needs the `datasets` package: "
                          "`pip install datasets`, or download the data and use kind: file") \
            from None
    ds = datasets.load_dataset(dataset_id, config_name or None, split=split)
    return rows_to_examples(iter(ds), task=task, source=source or dataset_id.split("/")[-1],
                            columns=columns, skip_malformed=skip_malformed, limit=limit,
                            format=format)
