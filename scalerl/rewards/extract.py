"""Pull the gradable part out of a completion: the answer after thinking, `\\boxed{}`, code.

The answer part is everything after the LAST `</think>`; a completion without `</think>` has
no answer (it never stopped thinking, e.g. truncated) and is graded incorrect by the callers.
Math answers are the content of the last `\\boxed{...}` (or `\\fbox{...}`) of the answer part,
braces balanced; code answers are the last fenced block (```python, ```py or bare ```).

Also the fast path for plain integers: `plain_int("1,000") == 1000`, `plain_int("1/2") is None`.

Deliberately left out: answers outside `\\boxed{}` ("The answer is 5") - the recipe asks for
boxed answers, and guessing the answer elsewhere rewards formatting mistakes.
"""

from __future__ import annotations

import re

from scalerl.tasks.base import THINK_CLOSE

__all__ = ["answer_part", "last_boxed", "extract_code", "plain_int"]

_BOX_OPENERS = ("\\boxed{", "\\fbox{")
_FENCE = re.compile(r"```(?:python|py|Python|python3)?[ \t]*\n(.*?)```", re.DOTALL)
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+|[+-]?\d{1,3}(?: \d{3})+")
_INTEGER = re.compile(r"[+-]?\d+")


def answer_part(completion: str) -> str | None:
    """The text after the last `</think>`, or None when there is no `</think>`."""
    idx = completion.rfind(THINK_CLOSE)
    if idx < 0:
        return None
    return completion[idx + len(THINK_CLOSE):]


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`/`\\fbox{...}` with balanced braces, else None."""
    start = max(text.rfind(opener) + len(opener) if text.rfind(opener) >= 0 else -1
                for opener in _BOX_OPENERS)
    if start < 0:
        return None
    depth = 1
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None  # unbalanced: the box was never closed


def extract_code(text: str) -> str | None:
    """The last fenced code block (```python ... ```), else None."""
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else None


def plain_int(text: str) -> int | None:
    """The integer a plain integer answer denotes, else None.

    Accepts an optional sign, digits, thousands commas (`1,000`), spaces and LaTeX thin spaces
    (`1\\,000`, `1{,}000`), and surrounding `$`. Anything else (fractions, decimals, `1,2`,
    symbols) returns None so the caller falls back to the full math verifier.
    """
    s = text.strip().strip("$").strip()
    s = s.replace("{,}", ",").replace("\\,", " ").replace("\\!", "").replace("\\ ", " ")
    if len(s) > 4000:  # int() refuses more than 4300 digits; such answers go to math-verify
        return None
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "").replace(" ", "")
    if _INTEGER.fullmatch(s):
        return int(s)
    return None
