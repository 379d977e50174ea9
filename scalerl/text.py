"""The literal strings of the completion format, defined once.

A completion is `<think>…</think>answer`; math answers end in `\\boxed{…}`; when the thinking
budget runs out, forced interruption (ScaleRL, Khatri et al. 2025, §3.2 "length control")
appends `INTERRUPTION_TEXT`, which ends with `THINK_CLOSE`. Tasks, tokenizers, engines, the
recipe and the graders all import these names from here (docs/design.md, "Completion format").

Deliberately left out: chat templates (they belong to the tokenizer of each model).
"""

__all__ = ["BOXED_OPEN", "INTERRUPTION_TEXT", "THINK_CLOSE", "THINK_OPEN"]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
BOXED_OPEN = "\\boxed{"
INTERRUPTION_TEXT = (
    "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"
)
