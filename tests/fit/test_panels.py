"""The small-multiples curves figure (scalerl.fit.report.panels) and the bootstrap draws it
reads."""

import copy

import numpy as np
import pytest
import torch

from scalerl.fit.curves.curve import fit_curve
from scalerl.fit.curves.sigmoid import FitConfig, sigmoid
from scalerl.fit.report.panels import _grid, _ordered, curve_band, plot_panels


def _record(task="math", model="tiny-s", gen_len=56, recipe="scalerl", a=0.5, seed=0,
            bootstrap_n=20):
    rng = np.random.default_rng(seed)
    c = np.geomspace(1e10, 1e12, 8)
    y = sigmoid(c, a, 1.8, 1e11, 0.3) + rng.normal(0, 0.004, c.size)
    fit = fit_curve(np.r_[0.0, c], np.r_[0.3, y], FitConfig(bootstrap_n=bootstrap_n))
    return fit.to_dict(compute_col="compute_flops", reward_col="correct", group={"task": task},
                       meta={"model": model, "gen_len": gen_len, "recipe": recipe})


def test_bootstrap_draws_are_the_replicates_behind_the_intervals():
    record = _record(bootstrap_n=30)
    iv = record["intervals"]
    draws = np.asarray(iv["draws"])
    assert draws.shape == (iv["n_ok"], 3)
    alpha = (1 - iv["confidence"]) / 2
    for k, name in enumerate(("A", "B", "C_mid")):
        lo, hi = np.quantile(draws[:, k], [alpha, 1 - alpha])
        assert iv[name] == pytest.approx([lo, hi])


def test_curve_band_is_the_pointwise_percentile_of_the_replicate_curves():
    # Two replicates differing in A only; at C = C_mid each curve is R0 + (A - R0) / 2, and the
    # 2.5 % / 97.5 % quantiles of two values x0 < x1 are x0 + q (x1 - x0) (linear interpolation).
    record = {"R0": 0.2, "intervals": {"confidence": 0.95,
                                       "draws": [[0.4, 2.0, 100.0], [0.6, 2.0, 100.0]]}}
    lo, hi = curve_band(record, np.array([100.0, 1e9]))
    mid0, mid1 = 0.2 + (0.4 - 0.2) / 2, 0.2 + (0.6 - 0.2) / 2  # 0.3, 0.4
    torch.testing.assert_close(torch.tensor([lo[0], hi[0]], dtype=torch.float64),
                               torch.tensor([mid0 + 0.025 * (mid1 - mid0),
                                             mid0 + 0.975 * (mid1 - mid0)], dtype=torch.float64))
    # far right the curves sit at their A: the band tends to the quantiles of A
    torch.testing.assert_close(torch.tensor([lo[1], hi[1]], dtype=torch.float64),
                               torch.tensor([0.4 + 0.025 * 0.2, 0.4 + 0.975 * 0.2],
                                            dtype=torch.float64),
                               atol=1e-6, rtol=0)
    assert curve_band({"R0": 0.2, "intervals": None}, np.array([1.0])) is None
    assert curve_band({"R0": 0.2, "intervals": {"A": [0.1, 0.2]}}, np.array([1.0])) is None


def test_order_puts_named_values_first_then_natural():
    assert _ordered(["tiny-m", "tiny-s", "tiny-l"], ["tiny-s", "tiny-m"]) == [
        "tiny-s", "tiny-m", "tiny-l"]
    assert _ordered([128, 56, 80, 56], None) == [56, 80, 128]  # numbers by value


def test_grid_columns_per_task_rows_per_other_key():
    panels = [("dapo", "code"), ("dapo", "math"), ("scalerl", "code"), ("scalerl", "math")]
    assert _grid(panels, [1], 3) == {("dapo", "code"): (0, 0), ("dapo", "math"): (0, 1),
                                     ("scalerl", "code"): (1, 0), ("scalerl", "math"): (1, 1)}
    flat = [("a",), ("b",), ("c",), ("d",)]
    assert _grid(flat, [0], 3) == {("a",): (0, 0), ("b",): (0, 1), ("c",): (0, 2),
                                   ("d",): (1, 0)}


def test_plot_panels_one_panel_per_task_and_recipe(tmp_path):
    base = _record()  # one fit, relabelled: the layout depends on the labels only
    records = []
    for task in ("math", "code"):
        for model in ("tiny-s", "tiny-m"):
            for gen_len in (56, 80):
                for recipe in ("scalerl", "dapo"):
                    r = copy.deepcopy(base)
                    r["group"] = {"task": task}
                    r["meta"] = {"model": model, "gen_len": gen_len, "recipe": recipe}
                    records.append(r)
    del records[0]["intervals"]["draws"]  # an older fit.json: A bar instead of the band
    records[1]["converged"] = False
    out = tmp_path / "curves.png"
    layout = plot_panels(records, out, by=("model", "gen_len", "recipe", "task"),
                         order={"model": ["tiny-s", "tiny-m"]})
    assert layout == {"recipe=dapo, task=code": (0, 0), "recipe=dapo, task=math": (0, 1),
                      "recipe=scalerl, task=code": (1, 0), "recipe=scalerl, task=math": (1, 1)}
    assert out.read_bytes()[:4] == b"\x89PNG"
    # one recipe only: it goes into the title, one row of task panels
    layout = plot_panels([r for r in records if r["meta"]["recipe"] == "scalerl"], out,
                         by=("model", "gen_len", "recipe", "task"))
    assert layout == {"task=code": (0, 0), "task=math": (0, 1)}
    # no task at all: a single panel
    single = _record()
    single["group"] = {}
    assert plot_panels([single], out) == {"all fits": (0, 0)}
    with pytest.raises(ValueError, match="at least one fit record"):
        plot_panels([], out)
