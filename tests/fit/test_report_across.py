"""The report's "Forecast across scale" section (scalerl.fit.report.across) on synthetic sweep
tables of 2, 3 and 4 model sizes (fit.json records of seeded `size_family` runs), along
generation length, without sizes, and through `scalerl report --size`."""

import pytest

from scalerl.cli import main
from scalerl.fit import FitConfig, predict_across
from scalerl.fit.curves.curve import fit_curve
from scalerl.fit.curves.synthetic import size_family
from scalerl.fit.report.across import across_markdown, next_size_up
from scalerl.fit.report.scaling import collect_records
from scalerl.utils.io import write_json_atomic

CONFIG = FitConfig(bootstrap_n=0)
BY = ["model", "gen_len", "recipe", "task"]


def _records(fam, k, *, axis="model", names=None):
    """fit.json records of the first k runs of `fam`, one sweep cell each along `axis`."""
    out = []
    for i in range(k):
        fit = fit_curve(fam.compute, fam.reward[i], CONFIG)
        meta = {"model": (names or [f"m{j}" for j in range(k)])[i], "gen_len": 64,
                "recipe": "scalerl", "task": "math"}
        if axis == "gen_len":
            meta.update(model="tiny-s", gen_len=int(fam.sizes[i]))
        out.append(fit.to_dict(compute_col="step", reward_col="pass_rate", group={},
                               meta=meta))
    return out


def _sizes(fam, k):
    return {f"m{i}": float(fam.sizes[i]) for i in range(k)}


def test_next_size_up_is_the_sweeps_ratio():
    assert next_size_up([1e9, 4e9]) == pytest.approx((16e9, 4.0))
    assert next_size_up([0.5e9, 1.5e9, 3e9]) == pytest.approx((3e9 * 6 ** 0.5, 6 ** 0.5))


def test_two_sizes_state_the_refusal():
    fam = size_family(21)
    text = across_markdown(_records(fam, 2), BY, _sizes(fam, 2))
    assert "## Forecast across scale" in text and "### model: m0 (500M) < m1 (1.5B)" in text
    row = [line for line in text.splitlines() if line.startswith("| 64 | scalerl | math |")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "–" and cells[4] == f"{fam.reward[1, -1]:.3f}"  # no forecast; reached
    assert cells[6] == f"{fam.reward[0, -1]:.3f}"  # the naive forecast: m0's last eval
    assert cells[-1] == "refused: the A law has 1 distinct model size(s) to fit, it needs 3"
    assert "next model up 4.5B parameters: refused: the A law has" in text
    assert "it needs 3" in text.split("Next model up")[1]


def test_three_sizes_give_the_next_size_up():
    fam = size_family(22)
    records = _records(fam, 3)
    text = across_markdown(records, BY, _sizes(fam, 3))
    nxt, ratio = next_size_up(fam.sizes[:3])
    direct = predict_across(fam.runs(3), nxt, fam.compute[-1], None, CONFIG)
    assert direct.status == "ok"
    line = [ln for ln in text.splitlines() if ln.startswith("- gen_len=64, recipe=scalerl, "
                                                            "task=math: next model up")][0]
    assert f"next model up 7.35B parameters: predicted A {direct.A:.3f} " \
           f"[{direct.A_lo:.3f}, {direct.A_hi:.3f}]" in line
    # every run was evaluated to the same step: the schedule gives the next size that step
    assert f"final {direct.predicted_final:.3f} [{direct.observed_final_lo:.3f}, " \
           f"{direct.observed_final_hi:.3f}] at {fam.compute[-1]:.3g} step" in line
    assert f"= 3B x {ratio:.3g}, the sweep's ratio" in text
    # leave-largest-out has two smaller sizes: refused, and the table says so
    assert "refused: the A law has 2 distinct model size(s) to fit, it needs 3 (two sizes fix " \
           "a line" in text


def test_four_sizes_forecast_the_largest_beside_what_it_reached():
    fam = size_family(23)
    text = across_markdown(_records(fam, 4), BY, _sizes(fam, 4))
    base = fam.reward[3, 0]  # the largest run's measured base score (its compute-0 eval)
    direct = predict_across(fam.runs(3), fam.sizes[3], fam.compute[-1], base, CONFIG)
    assert direct.status == "ok"
    row = [line for line in text.splitlines() if line.startswith("| 64 | scalerl | math |")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    reached, naive = fam.reward[3, -1], fam.reward[2, -1]
    assert cells[3] == f"{direct.predicted_final:.3f} [{direct.observed_final_lo:.3f}, " \
                       f"{direct.observed_final_hi:.3f}]"
    assert cells[4:8] == [f"{reached:.3f}", f"{direct.predicted_final - reached:+.3f}",
                          f"{naive:.3f}", f"{naive - reached:+.3f}"]
    assert cells[8] == f"{direct.A:.3f} [{direct.A_lo:.3f}, {direct.A_hi:.3f}]"
    assert cells[-1] == "ok"
    assert "naive (m2)" in text


def test_generation_length_axis():
    fam = size_family(24, sizes=(2048, 4096, 8192), reference=2048, scatter=(0.0, 0.0, 0.0),
                      n_eval=20000)
    text = across_markdown(_records(fam, 3, axis="gen_len"), BY)  # lengths need no sizes
    assert "### gen_len: 2048 < 4096 < 8192" in text
    assert "Next gen_len up: 16.4k tokens = 8.19k x 2" in text
    direct = predict_across(fam.runs(3), 16384, fam.compute[-1], None, CONFIG, axis="gen_len")
    assert f"next gen_len up 16.4k tokens: predicted A {direct.A:.3f}" in text
    assert "### model" not in text  # one model: no model axis


def test_unknown_sizes_are_named_with_the_fix():
    fam = size_family(25)
    text = across_markdown(_records(fam, 3, names=["small", "Qwen3-1.7B", "large"]), BY)
    assert "No forecast: the size of small, large is not known" in text
    assert "--size MODEL=0.6B" in text


def test_scalerl_report_reads_sizes_from_model_directories(tmp_path):
    fam = size_family(22)
    for i, record in enumerate(_records(fam, 3)):
        write_json_atomic(tmp_path / "fits" / f"m{i}" / "fit.json", record)
        base = tmp_path / "models" / f"m{i}" / "base"
        base.mkdir(parents=True)
        write_json_atomic(base / "base_info.json", {"parameters": int(fam.sizes[i])})
    sizes = [arg for i in range(3) for arg in ("--size", f"m{i}={tmp_path}/models/m{i}/base")]
    assert main(["report", str(tmp_path / "fits"), "--out", str(tmp_path / "rep"),
                 *sizes]) == 0
    text = (tmp_path / "rep" / "scaling.md").read_text()
    assert text.index("## Does more scale") < text.index("## Forecast across scale")
    expected = across_markdown(collect_records([tmp_path / "fits"]), BY,
                               {f"m{i}": float(fam.sizes[i]) for i in range(3)})
    assert expected.strip() in text
    assert "next model up 7.35B parameters: predicted A" in text


def test_no_section_without_a_scale_axis():
    fam = size_family(26)
    records = _records(fam, 2, names=["m0", "m0"])
    records[1]["meta"]["recipe"] = "dapo"
    assert across_markdown(records, BY, {"m0": 1e9}) == ""
