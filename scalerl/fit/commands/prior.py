"""`scalerl prior --out PATH [--curves DIR] [--exclude-source S]...`: rebuild the curve prior
from a corpus of public RL eval curves.

Reads the corpus (`DIR/sources.csv` and one `step,value` CSV per curve, the layout of
benchmarks/public_curves, whose README holds the inclusion rule and every curve's provenance),
estimates the prior over curve shape by empirical Bayes and calibrates its intervals by leaving
one source out at a time (`scalerl.fit.forecast.corpus.rebuild`), and writes it as JSON,
atomically, with its provenance (corpus commit, sources, curve counts, procedure, build date,
the calibration's coverage). Progress goes to stderr; it takes minutes (about 4 on one core for
the shipped corpus, several EM fits per left-out source).

    scalerl prior --out my_prior.json                 # the repository's corpus
    scalerl predict runs/ --final-step 500 --prior my_prior.json
    scalerl prior --out scalerl/fit/forecast/curve_prior.json   # rebuild the shipped prior

`--exclude-source S` leaves a source out (sources.csv `source`), e.g. to score forecasts on it
with a prior that never saw it (benchmarks/bench_forecast_loso.py does this for every source).

Deliberately left out: collecting curves (benchmarks/public_curves/extract.py copies them from
public repositories) and choosing the prior a forecast uses (`--prior` of `scalerl predict`,
`race`, `watch`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scalerl.fit.forecast.corpus import DEFAULT_CORPUS, MAX_POINTS, rebuild
from scalerl.utils.log import progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("--out", required=True, type=Path, help="where to write the prior "
                        "(JSON); scalerl/fit/forecast/curve_prior.json is the shipped one")
    parser.add_argument("--curves", type=Path, default=DEFAULT_CORPUS, help="corpus folder "
                        "with sources.csv (default: the repository's benchmarks/public_curves)")
    parser.add_argument("--exclude-source", action="append", default=[], metavar="SOURCE",
                        help="leave this source (sources.csv `source`) out; repeatable")
    parser.add_argument("--max-points", type=int, default=MAX_POINTS, help="evals kept per "
                        f"curve, every k-th and the last (default {MAX_POINTS})")


def run(args: argparse.Namespace) -> int:
    if args.max_points < 4:
        raise ValueError(f"--max-points must be at least 4 (a sigmoid needs 4 points), got "
                         f"{args.max_points}")
    rebuild(args.curves, args.out, exclude_sources=args.exclude_source,
            max_points=args.max_points, log=lambda msg: progress(f"prior: {msg.strip()}"))
    return 0
