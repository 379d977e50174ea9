"""Progress output on stderr: `progress(msg)` with a timestamp, an ETA helper, and
`ProgressLine`, the progress of a long stage (training steps of a chunk, eval samples).

`ProgressLine(label, total, unit)` then `.update(done, detail)` per step and `.close()`:
- on a terminal (the stream's `isatty()`), a single line rewritten in place (carriage return,
  clear to the end of the line), cut to the terminal width: label, done/total, rate in
  units/s, ETA, and the detail; `close()` ends the line;
- otherwise (a log file, a pipe: Snakemake's logs) one plain timestamped line per update,
  exactly like `progress`, so logs stay line-oriented and grep-able.
A `progress(msg)` while a terminal line is live first ends that line, so messages never land
in the middle of it.

`LiveBlock()` then `.show(lines, status)`: a table kept up to date (`scalerl watch`). On a
terminal the block is redrawn in place (cursor up over its previous lines, each line cleared
and cut to the width) with `status` as its last line; otherwise the lines are printed, the
first one timestamped, only when they changed (a log gets one table per change, not per
poll; `status` alone does not count as a change). A `progress(msg)` leaves the block on screen
and the next `show` draws a new one below the message.

Deliberately left out: colours, nested progress, rate smoothing (the rate is the average since
the start, like `eta_seconds`).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["progress", "eta_seconds", "format_seconds", "ProgressLine", "LiveBlock"]

_LIVE: ProgressLine | LiveBlock | None = None  # the terminal output being rewritten, if any


def _stamp(msg: str) -> str:
    return f"[scalerl {time.strftime('%H:%M:%S')}] {msg}"


def progress(msg: str, stream: TextIO | None = None) -> None:
    stream = stream or sys.stderr
    if _LIVE is not None and _LIVE.stream is stream:
        _LIVE.break_line()
    print(_stamp(msg), file=stream, flush=True)


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


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


class ProgressLine:
    """The progress of `total` units of work; see the module docstring.

    `stream`: default sys.stderr at construction. `clock`: seconds (time.monotonic); the rate
    and ETA are measured from construction. `width`: terminal columns (default: the
    terminal's, 100 when unknown)."""

    def __init__(self, label: str, total: int, unit: str = "step", *,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 width: int | None = None) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream or sys.stderr
        self.tty = _is_tty(self.stream)
        self.clock = clock
        self.started = clock()
        self.width = width or shutil.get_terminal_size((100, 24)).columns
        self.shown = False  # a terminal line is on screen, not yet ended

    def text(self, done: int, detail: str = "") -> str:
        """'label 3/8 steps, 0.50 step/s, eta 0:10, detail' at the current clock."""
        elapsed = self.clock() - self.started
        rate = f"{done / elapsed:.2f}" if elapsed > 0 else "?"
        units = self.unit if self.total == 1 else self.unit + "s"
        parts = [f"{self.label} {done}/{self.total} {units}", f"{rate} {self.unit}/s",
                 f"eta {format_seconds(eta_seconds(done, self.total, elapsed))}"]
        return ", ".join(parts + ([detail] if detail else []))

    def update(self, done: int, detail: str = "") -> None:
        global _LIVE
        text = self.text(done, detail)
        if not self.tty:
            print(_stamp(text), file=self.stream, flush=True)
            return
        line = _stamp(text)[: max(self.width - 1, 10)]  # never wrap: \r rewrites one row only
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
        self.shown = True
        _LIVE = self

    def break_line(self) -> None:
        """End the terminal line (keeping its last state on screen); the next update starts a
        new one."""
        global _LIVE
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False
        if _LIVE is self:
            _LIVE = None

    def close(self) -> None:
        self.break_line()

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LiveBlock:
    """A block of lines kept up to date; see the module docstring. `width`: terminal columns
    (default: the terminal's, 100 when unknown)."""

    def __init__(self, *, stream: TextIO | None = None, width: int | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = _is_tty(self.stream)
        self.width = width or shutil.get_terminal_size((100, 24)).columns
        self.height = 0  # lines of the block on screen (0: none being rewritten)
        self.last: list[str] | None = None

    def show(self, lines: list[str], status: str = "") -> None:
        global _LIVE
        if not self.tty:
            if lines != self.last:
                text = [_stamp(lines[0] if lines else ""), *lines[1:]]
                print("\n".join(text), file=self.stream, flush=True)
                self.last = list(lines)
            return
        rows = [*lines, *([status] if status else [])]
        out = [f"\x1b[{self.height}A"] if self.height else []  # back to the block's top
        out += ["\r" + row[: max(self.width - 1, 10)] + "\x1b[K\n" for row in rows]
        extra = max(self.height - len(rows), 0)  # a shorter block: blank the old lines
        if extra:
            out += ["\x1b[K\n"] * extra + [f"\x1b[{extra}A"]
        self.stream.write("".join(out))
        self.stream.flush()
        self.height, self.last = len(rows), list(lines)
        _LIVE = self

    def break_line(self) -> None:
        """Leave the block on screen; the next `show` draws a new one below."""
        global _LIVE
        self.height = 0
        if _LIVE is self:
            _LIVE = None

    def close(self) -> None:
        self.break_line()
