"""Failpoints: named places where a fault-injection harness can freeze or kill the process.

`failpoint(name, context)` does nothing unless the environment variable `SCALERL_FAILPOINTS`
names it. The variable is a comma-separated list of `NAME[:CONTEXT]@N=ACTION` entries: the N-th
time this process reaches failpoint NAME with exactly that CONTEXT (any context when it is
omitted) it runs ACTION:

- `stop`: SIGSTOP itself. The process stays frozen at that point until something outside sends
  SIGKILL (or SIGCONT), so a harness can kill a whole process group at a known point of the
  code whatever the machine's speed (`benchmarks/fault_injection.py` finds the stopped process
  in /proc and then SIGKILLs the group);
- `kill`: SIGKILL itself;
- `raise`: raise `FailpointError`.

Example: `SCALERL_FAILPOINTS=checkpoint_write:chunk4.partial@2=stop` freezes the trainer in the
middle of the second intra-chunk save of chunk 4, when the first one is complete on disk.

Failpoints in the package: `checkpoint_write` (context: the checkpoint directory's name), hit
once per checkpoint write after the model weights are in the temporary directory and before the
trainer state and summary are (`scalerl.rl.checkpoint`, `scalerl.parallel.checkpoint`).

Deliberately left out: delays and probabilistic triggers (a harness that needs a known state
stops the process instead of racing it).
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

__all__ = ["ENV", "FailpointError", "failpoint", "parse_failpoints"]

ENV = "SCALERL_FAILPOINTS"
ACTIONS = ("stop", "kill", "raise")

_hits: Counter = Counter()
_lock = threading.Lock()


class FailpointError(RuntimeError):
    """Raised at a failpoint whose action is `raise`."""


def parse_failpoints(spec: str) -> dict[tuple[str, str | None, int], str]:
    """{(name, context or None, n): action} of a `SCALERL_FAILPOINTS` value."""
    out: dict[tuple[str, str | None, int], str] = {}
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        where, _, action = entry.partition("=")
        point, _, count = where.partition("@")
        name, _, context = point.partition(":")
        if not name or action not in ACTIONS or not count.isdigit() or int(count) < 1:
            raise ValueError(f"{ENV} entry {entry!r}: write NAME[:CONTEXT]@N=ACTION with N >= 1 "
                             f"and ACTION one of {', '.join(ACTIONS)}")
        out[(name, context or None, int(count))] = action
    return out


def failpoint(name: str, context: str = "") -> None:
    """Count this hit of `name` in `context` and run the action the environment asks for."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    points = parse_failpoints(spec)
    with _lock:
        _hits[(name, context)] += 1
        _hits[(name, None)] += 1
        actions = [points.get((name, context, _hits[(name, context)])),
                   points.get((name, None, _hits[(name, None)]))]
    for action in filter(None, actions):
        if action == "raise":
            raise FailpointError(f"failpoint {name} ({context}) reached")
        os.kill(os.getpid(), signal.SIGSTOP if action == "stop" else signal.SIGKILL)
