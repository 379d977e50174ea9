"""The curve prior (scalerl.fit.forecast.prior), its empirical-Bayes estimate
(scalerl.fit.forecast.corpus), the prior and joint fits (scalerl.fit.forecast.joint) and
predict_final's prior path, on synthetic curves drawn from known priors and on the shipped
prior and corpus."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import expit

from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.forecast.corpus import (
    CorpusCurve,
    estimate_prior,
    read_corpus,
    solve_discrepancy,
    solve_kappa,
    thin,
    weighted_median,
)
from scalerl.fit.forecast.joint import (
    RunData,
    discrepancy_var,
    fit_runs,
    forecast_points,
    prior_intervals,
)
from scalerl.fit.forecast.predict import predict_final
from scalerl.fit.forecast.prior import CurvePrior, from_theta, mean_curve, shipped_prior, to_theta

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "public_curves"
TRUE = CurvePrior(mean=(0.2, -2.0, 0.4), between_sd=(0.3, 0.5, 0.4), within_sd=(0.15, 0.3, 0.3),
                  noise_sd=0.012, noise_dof=5.0, kappa=0.0, calibrated_at=0.95)
STEPS = np.arange(0, 201, 8.0)  # base + 25 evals to step 200


def draw_curve(theta, r0, rng, noise=0.012, steps=STEPS):
    """A run with shape theta (reference compute = its last step) and Normal eval noise."""
    y = mean_curve(theta, np.log(np.maximum(steps, 1e-12) / steps[-1]), r0)
    y[0] = r0
    return np.clip(y + rng.normal(0, noise, steps.size), 0, 1)


def draw_corpus(prior, n_sources, sweeps_per_source, runs_per_sweep, seed):
    rng = np.random.default_rng(seed)
    curves = []
    for s in range(n_sources):
        for g in range(sweeps_per_source):
            m = rng.normal(prior.mean, prior.between_sd)
            r0 = rng.uniform(0.05, 0.4)
            for k in range(runs_per_sweep):
                theta = rng.normal(m, prior.within_sd)
                y = draw_curve(theta, r0, rng)
                curves.append(CorpusCurve(f"s{s}g{g}r{k}.csv", f"src{s}", f"src{s}|g{g}",
                                          "m", "math", np.nan, STEPS.copy(), y))
    return curves


def test_theta_round_trip_and_the_curve_is_the_sigmoid():
    a, b, c_mid, r0, ref = 0.71, 1.7, 35.0, 0.2, 200.0
    theta = to_theta(a, b, c_mid, r0, ref)
    np.testing.assert_allclose(from_theta(theta, r0, ref), (a, b, c_mid), rtol=1e-12)
    c = np.array([5.0, 35.0, 120.0])
    torch.testing.assert_close(torch.tensor(mean_curve(theta, np.log(c / ref), r0)),
                               torch.tensor(sigmoid(c, a, b, c_mid, r0)), rtol=0, atol=1e-12)
    # the analytic Jacobian against central differences
    _, jac = mean_curve(theta, np.log(c / ref), r0, jacobian=True)
    num = np.stack([(mean_curve(theta + e, np.log(c / ref), r0)
                     - mean_curve(theta - e, np.log(c / ref), r0)) / 2e-6
                    for e in np.eye(3) * 1e-6], axis=1)
    np.testing.assert_allclose(jac, num, rtol=1e-6, atol=1e-9)


def test_one_run_joint_fit_is_the_single_fit_under_the_total_prior_sd():
    """K = 1: m profiles out of a Gaussian, so the mode equals the fit under
    N(mean, between^2 + within^2) written as a prior with within_sd ~ 0."""
    rng = np.random.default_rng(3)
    y = draw_curve(np.array([0.1, -2.5, 0.2]), 0.1, rng)
    run = RunData(STEPS[1:9], y[1:9], 0.1, 1, 200.0)
    joint = fit_runs([run], TRUE).runs[0]
    flat = dataclasses.replace(TRUE, between_sd=tuple(TRUE.total_sd), within_sd=(1e-3,) * 3)
    alone = fit_runs([run], flat).runs[0]
    np.testing.assert_allclose(joint.theta, alone.theta, atol=2e-3)


def test_a_run_with_many_points_is_dominated_by_its_own_data():
    """A run far from the prior (midpoint late, sharp) with 200 evals: its fit under the prior
    is the fit under a prior 100 x wider to within half a posterior sd (the prior's pull on a
    mode is ~ posterior var / prior var x the distance: for log B (0.047 / 0.335)^2 x 1.19 =
    0.023, half its posterior sd), and the truth lies within 2 posterior sds."""
    theta = np.array([np.log(4.0), -0.4, -0.5])
    steps = np.arange(0, 1001, 5.0)
    y = draw_curve(theta, 0.3, np.random.default_rng(0), steps=steps)
    run = RunData(steps[1:], y[1:], 0.3, 1, 1000.0)
    wide = dataclasses.replace(TRUE, between_sd=tuple(100 * np.array(TRUE.between_sd)),
                               within_sd=tuple(100 * np.array(TRUE.within_sd)))
    with_prior, without = fit_runs([run], TRUE).runs[0], fit_runs([run], wide).runs[0]
    sd = np.sqrt(np.diag(without.cov))  # [3]
    assert (np.abs(with_prior.theta - without.theta) < sd).all()
    assert (np.abs(with_prior.theta - theta) < 2 * sd).all()
    assert abs(with_prior.forecast(1000.0)[0] - without.forecast(1000.0)[0]) < 0.003
    # the same run seen for only its first 8 evals leans on the prior instead
    early = fit_runs([RunData(steps[1:9], y[1:9], 0.3, 1, 1000.0)], TRUE).runs[0]
    assert abs(early.theta[1] - TRUE.mean[1]) < abs(early.theta[1] - theta[1])


@pytest.mark.slow
def test_empirical_bayes_recovers_the_prior_the_curves_were_drawn_from():
    curves = draw_corpus(TRUE, n_sources=8, sweeps_per_source=2, runs_per_sweep=5, seed=1)
    est = estimate_prior(curves, calibrate=False)
    # the mean of 16 sweep means (8 sources): se = between / 4 ~ 0.08-0.13
    np.testing.assert_allclose(est.mean, TRUE.mean, atol=0.3)
    # within-sweep sds from 80 runs: within 40 %; between from 16 sweeps: within a factor 2
    np.testing.assert_allclose(est.within_sd, TRUE.within_sd, rtol=0.4)
    ratio = np.asarray(est.between_sd) / np.asarray(TRUE.between_sd)
    assert ((ratio > 0.5) & (ratio < 2.0)).all(), ratio
    assert 0.006 < est.noise_sd < 0.02  # the 0.012 noise, seen through the fits' residuals


@pytest.mark.slow
def test_intervals_cover_the_last_eval_at_the_nominal_rate_when_the_model_is_right():
    """Runs drawn from the prior itself, forecast at 25 % and 50 % of their steps with that
    prior (kappa 0: the curves are exact sigmoids): the observed intervals cover the last
    eval about 95 % of the time. 150 draws: a 95 % interval covers 137-148 of them by chance
    with probability ~0.95 (binomial), so 132..150 is asserted."""
    rng = np.random.default_rng(7)
    hits, n = {0.25: 0, 0.5: 0}, 150
    for _ in range(n):
        theta = rng.normal(TRUE.mean, TRUE.total_sd)
        r0 = rng.uniform(0.05, 0.4)
        y = draw_curve(theta, r0, rng)
        for frac in hits:
            k = STEPS <= frac * STEPS[-1]
            fc = forecast_points(STEPS[k], y[k], STEPS[-1], TRUE)
            iv = prior_intervals(fc, TRUE, 0.95)
            hits[frac] += iv.observed[0] <= y[-1] <= iv.observed[1]
    assert all(132 <= h <= n for h in hits.values()), hits


def test_joint_fit_of_a_sweep_helps_its_early_run():
    """Sweeps whose runs share their shape (within-sweep sd small): three runs at 75 % of their
    steps and a new one with 4 evals. The new run's final is forecast better jointly (its
    shape borrowed from the others) than alone, over 8 sweeps. (Runs that are all at the
    same early stage share the same ambiguity between gain and midpoint, which pooling does
    not resolve; benchmarks/bench_forecast_loso.py measures that case on real sweeps.)"""
    prior = dataclasses.replace(TRUE, within_sd=(0.05, 0.08, 0.1))
    rng = np.random.default_rng(11)
    err_alone, err_joint = [], []
    for _ in range(8):
        m = rng.normal(prior.mean, prior.between_sd)
        runs, truth = [], None
        for k, upto in enumerate((19, 19, 19, 5)):  # 75 %, 75 %, 75 %, 4 evals
            theta = rng.normal(m, prior.within_sd)
            r0 = rng.uniform(0.05, 0.3)
            y = draw_curve(theta, r0, rng)
            runs.append(RunData(STEPS[1:upto], y[1:upto], r0, 1, 200.0))
            truth = mean_curve(theta, np.zeros(1), r0)[0] if k == 3 else truth
        new = fit_runs(runs, prior).runs[3]
        err_joint.append(abs(new.forecast(200.0)[0] - truth))
        err_alone.append(abs(fit_runs([runs[3]], prior).runs[0].forecast(200.0)[0] - truth))
    assert np.mean(err_joint) < 0.7 * np.mean(err_alone), (np.mean(err_joint),
                                                             np.mean(err_alone))


def test_solve_kappa_hand_derived():
    # errors 1..20 with no other variance, horizon 1: kappa z covers 19 of 20 errors when
    # kappa z >= 19, and not 20: the smallest such kappa is 19 / z
    err = np.arange(1.0, 21.0)
    k = solve_kappa(err, np.zeros(20), np.ones(20), np.ones(20), 0.95)
    assert k == pytest.approx(19.0 / 1.959963984540054, rel=1e-6)
    # already covered at kappa 0: 0
    assert solve_kappa(err * 0.01, np.ones(20), np.ones(20), np.ones(20), 0.95) == 0.0


def test_solve_discrepancy_takes_the_narrowest_pair_at_nominal_coverage():
    """20 forecasts, no other variance: 10 flat ones (no rise ahead, error 0.1 each, horizon
    1) and 10 rising ones (rise ahead 1, error 1..10, horizon 1). The horizon term alone
    (kappa_gain 0) must cover 19 of 20, i.e. errors up to 9: kappa z = 9, width 2 x 9 for
    all. With the gain term the flat ones need only kappa z >= 0.1 while kappa_gain z
    covers the rising ones: at kappa_gain z = 3, (kappa z)^2 + 9 >= 81 (error 9) needs
    kappa z = sqrt(72); the narrowest grid pair is then picked by the median width."""
    z = 1.959963984540054
    err = np.r_[np.full(10, 0.1), np.arange(1.0, 11.0)]
    gain = np.r_[np.zeros(10), np.ones(10)]
    ones = np.ones(20)
    k, g, width, tried = solve_discrepancy(err, np.zeros(20), ones, gain, ones, 0.95,
                                           grid=(0.0, 3.0 / z, 9.0 / z))
    rows = {round(t["kappa_gain"] * z, 6): t for t in tried}
    assert rows[0.0]["kappa"] * z == pytest.approx(9.0, rel=1e-6)
    assert rows[0.0]["median_width"] == pytest.approx(18.0, rel=1e-6)
    assert rows[3.0]["kappa"] * z == pytest.approx(np.sqrt(72.0), rel=1e-6)
    # kappa_gain z = 9 covers 9 rising ones by itself; the flat ones need kappa z >= 0.1
    assert rows[9.0]["kappa"] * z == pytest.approx(0.1, rel=1e-6)
    # widths: 2 sqrt(72) for every forecast at 3 / z; at 9 / z 0.2 (flat) and ~18 (rising):
    # the median (weighted, equal weights) is the 10th smallest: 0.2
    assert (k, g) == (rows[9.0]["kappa"], 9.0 / z) and width == pytest.approx(0.2, rel=1e-6)
    assert weighted_median([3.0, 1.0, 2.0], [1.0, 1.0, 1.0]) == 2.0
    assert weighted_median([1.0, 2.0], [1.0, 3.0]) == 2.0


def test_the_gain_term_widens_a_rising_forecast_and_not_a_flat_one():
    """discrepancy_var = (kappa h)^2 + (kappa_gain |R(F) - R(c)|)^2, with the rise ahead read
    from the posterior's mean curve: a run seen only before its midpoint still expects most of
    its rise; one seen long after its midpoint expects none."""
    prior = dataclasses.replace(TRUE, kappa=0.02, kappa_gain=0.5)
    theta = np.array([1.2, np.log(40 / 200.0), 0.5])  # B ~ 3.3: flat by step 150
    rng = np.random.default_rng(3)
    y = draw_curve(theta, 0.2, rng, noise=0.004)
    early = forecast_points(STEPS[:5], y[:5], 200.0, prior)  # to step 32: before C_mid 40
    late = forecast_points(STEPS[STEPS <= 150], y[STEPS <= 150], 200.0, prior)
    post = late.posterior
    rise = abs(late.predicted - float(post.predict(np.array([144.0]))[0]))
    assert late.gain_ahead == pytest.approx(rise, rel=1e-9)
    assert early.gain_ahead > 0.05 > 0.01 > late.gain_ahead
    for fc in (early, late):
        expected = (0.02 * fc.horizon) ** 2 + (0.5 * fc.gain_ahead) ** 2
        assert discrepancy_var(fc, prior) == pytest.approx(expected, rel=1e-12)
    # a prior file written before kappa_gain existed reads with 0 there
    record = TRUE.to_dict()
    del record["kappa_gain"]
    assert CurvePrior.from_dict(record).kappa_gain == 0.0


def test_thin_keeps_every_kth_and_the_last():
    assert thin(10, 0).tolist() == list(range(10))
    assert thin(10, 4).tolist() == [0, 3, 6, 9]
    assert thin(11, 4).tolist() == [0, 3, 6, 9, 10]


def test_prior_json_round_trip_and_errors(tmp_path):
    path = tmp_path / "p.json"
    TRUE.save(path)
    assert CurvePrior.load(path) == TRUE
    with pytest.raises(FileNotFoundError, match="build one"):
        CurvePrior.load(tmp_path / "missing.json")
    bad = TRUE.to_dict() | {"version": 99}
    with pytest.raises(ValueError, match="rebuild it"):
        CurvePrior.from_dict(bad)
    with pytest.raises(ValueError, match="3 finite numbers"):
        dataclasses.replace(TRUE, mean=(0.0, 1.0))


def test_the_shipped_prior_was_built_from_the_corpus_in_the_repository():
    prior = shipped_prior()
    table = pd.read_csv(CORPUS / "sources.csv")
    evals = table[table["kind"] == "eval"]
    assert prior.provenance["sources"] == evals["source"].value_counts().to_dict()
    assert prior.provenance["estimate"]["n_curves"] == len(evals)
    assert prior.kappa >= 0 and prior.noise_dof >= 1
    assert "calibration" in prior.provenance["estimate"]


def test_corpus_columns_and_reading():
    table = pd.read_csv(CORPUS / "sources.csv", dtype={"params": str})
    assert list(table.columns[-3:]) == ["source", "params", "task"]
    assert table["source"].notna().all() and set(table["task"]) <= {"math", "code", "game",
                                                                     "other"}
    assert table["params"].astype(float).between(1e8, 1e12).all()
    curves = read_corpus(CORPUS, max_points=60)
    assert len(curves) == (table["kind"] == "eval").sum()
    assert max(cv.compute.size for cv in curves) <= 61
    assert all((np.diff(cv.compute) > 0).all() for cv in curves)
    # every source has a step-0 (base model) eval but LESSER's (its README: R0 = first eval)
    no_base = {cv.source for cv in curves if cv.compute[0] != 0}
    assert no_base == {"davidzhangsan/LESSER"}


def test_predict_final_with_a_prior_gives_early_intervals_and_none_keeps_todays_fit():
    rng = np.random.default_rng(5)
    y = draw_curve(np.array([0.2, -2.2, 0.3]), 0.1, rng)
    k = STEPS <= 0.25 * STEPS[-1]
    (p,) = predict_final(STEPS[k], y[k], STEPS[-1], FitConfig(bootstrap_n=20),
                         forms=("sigmoid",), prior=TRUE)
    assert p.status == "ok" and p.interval_status == "ok" and "curve prior" in p.warnings[0]
    assert p.observed_final_lo < p.predicted_final_lo < p.predicted_final < p.predicted_final_hi
    assert p.predicted_final_hi < p.observed_final_hi and p.A_lo < p.A < p.A_hi
    assert p.C_mid_lo < p.C_mid < p.C_mid_hi
    (old,) = predict_final(STEPS[k], y[k], STEPS[-1], FitConfig(bootstrap_n=20),
                           forms=("sigmoid",), prior=None)
    assert old.interval_status in ("no_backtest", "before_c_mid")  # today: none this early
    # not pass rates: the prior does not apply, today's fit is used
    (other,) = predict_final(STEPS[k], 5 * y[k], STEPS[-1], FitConfig(bootstrap_n=0),
                             forms=("sigmoid",), prior=TRUE)
    assert not any("curve prior" in w for w in other.warnings)
    with pytest.raises(ValueError, match="CurvePrior, 'shipped' or None"):
        predict_final(STEPS[k], y[k], STEPS[-1], prior="mine")


def test_mean_curve_gain_is_the_headroom_share():
    theta = np.array([0.0, -1.0, 0.0])  # h = 1/2: A halfway from R0 to 1
    assert from_theta(theta, 0.4, 10.0)[0] == pytest.approx(0.7)
    assert mean_curve(theta, np.array([50.0]), 0.4)[0] == pytest.approx(0.4 + 0.6 * expit(0.0)
                                                                         * 1.0, abs=1e-9)
