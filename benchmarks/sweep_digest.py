"""Do two or more runs of the same sweep config agree? Digests of their results, compared.

    .venv/bin/python benchmarks/sweep_digest.py RESULTS_A RESULTS_B [RESULTS_C ...]

Prints, per results directory, how many eval tables, fits, prediction tables and weight files
it holds, then every path whose digest differs from the first directory's
(`scalerl.sweep.digest`: eval tables by columns and rows without the measured device-hours,
fits by their whole record but file paths), and the fitted parameters of the first directory
(model, L, task, A, B, C_mid, R0, R², converged) so a reader can compare them with the
figures in BENCHMARKS.md. Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scalerl.sweep.digest import differing, results_digests


def _kinds(digests: dict[str, str]) -> str:
    count = {"eval": 0, "fit": 0, "predictions": 0, "weights": 0}
    for path in digests:
        kind = ("eval" if "/eval/" in path or "/downstream/" in path else
                "fit" if path.endswith("fit.json") else
                "predictions" if path.endswith("predictions.parquet") else "weights")
        count[kind] += 1
    return ", ".join(f"{v} {k}" for k, v in count.items())


def fits_table(results: Path) -> str:
    lines = ["| model | L | task | A | B | C_mid | R0 | R² | converged |", "|---|" * 1 + "---|" * 8]
    for path in sorted(results.glob("runs/*/fit/task=*/fit.json")):
        fit = json.loads(path.read_text())
        meta = fit.get("meta", {})
        r2 = fit.get("r2")
        lines.append(f"| {meta.get('model')} | {meta.get('gen_len')} | {meta.get('task')} | "
                     f"{fit['A']:.4f} | {fit['B']:.3f} | {fit['C_mid']:.4g} | {fit['R0']:.4f} | "
                     f"{'–' if r2 is None else format(r2, '.4f')} | {fit['converged']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results_dir of each sweep")
    args = parser.parse_args()
    digests = [results_digests(r) for r in args.results]
    status = 0
    for path, d in zip(args.results, digests):
        print(f"{path}: {_kinds(d)}")
    for path, d in zip(args.results[1:], digests[1:]):
        diff = differing(digests[0], d)
        print(f"{path} vs {args.results[0]}: "
              + ("identical" if not diff else f"{len(diff)} differ: " + ", ".join(diff)))
        status |= bool(diff)
    print(fits_table(args.results[0]))
    return status


if __name__ == "__main__":
    sys.exit(main())
