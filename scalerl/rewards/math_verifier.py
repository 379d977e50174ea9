"""Math answer checking: a fast exact path for integers, math-verify in killable workers.

`check_math(gold, predicted)` decides whether the predicted final answer (the content of the
last `\\boxed{}`) equals the reference answer:
1. both plain integers (commas / thin spaces normalised, see `extract.plain_int`): compare the
   integers - microseconds, and exactly what math-verify would decide for integer literals;
2. otherwise math-verify (`parse` + `verify`: fractions, decimals, LaTeX, sets, intervals,
   symbolic equality) in a worker process from `MathVerifierPool`. math-verify's own timeouts
   use SIGALRM, which only works in a main thread and cannot interrupt a long C call (a huge
   integer power), so each request also has a wall-clock deadline after which the worker is
   killed and replaced; the answer then counts as incorrect with detail "timeout".
Workers run under an address-space limit, so a memory blow-up also ends as incorrect.

Deliberately left out: answer extraction heuristics beyond `\\boxed{}` and per-dataset rules.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from scalerl.rewards.extract import plain_int

__all__ = ["MathVerifierPool", "check_math", "check_math_many", "default_pool", "fast_check"]

_WORKER = str(Path(__file__).with_name("_math_worker.py"))
MAX_ANSWER_CHARS = 2000  # longer boxed answers are graded incorrect without parsing


def fast_check(gold: str, predicted: str) -> tuple[bool, str] | None:
    """(equal, detail) when both sides are plain integers or the answer is empty, else None."""
    if not predicted.strip():
        return False, "empty \\boxed{}"
    if len(predicted) > MAX_ANSWER_CHARS:
        return False, f"answer longer than {MAX_ANSWER_CHARS} characters"
    g, p = plain_int(gold), plain_int(predicted)
    if g is not None and p is not None:
        return (g == p), ("integer: equal" if g == p else "integer: not equal")
    return None


@dataclasses.dataclass
class _Worker:
    proc: subprocess.Popen
    ready: bool = False
    job: int | None = None  # index of the request being verified
    deadline: float = 0.0
    buf: bytes = b""


class MathVerifierPool:
    """A fixed number of math-verify worker processes with a wall-clock deadline per request.

    Thread-safe (one batch at a time). Workers start lazily and are reused; a worker that
    misses a deadline is killed and a fresh one started. `stats` counts requests sent to the
    workers (cache misses), timeouts,
    failures (an answer that does not parse, a verifier error) and worker restarts.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0, memory_mb: int = 2048) -> None:
        if workers < 1 or timeout_s <= 0 or memory_mb < 256:
            raise ValueError(f"MathVerifierPool needs workers >= 1, timeout_s > 0, memory_mb >= "
                             f"256; got {workers}, {timeout_s}, {memory_mb}")
        self.n_workers, self.timeout_s, self.memory_mb = workers, timeout_s, memory_mb
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self.cache_size = 1 << 16
        self._cache: dict[tuple[str, str], tuple[bool, str]] = {}
        self._uncached: dict[tuple[str, str], tuple[bool, str]] = {}
        self.stats = {"requests": 0, "timeouts": 0, "failures": 0, "restarts": 0}

    # -- worker management ----------------------------------------------------------------
    def _spawn(self) -> _Worker:
        signal_timeout = max(1, int(self.timeout_s // 2))
        proc = subprocess.Popen(
            [sys.executable, "-I", _WORKER, str(self.memory_mb), str(signal_timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1"})
        return _Worker(proc=proc)

    def _kill(self, w: _Worker) -> None:
        w.proc.kill()
        w.proc.wait()
        for f in (w.proc.stdin, w.proc.stdout):
            if f is not None:
                f.close()

    def close(self) -> None:
        with self._lock:
            for w in self._workers:
                self._kill(w)
            self._workers = []

    # -- verification ---------------------------------------------------------------------
    def verify_many(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[bool, str]]:
        """(equal, detail) for each (gold, predicted) pair, using math-verify only.

        Verdicts are cached (deterministic; timeouts and crashes are not cached), so answers a
        policy repeats across steps are verified once.
        """
        with self._lock:
            misses = list(dict.fromkeys(p for p in pairs if p not in self._cache))
            for pair, verdict in zip(misses, self._run(misses)):
                if not verdict[1].startswith(("timeout", "verifier")):
                    if len(self._cache) >= self.cache_size:
                        self._cache.pop(next(iter(self._cache)))  # oldest first
                    self._cache[pair] = verdict
                else:
                    self._uncached[pair] = verdict
            out = [self._cache.get(p) or self._uncached[p] for p in pairs]
            self._uncached.clear()
            return out

    def _run(self, pairs: list[tuple[str, str]]) -> list[tuple[bool, str]]:
        if not pairs:
            return []
        results: list[tuple[bool, str] | None] = [None] * len(pairs)
        pending = list(range(len(pairs)))[::-1]  # pop() takes the first request
        while len(self._workers) < min(self.n_workers, max(1, len(pairs))):
            self._workers.append(self._spawn())
        self.stats["requests"] += len(pairs)
        while pending or any(w.job is not None for w in self._workers):
            for w in self._workers:
                if w.ready and w.job is None and pending:
                    w.job = pending.pop()
                    w.deadline = time.monotonic() + self.timeout_s
                    w.proc.stdin.write(json.dumps(pairs[w.job]).encode() + b"\n")
                    w.proc.stdin.flush()
            busy = [w for w in self._workers if w.job is not None]
            waiting = [w for w in self._workers if not w.ready or w.job is not None]
            now = time.monotonic()
            wait_s = min((w.deadline - now for w in busy), default=60.0)
            fds = {w.proc.stdout.fileno(): w for w in waiting}
            readable, _, _ = select.select(list(fds), [], [], max(0.0, wait_s))
            for fd in readable:
                self._on_output(fds[fd], results)
            now = time.monotonic()
            for i, w in enumerate(self._workers):
                if w.job is not None and now >= w.deadline and results[w.job] is None:
                    results[w.job] = (False, f"timeout after {self.timeout_s:g} s")
                    self.stats["timeouts"] += 1
                    self._replace(i)
        return [r if r is not None else (False, "verifier failed") for r in results]

    def _replace(self, i: int) -> None:
        self._kill(self._workers[i])
        self._workers[i] = self._spawn()
        self.stats["restarts"] += 1

    def _on_output(self, w: _Worker, results: list) -> None:
        chunk = os.read(w.proc.stdout.fileno(), 65536)
        if not chunk:  # the worker died (e.g. killed by the OOM killer): fail its job
            if not w.ready:
                raise RuntimeError("a math-verify worker exited during start-up; check that "
                                   f"`{sys.executable} -c 'import math_verify'` works")
            if w.job is not None:
                results[w.job] = (False, "verifier worker died")
                w.job = None
            self._replace(self._workers.index(w))
            return
        w.buf += chunk
        while b"\n" in w.buf:
            line, w.buf = w.buf.split(b"\n", 1)
            msg = json.loads(line)
            if msg == "ready":
                w.ready = True
            elif w.job is not None:
                results[w.job] = (bool(msg[0]), str(msg[1]))
                if "does not parse" in results[w.job][1] or "error" in results[w.job][1]:
                    self.stats["failures"] += 1
                w.job = None


_default: MathVerifierPool | None = None
_default_lock = threading.Lock()


def default_pool() -> MathVerifierPool:
    """The process-wide pool (2 workers, 5 s timeout), created on first use, closed at exit."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathVerifierPool(workers=min(2, os.cpu_count() or 1))
            atexit.register(_default.close)
        return _default


def check_math(gold: str, predicted: str, pool: MathVerifierPool | None = None) -> tuple[bool, str]:
    """(equal, detail): fast integer path, else math-verify under a wall-clock timeout."""
    return check_math_many([(gold, predicted)], pool)[0]


def check_math_many(pairs: Sequence[tuple[str, str]],
                    pool: MathVerifierPool | None = None) -> list[tuple[bool, str]]:
    """`check_math` for many pairs: fast path in-process, the rest in parallel workers."""
    out: list[tuple[bool, str] | None] = [fast_check(g, p) for g, p in pairs]
    slow = [i for i, r in enumerate(out) if r is None]
    if slow:
        unique = list(dict.fromkeys(pairs[i] for i in slow))  # repeated answers verify once
        verdicts = dict(zip(unique, (pool or default_pool()).verify_many(unique)))
        for i in slow:
            out[i] = verdicts[pairs[i]]
    return out  # type: ignore[return-value]
