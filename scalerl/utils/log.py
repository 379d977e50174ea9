"""Progress output on stderr: `progress(msg)` with a timestamp, and a simple ETA helper."""

from __future__ import annotations

import sys
import time


def progress(msg: str) -> None:
    print(f"[scalerl {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def eta_seconds(done: int, total: int, elapsed_s: float) -> float:
    """Remaining seconds if the rest goes at the average pace so far (inf before any work)."""
    if done <= 0:
        return float("inf")
    return elapsed_s / done * max(total - done, 0)


def format_seconds(s: float) -> str:
    if s == float("inf"):
        return "?"
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
