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

`size_family(seed)` samples a family of runs that differ only in model size (or generation
length), for the forecast across scale (`scalerl.fit.forecast.across`): per size N (parameters;
n = N / `reference`, 1e9 by default), the gap 1 - A = gap0 n^-alpha, C_mid = c_mid0 n^beta
and B = b, each times a log-normal size-to-size deviation (`scatter`, sd of the log),
R0 = 1 - r0_gap0 n^-r0_alpha exactly; every run evaluated at the same compute (0 = the base model,
then `points` evals up to `budget_mult` x the largest size's C_mid), each eval a binomial
pass rate over `n_eval` samples.

Deliberately left out: other noise models for the Table 1 curves (binomial counts, correlated
residuals) and curves that collapse; tests build those themselves.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from scalerl.fit.curves.sigmoid import sigmoid

__all__ = ["TABLE1", "TABLE1_R0", "SyntheticCurve", "table1_curve", "SizeFamily", "size_family"]

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


@dataclasses.dataclass(frozen=True)
class SizeFamily:
    sizes: np.ndarray  # [S] parameters, smallest first
    compute: np.ndarray  # [N] the evals' compute, shared by every run (0 = base model)
    reward: np.ndarray  # [S, N] noisy pass rates
    A: np.ndarray  # [S] true parameters per size
    B: np.ndarray
    C_mid: np.ndarray
    R0: np.ndarray

    def runs(self, k: int | None = None) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """(size, compute, reward) of the first k sizes (all by default)."""
        return [(float(s), self.compute, self.reward[i]) for i, s in
                enumerate(self.sizes[:k])]


def size_family(seed: int, sizes=(0.5e9, 1.5e9, 3e9, 7e9, 14e9), *, reference: float = 1e9,
                gap0: float = 0.5,
                alpha: float = 0.3, c_mid0: float = 2000.0, beta: float = 0.4, b: float = 1.8,
                r0_gap0: float = 0.8, r0_alpha: float = 0.15,
                scatter: tuple[float, float, float] = (0.1, 0.15, 0.1), n_eval: int = 1000,
                points: int = 30, budget_mult: float = 6.0) -> SizeFamily:
    rng = np.random.default_rng([seed, 39])
    n = np.asarray(sizes, float) / reference  # [S]
    dev = rng.normal(0.0, 1.0, (3, n.size)) * np.asarray(scatter, float)[:, None]  # [3, S]
    a = 1.0 - np.minimum(gap0 * n ** -alpha * np.exp(dev[0]), 0.95)
    c_mid = c_mid0 * n ** beta * np.exp(dev[1])
    bs = b * np.exp(dev[2])
    r0 = 1.0 - r0_gap0 * n ** -r0_alpha
    compute = np.linspace(0.0, budget_mult * c_mid0 * n[-1] ** beta, points + 1)  # [N]
    truth = sigmoid(compute[None, :], a[:, None], bs[:, None], c_mid[:, None], r0[:, None])
    reward = rng.binomial(n_eval, np.clip(truth, 0.0, 1.0)) / n_eval  # [S, N]
    return SizeFamily(np.asarray(sizes, float), compute, reward, a, bs, c_mid, r0)
