"""Math-verify worker process: `python -m scalerl.rewards._math_worker MEMORY_MB SIGNAL_TIMEOUT_S`.

Runs in its own process (its main thread, so math-verify's SIGALRM timeouts work) under an
address-space limit, reading one JSON request per line on stdin: `[gold, predicted]`, and
writing one JSON line per request: `[equal: bool, detail: str]`. It prints `"ready"` once its
imports are done. The parent (`scalerl.rewards.math_verifier.MathVerifierPool`) kills it when a
request runs past the wall-clock timeout - SIGALRM cannot interrupt a long C call such as a
huge integer power, so the parent's kill is the real bound.
"""

from __future__ import annotations

import json
import resource
import sys


def _verify(gold: str, pred: str, timeout_s: int) -> tuple[bool, str]:
    from math_verify import parse, verify

    gold_parsed = parse(f"${gold}$", parsing_timeout=timeout_s)
    if not gold_parsed:
        gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=timeout_s)
    if not gold_parsed:
        return False, "reference answer does not parse"
    pred_parsed = parse(f"\\boxed{{{pred}}}", parsing_timeout=timeout_s)
    if not pred_parsed:
        return False, "answer does not parse"
    ok = verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s)
    return bool(ok), "math-verify: equal" if ok else "math-verify: not equal"


def main() -> None:
    memory_mb, timeout_s = int(sys.argv[1]), int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    import logging

    logging.disable(logging.CRITICAL)  # math-verify logs every timeout at ERROR level
    import math_verify  # noqa: F401  (import before "ready": the parent times requests only)

    out = sys.stdout
    out.write('"ready"\n')
    out.flush()
    for line in sys.stdin:
        try:
            gold, pred = json.loads(line)
            result = _verify(gold, pred, timeout_s)
        except MemoryError:
            result = (False, "math-verify: out of memory")
        except Exception as err:  # noqa: BLE001 - any verifier failure grades incorrect
            result = (False, f"math-verify error: {type(err).__name__}")
        out.write(json.dumps(result) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
