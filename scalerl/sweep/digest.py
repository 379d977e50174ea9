"""Digests of a finished sweep's results: what two runs of one config must share.

`results_digests(results_dir)` gives {path relative to results_dir: digest} for
- every eval table (`runs/*/eval/*.parquet`, downstream sets too): its columns and rows without
  the measured device-hours (`scalerl.eval.schema.table_digest`);
- every fit (`runs/*/fit/**/fit.json`): the whole record but its `inputs` (file paths): A, B,
  C_mid, R0, R², the points, the bootstrap intervals, the extrapolation check, the power law;
- every predictions table (`runs/*/predictions.parquet`);
- every checkpoint's weights (`runs/*/chunk*/model.safetensors`) and every base model's.
`differing(a, b)` lists the paths whose digests differ or that one side lacks. With the fixed
PipelineRL schedule (`RunConfig.pipeline_fixed_lag`) on CPU, two runs of one config give equal
digests (tests/workflow/test_reproducible.py; `benchmarks/sweep_digest.py` compares sweeps).

Deliberately left out: steps.parquet and rollouts.parquet (they carry wall-clock timings), the
report's files (drawn from the fits), logs and benchmark files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from scalerl.eval.schema import read_eval_table, table_digest

__all__ = ["differing", "results_digests"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def results_digests(results_dir: str | Path) -> dict[str, str]:
    """{relative path: digest} of a sweep's results (see the module docstring)."""
    root = Path(results_dir)
    if not (root / "runs").is_dir():
        raise FileNotFoundError(f"{root} holds no runs/ directory: not a sweep's results_dir")
    out: dict[str, str] = {}

    def add(path: Path, digest: str) -> None:
        out[str(path.relative_to(root))] = digest

    for path in sorted(root.glob("runs/*/eval/**/*.parquet")):
        add(path, table_digest(read_eval_table(path)))
    for path in sorted(root.glob("runs/*/downstream/**/*.parquet")):
        add(path, table_digest(read_eval_table(path)))
    for path in sorted(root.glob("runs/*/fit/**/fit.json")):
        record = json.loads(path.read_text())
        record.pop("inputs", None)
        add(path, _sha(json.dumps(record, sort_keys=True).encode()))
    for path in sorted(root.glob("runs/*/predictions.parquet")):
        add(path, _sha(pd.read_parquet(path).to_json(double_precision=15).encode()))
    for path in sorted(root.glob("runs/*/chunk*/model.safetensors")):
        add(path, _sha(path.read_bytes()))
    for path in sorted(root.glob("models/*/base/model.safetensors")):
        add(path, _sha(path.read_bytes()))
    return out


def differing(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Paths whose digests differ between `a` and `b`, or that only one of them has."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
