"""Predict a run's final pass rate and ceiling from its evaluations so far.

`predict_final(compute, reward, final_compute, config)` fits the points evaluated so far (the
same selection as `scalerl.fit.curve.fit_curve`: R0 from the compute-0 point, cutoff, optional
binomial weights) with both forms and returns one `Prediction` each:

- sigmoid (Khatri et al. 2025, Eq. 1): predicted_final = R(final_compute) and A, with
  percentile intervals from the bootstrap of `scalerl.fit.bootstrap` (its replicate draws of
  (A, B, C_mid), each mapped to R(final_compute));
- power law R = A - D / C^B (`scalerl.fit.powerlaw`): the same quantities, intervals from a
  residual bootstrap that refits the power law per replicate (same seed and count).

The intervals are those of the fitted curve (its mean pass rate at the final compute), not of
one noisy measurement of it: `scalerl.fit.noise.noise_floor` gives the latter's spread.

`reached_c_mid` is False while the points have not reached the sigmoid's C_mid (largest
fitted compute < C_mid): before the midpoint A is weakly determined (the curve's bend is not
seen yet) and its interval is usually cut by the A range. The power law has no midpoint; its
rows carry the same flag, a property of the data.

Status per prediction: "ok"; "few_points" (fewer than 4 points to fit: values NaN);
"collapsed" (the curve fell well below its peak, `scalerl.fit.collapse`: values NaN, the run
is not heading for a ceiling); "not_converged" (the fit ran but warns, e.g. a flat curve).

`PREDICTIONS_SCHEMA` is the one schema of `predictions.parquet` (one row per run, task, chunk
and form; `latest_reward`, the reward observed at that chunk, is the persistence forecast a
backtest compares with, NaN in files written before it existed); `merge_predictions` replaces the rows of the (run, task, chunk) it is given and
keeps the rest, `write_predictions` writes atomically. The CLI is `scalerl.fit.predict_cli`.

Deliberately left out: priors on A from other runs and profile-likelihood intervals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from scalerl.fit.bootstrap import bootstrap_intervals
from scalerl.fit.collapse import detect_collapse
from scalerl.fit.curve import point_weights, select_points
from scalerl.fit.powerlaw import fit_power_law
from scalerl.fit.sigmoid import FitConfig, FitError, fit_sigmoid, sigmoid
from scalerl.utils.io import atomic_path

__all__ = ["Prediction", "predict_final", "PREDICTIONS_SCHEMA", "FORMS", "prediction_rows",
           "OPTIONAL_COLUMNS", "merge_predictions", "write_predictions", "read_predictions"]

FORMS = ("sigmoid", "power_law")
KEY_COLUMNS = ("run", "task", "chunk")

PREDICTIONS_SCHEMA = pa.schema([
    pa.field("run", pa.string(), nullable=False),
    pa.field("task", pa.string(), nullable=False),
    pa.field("chunk", pa.int32(), nullable=False),  # latest chunk whose eval was fitted
    pa.field("compute", pa.float64(), nullable=False),  # compute of that chunk
    pa.field("compute_fraction", pa.float64(), nullable=False),  # compute / final compute
    pa.field("form", pa.string(), nullable=False),  # sigmoid | power_law
    pa.field("predicted_final", pa.float64()),  # fitted pass rate at the final compute
    pa.field("predicted_final_lo", pa.float64()),
    pa.field("predicted_final_hi", pa.float64()),
    pa.field("A", pa.float64()),  # fitted asymptote
    pa.field("A_lo", pa.float64()),
    pa.field("A_hi", pa.float64()),
    pa.field("reached_c_mid", pa.bool_(), nullable=False),
    pa.field("n_points", pa.int32(), nullable=False),  # points fitted
    pa.field("status", pa.string(), nullable=False),  # ok | few_points | collapsed | ...
    pa.field("latest_reward", pa.float64()),  # reward of that chunk: the persistence forecast
])
# Columns a predictions file written before they existed lacks; read (and written) as NaN.
OPTIONAL_COLUMNS = ("latest_reward",)


@dataclasses.dataclass(frozen=True)
class Prediction:
    form: str
    predicted_final: float
    predicted_final_lo: float
    predicted_final_hi: float
    A: float
    A_lo: float
    A_hi: float
    reached_c_mid: bool
    n_points: int
    status: str
    warnings: tuple[str, ...] = ()
    params: dict | None = None  # the fitted form's parameters (sigmoid: A, B, C_mid, R0)


def _empty(form: str, n_points: int, status: str, warning: str) -> Prediction:
    nan = float("nan")
    return Prediction(form, nan, nan, nan, nan, nan, nan, False, n_points, status, (warning,))


def _quantiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _power_law_draws(c, y, fit, final_compute, config: FitConfig, weights) -> np.ndarray:
    """Residual bootstrap of the power law: [n_ok, 2] replicate (A, R(final_compute))."""
    rng = np.random.default_rng(config.bootstrap_seed)
    w = np.ones_like(y) if weights is None else weights
    sqrt_w = np.sqrt(w)
    fitted = fit.predict(c)  # [N]
    resid = (y - fitted) * sqrt_w
    resid = resid - resid.mean()
    out = np.empty((config.bootstrap_n, 2))
    n_ok = 0
    for _ in range(config.bootstrap_n):
        yb = fitted + resid[rng.integers(0, c.size, size=c.size)] / sqrt_w  # [N]
        try:
            rep = fit_power_law(c, yb, b_scan_points=100, weights=weights)
        except ValueError:
            continue
        out[n_ok] = (rep.A, float(rep.predict(final_compute)))
        n_ok += 1
    return out[:n_ok]


def _params(form: str, sig, pl) -> dict:
    if form == "sigmoid":
        return {"A": sig.A, "B": sig.B, "C_mid": sig.C_mid, "R0": sig.R0}
    return {"A": pl.A, "D": pl.D, "B": pl.B}


def predict_final(compute, reward, final_compute: float, config: FitConfig | None = None, *,
                  n_samples=None, forms: Sequence[str] = FORMS) -> list[Prediction]:
    """One `Prediction` per form from the points so far; see the module docstring."""
    config = config or FitConfig()
    unknown = [f for f in forms if f not in FORMS]
    if unknown:
        raise ValueError(f"unknown form(s) {unknown}; choose from {', '.join(FORMS)}")
    c_all = np.asarray(compute, float).ravel()
    if not np.isfinite(final_compute) or final_compute <= 0:
        raise ValueError(f"final compute must be positive, got {final_compute}")
    if c_all.size and final_compute < np.nanmax(c_all) * (1 - 1e-9):
        raise ValueError(f"final compute {final_compute:.6g} lies below the largest evaluated "
                         f"compute {np.nanmax(c_all):.6g}; give the run's planned total")
    try:
        sel = select_points(compute, reward, config)
    except FitError as err:
        n = int((c_all > 0).sum())
        return [_empty(f, n, "few_points", str(err)) for f in forms]
    used = sel.used
    c, y = sel.compute[used], sel.reward[used]
    order = np.argsort(c_all, kind="stable")
    n_used = None if n_samples is None else np.asarray(n_samples, float).ravel()[order][used]
    if config.collapse_drop is not None:
        collapse = detect_collapse(c, y, sel.r0, config.collapse_drop)
        if collapse is not None:
            text = (f"collapsed: peak {collapse['peak_reward']:.4g} at compute "
                    f"{collapse['peak_compute']:.4g}, now {collapse['final_reward']:.4g}")
            return [_empty(f, int(c.size), "collapsed", text) for f in forms]
    weights = point_weights(c, y, n_used, config)
    sig = fit_sigmoid(c, y, config, r0=sel.r0, weights=weights)
    reached = bool(c.max() >= sig.C_mid)
    out, pl = [], None
    for form in forms:
        if form == "sigmoid":
            pf, a, warnings = float(sig.predict(final_compute)), sig.A, list(sig.warnings)
            converged = sig.converged
            pf_lo = pf_hi = a_lo = a_hi = float("nan")
            if config.bootstrap_n > 0:
                boot = bootstrap_intervals(c, y, sig, config, weights=weights, keep_draws=True)
                draws = boot["draws"]  # [n_ok, (A, B, C_mid)]
                a_lo, a_hi = boot["A"]
                pf_draws = sigmoid(final_compute, draws[:, 0], draws[:, 1], draws[:, 2], sig.R0)
                pf_lo, pf_hi = _quantiles(np.asarray(pf_draws, float), config.confidence)
                warnings += boot["warnings"]
        else:
            pl = fit_power_law(c, y, weights=weights)
            pf, a, warnings, converged = float(pl.predict(final_compute)), pl.A, \
                list(pl.warnings), pl.converged and not pl.warnings
            pf_lo = pf_hi = a_lo = a_hi = float("nan")
            if config.bootstrap_n > 0:
                draws = _power_law_draws(c, y, pl, final_compute, config, weights)
                a_lo, a_hi = _quantiles(draws[:, 0], config.confidence)
                pf_lo, pf_hi = _quantiles(draws[:, 1], config.confidence)
        if not reached:
            warnings.append("the points have not reached C_mid: A is weakly determined")
        out.append(Prediction(form, pf, pf_lo, pf_hi, float(a), a_lo, a_hi, reached,
                              int(c.size), "ok" if converged else "not_converged",
                              tuple(warnings), params=_params(form, sig, pl)))
    return out


def prediction_rows(run: str, task: str, chunk: int, compute: float, final_compute: float,
                    predictions: Sequence[Prediction], *,
                    latest_reward: float = float("nan")) -> list[dict]:
    """Rows of PREDICTIONS_SCHEMA for the predictions made at one chunk (`latest_reward`: the
    reward observed at that chunk, the persistence forecast a backtest scores against)."""
    return [{"run": str(run), "task": str(task), "chunk": int(chunk), "compute": float(compute),
             "compute_fraction": float(compute) / float(final_compute), "form": p.form,
             "predicted_final": p.predicted_final, "predicted_final_lo": p.predicted_final_lo,
             "predicted_final_hi": p.predicted_final_hi, "A": p.A, "A_lo": p.A_lo,
             "A_hi": p.A_hi, "reached_c_mid": p.reached_c_mid, "n_points": p.n_points,
             "status": p.status, "latest_reward": float(latest_reward)} for p in predictions]


def _table(rows: Sequence[dict] | pd.DataFrame) -> pa.Table:
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if df.empty:
        return PREDICTIONS_SCHEMA.empty_table()
    df = df.assign(**{c: np.nan for c in OPTIONAL_COLUMNS if c not in df.columns})
    missing = [f.name for f in PREDICTIONS_SCHEMA if f.name not in df.columns]
    if missing:
        raise ValueError(f"prediction rows lack column(s) {', '.join(missing)}")
    df = df[[f.name for f in PREDICTIONS_SCHEMA]].sort_values([*KEY_COLUMNS, "form"])
    return pa.Table.from_pandas(df, schema=PREDICTIONS_SCHEMA, preserve_index=False)


def read_predictions(paths: Sequence[str | Path] | str | Path) -> pd.DataFrame:
    """predictions.parquet file(s) concatenated; every file must have PREDICTIONS_SCHEMA."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    frames = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"predictions file {path} does not exist")
        table = pq.read_table(path)
        missing = [n for n in PREDICTIONS_SCHEMA.names if n not in table.column_names
                   and n not in OPTIONAL_COLUMNS]
        if missing:
            raise ValueError(f"{path}: not a predictions.parquet (missing column(s) "
                             f"{', '.join(missing)}); write it with `scalerl predict`")
        have = [n for n in PREDICTIONS_SCHEMA.names if n in table.column_names]
        frame = table.select(have).to_pandas()
        frames.append(frame.assign(**{c: np.nan for c in OPTIONAL_COLUMNS
                                      if c not in frame.columns})[PREDICTIONS_SCHEMA.names])
    if not frames:
        raise ValueError("no predictions files given")
    return pd.concat(frames, ignore_index=True)


def merge_predictions(old: pd.DataFrame | None, new_rows: Sequence[dict]) -> pd.DataFrame:
    """`old` without the (run, task, chunk) keys of `new_rows`, plus `new_rows`, sorted."""
    new = pd.DataFrame(list(new_rows))
    new = new.assign(**{c: np.nan for c in OPTIONAL_COLUMNS if c not in new.columns})
    new = new.reindex(columns=PREDICTIONS_SCHEMA.names)
    if old is None or old.empty:
        merged = new
    else:
        keys = set(map(tuple, new[list(KEY_COLUMNS)].astype(str).to_numpy()))
        stale = old[list(KEY_COLUMNS)].astype(str).apply(tuple, axis=1).isin(keys)
        merged = pd.concat([old[~stale], new], ignore_index=True) if len(new) else old
    return merged.sort_values([*KEY_COLUMNS, "form"]).reset_index(drop=True)


def write_predictions(path: str | Path, rows: Sequence[dict] | pd.DataFrame) -> None:
    """Write rows as predictions.parquet atomically (temp file + rename)."""
    table = _table(rows)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
