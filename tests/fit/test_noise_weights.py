"""Binomial standard errors, fit weights (hand-derived), the noise floor, weighted fits."""

import numpy as np
import pytest
import torch

from scalerl.fit.curves.noise import binomial_se, binomial_weights, noise_floor
from scalerl.fit.curves.powerlaw import fit_power_law, power_law
from scalerl.fit.curves.sigmoid import FitConfig, FitError, fit_sigmoid, sigmoid


def close(actual, expected, **kw):
    torch.testing.assert_close(torch.as_tensor(np.asarray(actual, float)),
                               torch.as_tensor(np.asarray(expected, float)), **kw)


def test_binomial_se_and_weights_hand_derived():
    # sqrt(0.5 * 0.5 / 100) = 0.05; sqrt(0.1 * 0.9 / 100) = 0.03
    close(binomial_se([0.5, 0.1], [100, 100]), [0.05, 0.03])
    # 1 / se^2 = 400 and 1111.11..., mean 755.56 -> 0.52941, 1.47059
    close(binomial_weights([0.5, 0.1], [100, 100]), [400 / (1511.111 / 2), 1111.111 / 755.5556],
          rtol=1e-5, atol=1e-6)
    # p = 0 on 10 samples is clipped to 1/20: se = sqrt(0.05 * 0.95 / 10) = 0.068920
    close(binomial_se([0.0], [10], clip=True), [np.sqrt(0.05 * 0.95 / 10)])
    assert binomial_se([0.0], [10])[0] == 0.0
    with pytest.raises(ValueError, match=r"pass rates in \[0, 1\]"):
        binomial_se([1.5], [10])
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        binomial_se([0.5], [0])


def test_noise_floor_of_a_final_pass_rate():
    floor = noise_floor(0.5, 800)
    se = np.sqrt(0.25 / 800)  # 0.017678
    close([floor.se, floor.half_width, floor.min_difference],
          [se, 1.959964 * se, 1.959964 * np.sqrt(2) * se], rtol=1e-6, atol=1e-9)
    assert "0.035" in floor.statement() and "800 samples" in floor.statement()


def _curve(seed=0):
    c = np.linspace(100, 6000, 25)
    y = sigmoid(c, 0.6, 2.0, 2000.0, 0.3) + np.random.default_rng(seed).normal(0, 0.01, c.size)
    return c, y


def test_equal_weights_give_the_unweighted_fit():
    c, y = _curve()
    cfg = FitConfig(bootstrap_n=0)
    plain = fit_sigmoid(c, y, cfg, r0=0.3)
    equal = fit_sigmoid(c, y, cfg, r0=0.3, weights=np.full(c.size, 3.0))
    close([equal.A, equal.B, equal.C_mid], [plain.A, plain.B, plain.C_mid], rtol=1e-6, atol=1e-7)
    close(equal.sse, 3.0 * plain.sse, rtol=1e-6, atol=1e-12)  # sum of w r^2 with w = 3


def test_weighted_fit_minimises_the_weighted_sse_and_ignores_a_down_weighted_outlier():
    c, y = _curve(1)
    y_bad = y.copy()
    y_bad[-3] -= 0.2  # one wild point
    w = np.ones(c.size)
    w[-3] = 1e-6
    cfg = FitConfig(bootstrap_n=0)
    weighted = fit_sigmoid(c, y_bad, cfg, r0=0.3, weights=w)
    plain = fit_sigmoid(c, y_bad, cfg, r0=0.3)
    keep = np.arange(c.size) != c.size - 3
    dropped = fit_sigmoid(c[keep], y[keep], cfg, r0=0.3)  # weight ~0 = the point left out
    close([weighted.A, weighted.B], [dropped.A, dropped.B], rtol=0, atol=2e-3)
    assert abs(plain.A - dropped.A) > 0.005
    resid = weighted.predict(c) - y_bad
    close(weighted.sse, float(w @ resid ** 2), rtol=1e-9, atol=1e-12)
    other = plain.predict(c) - y_bad
    assert weighted.sse <= float(w @ other ** 2)
    with pytest.raises(FitError, match="positive finite"):
        fit_sigmoid(c, y, cfg, r0=0.3, weights=np.zeros(c.size))


def test_weighted_power_law():
    c = np.linspace(10, 1000, 20)
    y = power_law(c, 0.7, 2.0, 0.5)
    y_bad = y.copy()
    y_bad[5] += 0.3
    w = np.ones(c.size)
    w[5] = 1e-8
    fit = fit_power_law(c, y_bad, weights=w)
    close([fit.A, fit.D, fit.B], [0.7, 2.0, 0.5], rtol=1e-3, atol=1e-3)
    assert abs(fit_power_law(c, y_bad).A - 0.7) > 0.01
