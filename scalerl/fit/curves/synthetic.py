"""Synthetic curves from the paper's Table 1, for tests and benchmarks of the fitter.

Table 1 (App. A.13) lists (C_mid, B, A) of the Section-5 runs, compute in GPU-hours. The paper
does not print R0; `TABLE1_R0 = 0.30` is our choice (below every A by 0.28-0.41, a plausible
pass rate for an SFT'd 8B model on Polaris prompts).

`table1_curve(row, seed)` samples one run: `n_points` evaluations at equal step intervals
(the paper evaluates every 100 steps; ~75 points exist for its Fig. 1 run), compute linear in
steps up to `budget_mult` x C_mid, Gaussian noise sigma on each pass rate (a mean@16 over
1,000 prompts has sigma ~ 0.01). The default budget_mult = 6 is the smallest multiple the
paper's own budgets reach (16k GPU-h LOO runs / C_mid 2542 = 6.3; Section 5: 100k / 10909 =
9.2, 50k / 4242 = 11.8); `benchmarks/bench_fit.py --table1-seeds` measures other multiples.

Deliberately left out: other noise models (binomial counts, correlated residuals) and curves
that collapse; tests build those themselves.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from scalerl.fit.curves.sigmoid import sigmoid

__all__ = ["TABLE1", "TABLE1_R0", "SyntheticCurve", "table1_curve"]

# (experiment, C_mid [GPU-h], B, A) — PAPER_NOTES §3.1, verbatim from the paper's Table 1.
TABLE1 = (
    ("ScaleRL (8B, 14k, batch 768)", 2542.0, 1.92, 0.610),
    ("ScaleRL-32k", 11272.0, 1.89, 0.645),
    ("ScaleRL-8gen", 2542.0, 2.44, 0.585),
    ("ScaleRL-24gen", 3054.0, 2.22, 0.590),
    ("ScaleRL-32gen", 2936.0, 2.07, 0.595),
    ("ScaleRL-Scout", 4242.0, 1.65, 0.710),
    ("ScaleRL-bs512", 2818.0, 1.77, 0.605),
    ("ScaleRL-bs2048", 10909.0, 1.70, 0.645),
    ("math+code, math curve", 2896.0, 2.05, 0.595),
    ("math+code, code curve", 1675.0, 1.09, 0.615),
)
TABLE1_R0 = 0.30


@dataclasses.dataclass(frozen=True)
class SyntheticCurve:
    name: str
    compute: np.ndarray  # [N] GPU-hours
    reward: np.ndarray  # [N] noisy pass rates
    truth: np.ndarray  # [N] noise-free pass rates
    A: float
    B: float
    C_mid: float
    R0: float


def table1_curve(row: int, seed: int = 0, *, budget_mult: float = 6.0, n_points: int = 75,
                 noise: float = 0.01, r0: float = TABLE1_R0) -> SyntheticCurve:
    name, c_mid, b, a = TABLE1[row]
    steps = 100 * np.arange(1, n_points + 1)  # evaluation every 100 steps
    compute = steps / steps[-1] * budget_mult * c_mid  # [N], linear in steps
    truth = sigmoid(compute, a, b, c_mid, r0)
    rng = np.random.default_rng([seed, row])
    reward = truth + rng.normal(0.0, noise, size=compute.size)
    return SyntheticCurve(name, compute, reward, truth, a, b, c_mid, r0)
