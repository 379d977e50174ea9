"""The report's scale comparison (`scalerl.fit.axes`): verdicts and the Markdown section."""

import pandas as pd

from scalerl.fit.axes import axes_markdown, verdict


def _fit(model, gen_len, task, A, converged, final):
    return {"model": model, "gen_len": gen_len, "task": task, "A": A, "converged": converged,
            "observed_final": final}


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
    assert "| 128 | math | A 0.550, final 0.500 | A 0.700, final 0.600 | yes: A +0.150 |" in lines
    assert "| 64 | math | A 0.450, final 0.400 | A 0.400, final 0.350 | no: lower A (-0.050) |" \
        in lines
    # gen_len axis, tiny-s: 0.45 at 64 -> 0.55 at 128
    assert "| tiny-s | math | A 0.450, final 0.400 | A 0.550, final 0.500 | yes: A +0.100 |" \
        in lines


def test_axes_markdown_is_empty_when_no_scale_axis_varies():
    df = pd.DataFrame([_fit("tiny-s", 64, "math", 0.5, True, 0.4),
                       _fit("tiny-s", 64, "code", 0.3, True, 0.2)])
    assert axes_markdown(df, ["model", "gen_len", "task"]) == ""
