"""The report's scale comparison (`scalerl.fit.report.axes`): verdicts and the Markdown section."""

import pandas as pd

from scalerl.fit.report.axes import axes_markdown, basis, flag_reason, verdict


def _fit(model, gen_len, task, A, converged, final, warnings=""):
    return {"model": model, "gen_len": gen_len, "task": task, "A": A, "converged": converged,
            "observed_final": final, "warnings": warnings}


def test_verdict_compares_A_when_both_fits_converged_with_the_paper_margin():
    small = _fit("s", 64, "math", 0.50, True, 0.40)
    assert verdict(small, _fit("m", 64, "math", 0.60, True, 0.10)) == "yes: A +0.100"
    assert verdict(small, _fit("m", 64, "math", 0.45, True, 0.90)) == "no: lower A (-0.050)"
    assert verdict(small, _fit("m", 64, "math", 0.515, True, 0.90)) == (
        "no: same A within 0.02 (+0.015)")


def test_verdict_falls_back_to_the_final_pass_rate_when_a_fit_did_not_converge():
    small = _fit("s", 64, "math", 0.50, True, 0.40)
    text = verdict(small, _fit("m", 64, "math", 0.99, False, 0.45))
    assert text == "A not determined (fit not converged); yes: final pass rate +0.050"
    assert verdict(small, _fit("m", 64, "math", 0.99, False, float("nan"))).startswith(
        "not determined")


def test_axes_markdown_orders_models_as_given_and_gen_len_numerically():
    df = pd.DataFrame([
        _fit("tiny-m", 128, "math", 0.70, True, 0.60),
        _fit("tiny-s", 128, "math", 0.55, True, 0.50),
        _fit("tiny-m", 64, "math", 0.40, True, 0.35),
        _fit("tiny-s", 64, "math", 0.45, True, 0.40),
    ])
    text = axes_markdown(df, ["model", "gen_len", "task"], {"model": ["tiny-s", "tiny-m"]})
    lines = text.splitlines()
    assert "### model: tiny-s < tiny-m" in lines
    assert "### gen_len: 64 < 128" in lines
    # model axis, gen_len 128: tiny-s 0.55 -> tiny-m 0.70; gen_len 64: 0.45 -> 0.40
    assert ("| 128 | math | A 0.550, final 0.500 | A 0.700, final 0.600 | yes: A +0.150 | "
            "A of both fits |") in lines
    assert ("| 64 | math | A 0.450, final 0.400 | A 0.400, final 0.350 | no: lower A (-0.050) "
            "| A of both fits |") in lines
    # gen_len axis, tiny-s: 0.45 at 64 -> 0.55 at 128
    assert ("| tiny-s | math | A 0.450, final 0.400 | A 0.550, final 0.500 | yes: A +0.100 | "
            "A of both fits |") in lines
    # one answer per task and axis
    assert lines.count("- math: yes in 1 of 2 comparison(s) (compared on A).") == 1
    assert lines.count("- math: yes in 2 of 2 comparison(s) (compared on A).") == 1
    assert "curves.png" in text


def test_axes_markdown_is_empty_when_no_scale_axis_varies():
    df = pd.DataFrame([_fit("tiny-s", 64, "math", 0.5, True, 0.4),
                       _fit("tiny-s", 64, "code", 0.3, True, 0.2)])
    assert axes_markdown(df, ["model", "gen_len", "task"]) == ""


UPPER_CMID = ("C_mid = 2.3e+12 sits on the upper end of its range; widen cmid_min/cmid_max "
              "(upper: the run has not reached its midpoint, so A is weakly determined)")
UPPER_B = "B = 20 sits on the upper end of its range; widen b_min/b_max"


def test_flag_reason_reads_the_fit_warnings():
    assert flag_reason(_fit("m", 64, "code", 0.5, True, 0.4)) == ""
    assert flag_reason(_fit("m", 64, "code", 0.5, False, 0.4, UPPER_CMID)).startswith(
        "C_mid at the upper end of its range: the run had not reached its midpoint")
    assert flag_reason(_fit("m", 64, "code", 0.5, False, 0.4, UPPER_B)).startswith(
        "B at its bound: a step")
    flat = "the reward is flat in log compute (slope 0.001 +- 0.002); the sigmoid's A ..."
    assert flag_reason(_fit("m", 64, "code", 0.5, False, 0.4, flat)) == (
        "no rise in log compute beyond the eval noise")
    assert flag_reason(_fit("m", 64, "code", 0.5, False, 0.4, "something new")) == (
        "something new")


def test_a_comparison_with_a_flagged_fit_says_what_was_compared_and_why():
    small = _fit("tiny-s", 56, "code", 0.33, True, 0.32)
    large = _fit("tiny-m", 56, "code", 0.9, False, 0.24, UPPER_CMID)
    assert basis(small, large, ("tiny-s", "tiny-m")) == (
        "final pass rates at the last checkpoint (same RL steps, not the same compute), because "
        "A is not determined for tiny-m: C_mid at the upper end of its range: the run had not "
        "reached its midpoint, so its ceiling is open")
    df = pd.DataFrame([small, large])
    text = axes_markdown(df, ["model", "gen_len", "task"], {"model": ["tiny-s", "tiny-m"]})
    row = next(line for line in text.splitlines() if line.startswith("| 56 | code |"))
    assert "| A 0.330, final 0.320 | A –, final 0.240 | A not determined (fit not converged); " \
           "no: lower final pass rate (-0.080) | final pass rates at the last checkpoint" in row
    assert "- code: yes in 0 of 1 comparison(s) (compared on final pass rate)." in text
