"""A prior over the shape of RL compute-performance curves, learned from many public runs.

Every run is described by the sigmoid of `scalerl.fit.curves.sigmoid` with R0 given (the base
model's eval) and three shape parameters, each on a scale where a Normal prior is natural:

    theta = (log B, log(C_mid / F), logit h),    h = (A - R0) / (1 - R0)

B the exponent, C_mid the midpoint relative to the compute F the run is planned to reach (the
final compute a forecast is made for), h the share of the headroom 1 - R0 the run gains. The
mean curve is then R(c) = R0 + (1 - R0) expit(logit h) expit(B (log(c / F) - log(C_mid / F))).
The parameterisation is unit-free (any compute axis, any eval set) but needs pass rates in
[0, 1] with R0 < 1 (`supports`): rewards on other scales get no prior.

`CurvePrior` holds, per parameter, the population mean `mean`, the spread between sources
`between_sd` (runs of different groups, models, tasks) and within a source `within_sd` (runs
of one sweep: one group's runs of a recipe family, which share most of their shape; Khatri et
al. 2025 find B and C_mid set mostly by the recipe). A run alone is drawn from
N(mean, between_sd^2 + within_sd^2) (`total_sd`); the runs of one sweep share a group mean
drawn from N(mean, between_sd^2) and scatter about it with within_sd (`scalerl.fit.forecast.joint`).
The sds are diagonal (the parameters' correlations are left to each run's likelihood).

Also carried: the eval-noise prior (`noise_sd` s0 with `noise_dof` nu0 degrees of freedom: a
scaled inverse chi-square for the residual variance of one eval around the curve, combined
with a run's own residuals), and the interval calibration (`kappa`, `kappa_gain`): the forecast
of a run at F made from points up to compute c carries a discrepancy of variance
(kappa log(F / c))^2 + (kappa_gain |R(F) - R(c)|)^2 on top of the posterior's and the eval
noise's. The curve is not exactly a sigmoid: the farther ahead, and the more rise the posterior
still expects, the larger the miss; a run that has flattened (R(F) ~ R(c)) keeps only the
horizon term. Both are set so that the intervals cover the held-out sources' finals at
`calibrated_at` with the smallest median width (see `scalerl.fit.forecast.corpus`); a prior file
without `kappa_gain` has 0 there (the horizon term alone). `provenance` says which corpus
(commit, sources, curves) and which procedure built it.

The prior ships with the package as `curve_prior.json` next to this file (`shipped_prior`),
rebuilt from the public corpus by `scalerl prior --out PATH` (`scalerl.fit.forecast.corpus.rebuild`).
Deliberately left out: correlations between parameters, priors for rewards outside [0, 1].
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import numpy as np
from scipy.special import expit, logit

from scalerl.utils.io import atomic_path

__all__ = ["CurvePrior", "PARAMS", "SHIPPED_PATH", "shipped_prior", "supports", "to_theta",
           "from_theta", "mean_curve", "PRIOR_VERSION", "THETA_BOUNDS"]

PARAMS = ("log_B", "log_cmid_rel", "logit_gain")
PRIOR_VERSION = 1
SHIPPED_PATH = Path(__file__).with_name("curve_prior.json")
# Box in theta space: B in [0.05, 20] (FitConfig's b_min/b_max), C_mid within e^-12..e^6 of F,
# h within expit(+-10). Keeps the optimiser away from overflow; no data reaches the edges.
THETA_BOUNDS = (np.array([np.log(0.05), -12.0, -10.0]), np.array([np.log(20.0), 6.0, 10.0]))
R0_MAX = 0.999  # a base model already at 1 has no headroom to gain
OPTIONAL_FIELDS = ("provenance", "kappa_gain")  # a prior file may lack them (their defaults)


@dataclasses.dataclass(frozen=True)
class CurvePrior:
    mean: tuple[float, float, float]  # per PARAMS
    between_sd: tuple[float, float, float]
    within_sd: tuple[float, float, float]
    noise_sd: float  # s0: sd of one eval about the curve, prior centre
    noise_dof: float  # nu0: how many evals' worth that prior is
    kappa: float  # discrepancy sd per unit of log(F / c)
    calibrated_at: float  # the nominal coverage kappa was set for
    provenance: dict = dataclasses.field(default_factory=dict)
    kappa_gain: float = 0.0  # discrepancy sd per unit of the rise still expected, |R(F) - R(c)|

    def __post_init__(self):
        for name in ("mean", "between_sd", "within_sd"):
            value = np.asarray(getattr(self, name), float)
            if value.shape != (3,) or not np.isfinite(value).all():
                raise ValueError(f"CurvePrior.{name} must be 3 finite numbers ({', '.join(PARAMS)})"
                                 f", got {getattr(self, name)!r}")
        if min(self.between_sd) <= 0 or min(self.within_sd) <= 0:
            raise ValueError("CurvePrior sds must be positive")
        if not (self.noise_sd > 0 and self.noise_dof > 0 and self.kappa >= 0
                and self.kappa_gain >= 0):
            raise ValueError("CurvePrior needs noise_sd > 0, noise_dof > 0 and kappa, "
                             "kappa_gain >= 0")

    @property
    def total_sd(self) -> np.ndarray:
        """[3] prior sd of one run's theta (between and within sources together)."""
        return np.hypot(np.asarray(self.between_sd), np.asarray(self.within_sd))

    def summary(self) -> str:
        """What the prior was learned from, for outputs: "5 public sources, 108 curves, built
        2026-12-05" (what its provenance records)."""
        prov = self.provenance
        n_curves = prov.get("estimate", {}).get("n_curves")
        parts = [f"{len(prov.get('sources', {}))} public sources"]
        parts += [f"{n_curves} curves"] if n_curves else []
        return ", ".join(parts + [f"built {prov.get('built', '?')}"])

    def to_dict(self) -> dict:
        return {"version": PRIOR_VERSION, "params": list(PARAMS),
                **{f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                   for f in dataclasses.fields(self)}}

    @classmethod
    def from_dict(cls, record: dict) -> CurvePrior:
        if record.get("version") != PRIOR_VERSION or tuple(record.get("params", ())) != PARAMS:
            raise ValueError(f"not a curve prior of version {PRIOR_VERSION} over {PARAMS}: "
                             "rebuild it with `scalerl prior --out PATH`")
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in record and n not in OPTIONAL_FIELDS]
        if missing:
            raise ValueError(f"curve prior lacks {', '.join(missing)}")
        values = {n: record[n] for n in names if n in record}
        for n in ("mean", "between_sd", "within_sd"):
            values[n] = tuple(float(v) for v in values[n])
        return cls(**values)

    def save(self, path: str | Path) -> None:
        """Write the prior as JSON, atomically."""
        with atomic_path(path) as tmp:
            Path(tmp).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CurvePrior:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"curve prior {path} does not exist; build one with "
                                    "`scalerl prior --out PATH`")
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))


@functools.cache
def shipped_prior() -> CurvePrior:
    """The prior that ships with the package (learned from benchmarks/public_curves)."""
    return CurvePrior.load(SHIPPED_PATH)


def supports(reward, r0: float) -> bool:
    """Whether the prior applies: pass rates (all values in [0, 1]) and R0 below 1."""
    y = np.asarray(reward, float)
    return bool(y.size and np.isfinite(y).all() and (y >= 0).all() and (y <= 1).all()
                and 0 <= r0 < R0_MAX)


def to_theta(a: float, b: float, c_mid: float, r0: float, ref: float) -> np.ndarray:
    """(A, B, C_mid) of a run with base reward r0 and reference compute ref -> theta [3]."""
    h = np.clip((a - r0) / (1.0 - r0), 1e-6, 1 - 1e-6)
    return np.array([np.log(b), np.log(c_mid / ref), float(logit(h))])


def from_theta(theta, r0: float, ref: float) -> tuple[float, float, float]:
    """theta [3] -> (A, B, C_mid)."""
    u, v, w = (float(t) for t in theta)
    return r0 + (1.0 - r0) * float(expit(w)), float(np.exp(u)), float(ref * np.exp(v))


def mean_curve(theta, log_rel, r0: float, jacobian: bool = False):
    """The mean curve at log(c / ref) = `log_rel` [N] and, with `jacobian`, d curve / d theta
    [N, 3]."""
    u, v, w = theta
    b, g = np.exp(u), 1.0 - r0
    z = b * (np.asarray(log_rel, float) - v)  # [N]
    s, h = expit(z), expit(w)
    f = r0 + g * h * s
    if not jacobian:
        return f
    ds = g * h * s * (1.0 - s)  # [N]
    jac = np.stack([ds * z, -ds * b, g * h * (1.0 - h) * s], axis=-1)  # [N, 3]
    return f, jac
