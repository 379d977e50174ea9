"""Throughput of the verifiers: math fast path, math-verify path, and sandboxed code runs.

    python benchmarks/bench_rewards.py [--n-fast 20000] [--n-slow 400] [--n-code 200] [--workers 2]

Prints one line per measurement (items/s and ms per item). The math-verify and sandbox figures
exclude worker start-up (one warm-up batch first); every measured pair is distinct, so the
verdict cache does not help. Section 4 grades the same synthetic tasks with each test type
(function calls, stdin/stdout, a test program of asserts, and a pytest-style test file) with
the fork server on: programs/s at 1 and `--workers` concurrent graders, and the p50 / p99
latency of one program's grading (sequential). Run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")

from scalerl.rewards import MathVerifierPool, check_code, isolation, sandbox, score_many  # noqa: E402
from scalerl.rewards.extract import extract_code  # noqa: E402
from scalerl.rewards.math_verifier import check_math_many  # noqa: E402
from scalerl.tasks import generate_code, generate_math  # noqa: E402


def _report(name: str, n: int, seconds: float) -> None:
    print(f"{name:<46} {n / seconds:10.1f} /s   {1000 * seconds / n:8.3f} ms each   (n={n})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-fast", type=int, default=20000)
    ap.add_argument("--n-slow", type=int, default=400)
    ap.add_argument("--n-code", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    print(f"cpus={os.cpu_count()} workers={args.workers} sandbox isolation={isolation()}")

    # 1. math, integer fast path, through the public score_many (extraction included)
    exs = generate_math(args.n_fast, 0)
    rows = [e.to_row() for e in exs]
    rng = random.Random(0)
    texts = [e.solution if rng.random() < 0.5 else e.solution.replace("\\boxed{", "\\boxed{9")
             for e in exs]
    t0 = time.perf_counter()
    scores = score_many(rows, texts)
    _report("math score_many, integer fast path", len(rows), time.perf_counter() - t0)
    assert sum(s.correct for s in scores) > 0

    # 2. math-verify path (fractions vs decimals, LaTeX) in the worker pool
    pool = MathVerifierPool(workers=args.workers, timeout_s=5.0)
    pairs = []
    for i in range(args.n_slow):  # distinct pairs: repeated ones would be verified once
        a, b = i + 1, rng.choice([2, 4, 5, 8, 10])
        pairs.append((f"\\frac{{{a}}}{{{b}}}", str(a / b) if i % 2 else f"{a}/{b}"))
    check_math_many([(f"\\frac{{1}}{{{k + 3}}}", "0.1") for k in range(2 * args.workers)],
                    pool)  # warm-up: start the workers (distinct pairs: verdicts are cached)
    t0 = time.perf_counter()
    verdicts = check_math_many(pairs, pool)
    _report(f"math-verify path ({args.workers} workers)", len(pairs), time.perf_counter() - t0)
    assert all(ok for ok, _ in verdicts), [d for ok, d in verdicts if not ok][:3]
    pool.close()

    # 3. sandboxed code execution: one child process per completion (5 hidden tests each),
    # forked by the sandbox's fork server (default) or spawned as a fresh interpreter
    cexs = generate_code(args.n_code, 0)
    crows = [e.to_row() for e in cexs]
    usable = sandbox._zygotes_usable
    for how in ("forked", "spawned"):
        sandbox._zygotes_usable = usable and how == "forked"
        for workers in (1, args.workers):
            score_many(crows[:2], [e.solution for e in cexs[:2]], workers=workers)
            t0 = time.perf_counter()
            cs = score_many(crows, [e.solution for e in cexs], workers=workers)
            _report(f"sandbox code runs, {how} ({workers} concurrent)", len(crows),
                    time.perf_counter() - t0)
            assert all(s.correct for s in cs)
    sandbox._zygotes_usable = usable

    # 4. the test types side by side (fork server on): each task's 5 cases as function calls,
    # as stdin/stdout (5 children), as one test program of asserts, as pytest functions
    jobs = {kind: [] for kind in ("function", "stdio", "program (asserts)",
                                  "program (pytest file)")}
    for ex in cexs:
        spec, code = json.loads(ex.tests), extract_code(ex.solution)
        pairs = list(zip(spec["inputs"], spec["outputs"]))
        jobs["function"].append((code, ex.tests))
        jobs["stdio"].append((code + "\nimport json\nprint(json.dumps(f(*json.loads(input()))))\n",
                              json.dumps({"type": "stdio", "inputs": [json.dumps(a) for a, _ in pairs],
                                          "outputs": [json.dumps(o) for _, o in pairs]})))
        asserts = "".join(f"assert f(*{a!r}) == {o!r}\n" for a, o in pairs)
        jobs["program (asserts)"].append((code, json.dumps(
            {"type": "program", "test": asserts, "entry_point": "f"})))
        pytest_file = "from solution import f\n" + "".join(
            f"\ndef test_{i}():\n    assert f(*{a!r}) == {o!r}\n" for i, (a, o) in enumerate(pairs))
        jobs["program (pytest file)"].append((code, json.dumps(
            {"type": "program", "test": pytest_file})))
    for kind, items in jobs.items():
        for code, tests in items[:2]:  # warm-up: the fork servers start
            check_code(code, tests)
        latencies = []
        for code, tests in items:
            t0 = time.perf_counter()
            ok, detail = check_code(code, tests)
            latencies.append(time.perf_counter() - t0)
            assert ok, (kind, detail)
        total = sum(latencies)
        q = statistics.quantiles(latencies, n=100)
        print(f"{kind + ', 1 at a time':<46} {len(items) / total:10.1f} /s   "
              f"p50 {1000 * q[49]:6.1f} ms   p99 {1000 * q[98]:6.1f} ms   (n={len(items)})")
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda job: check_code(*job), items[:2 * args.workers]))
            t0 = time.perf_counter()
            verdicts = list(pool.map(lambda job: check_code(*job), items))
            seconds = time.perf_counter() - t0
        assert all(ok for ok, _ in verdicts)
        _report(f"{kind}, {args.workers} concurrent", len(items), seconds)


if __name__ == "__main__":
    main()
