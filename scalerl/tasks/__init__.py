"""Math and code task sources: the `TaskExample` record, seeded synthetic generators, the
canonical code-test format (function calls, stdin/stdout, test programs), and loaders for real
datasets (local Parquet/JSONL or the hub)."""

from scalerl.tasks.base import MalformedRowError, TaskExample, make_prompt_id
from scalerl.tasks.code_tests import (
    TestSpec,
    TestSpecError,
    normalize_tests,
    parse_tests,
    program_tests,
    spec_type,
)
from scalerl.tasks.loaders import LoadResult, load_file, load_hub
from scalerl.tasks.synthetic import generate_code, generate_math

__all__ = ["TaskExample", "MalformedRowError", "make_prompt_id", "generate_math", "generate_code",
           "TestSpec", "TestSpecError", "parse_tests", "normalize_tests", "program_tests",
           "spec_type", "LoadResult",
           "load_file", "load_hub"]
