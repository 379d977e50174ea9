"""Verifiers and rewards: `score(task_row, completion_text) -> Score(correct, reward, detail)`.

- `score` / `score_many`: the entry points (scalerl.rewards.score);
- `check_math` / `MathVerifierPool`: integer fast path + math-verify in killable workers;
- `check_code` / `run_python` / `SandboxLimits`: the code sandbox and its test harnesses
  (function calls, stdin/stdout, test programs proved complete by a per-run nonce);
  `isolation()` says which isolation is in effect.
Importing this package is cheap: math-verify loads only inside its worker processes.
"""

from scalerl.rewards.code_verifier import check_code
from scalerl.rewards.math_verifier import (
    MathVerifierPool,
    check_math,
    check_math_many,
    default_pool,
)
from scalerl.rewards.sandbox import RunResult, SandboxLimits, isolation, run_python
from scalerl.rewards.score import REWARD_CORRECT, REWARD_INCORRECT, Score, score, score_many

__all__ = [
    "Score", "score", "score_many", "REWARD_CORRECT", "REWARD_INCORRECT",
    "check_math", "check_math_many", "MathVerifierPool", "default_pool",
    "check_code", "run_python", "SandboxLimits", "RunResult", "isolation",
]
