"""Fixtures for the fit tests: synthetic per-sample eval Parquet in the docs/design.md layout."""

import numpy as np
import pandas as pd
import pytest

from scalerl.fit.curves.sigmoid import sigmoid

FLOPS_PER_HOUR = 1e13  # arbitrary fixed conversion, so both compute columns are consistent


def eval_frame(run="r1", model="tiny-s", gen_len=64, recipe="scalerl", seed=0, task="math",
               chunks=12, prompts=50, samples=4, a=0.45, b=1.8, c_mid=3.0, r0=0.10,
               hours_per_chunk=1.0):
    """One row per sample; exactly round(p * n) samples correct per chunk (no sampling noise)."""
    rows = []
    n = prompts * samples
    for chunk in range(chunks):
        hours = chunk * hours_per_chunk
        p = sigmoid(hours, a, b, c_mid, r0) if hours > 0 else r0
        n_correct = int(round(p * n))
        for i in range(n):
            rows.append(dict(run=run, model=model, gen_len=gen_len, recipe=recipe, seed=seed,
                             chunk=chunk, step=chunk * 10, compute_flops=hours * FLOPS_PER_HOUR,
                             compute_device_hours=hours, task=task, prompt_id=f"p{i // samples}",
                             sample_idx=i % samples, reward=1.0 if i < n_correct else -1.0,
                             correct=i < n_correct, n_tokens=20, truncated=False,
                             interrupted=False, response="..."))
    return pd.DataFrame(rows)


@pytest.fixture
def write_eval(tmp_path):
    """write_eval(name, **kwargs) -> list of per-chunk Parquet paths (like eval/chunk{k})."""

    def write(name="r1", **kwargs):
        df = eval_frame(run=name, **kwargs)
        folder = tmp_path / "eval" / name
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for chunk, sub in df.groupby("chunk"):
            path = folder / f"chunk{chunk}.parquet"
            sub.to_parquet(path, index=False)
            paths.append(path)
        return paths

    return write


@pytest.fixture
def point_csv(tmp_path):
    """A one-row-per-evaluation CSV with 30 points of a known sigmoid (light noise)."""
    rng = np.random.default_rng(0)
    step = np.arange(0, 3001, 100)
    compute = step * 2.0  # 'GPU-hours'
    pass_rate = sigmoid(compute, 0.62, 1.9, 2000.0, 0.3) + rng.normal(0, 0.004, step.size)
    pass_rate[0] = 0.3
    path = tmp_path / "curve.csv"
    pd.DataFrame({"step": step, "compute": compute, "pass_rate": pass_rate,
                  "loss": rng.normal(size=step.size)}).to_csv(path, index=False)
    return path


@pytest.fixture
def make_eval_frame():
    return eval_frame
