"""SFT warm start: the band-selection rule, a short real run, and `scalerl base` end to end."""

import json
import math
import random

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from scalerl.basemodel.sft import (
    BandSearch,
    SFTConfig,
    length_batches,
    lr_factor,
    sft_data,
    task_weights,
    train_sft,
)
from scalerl.cli import main
from scalerl.config import ConfigError
from scalerl.models.config import ModelConfig
from scalerl.models.loading import build_tiny_model, new_tiny_tokenizer
from scalerl.tasks.synthetic import generate_math


def test_band_search_keeps_the_first_rate_inside_the_band():
    s = BandSearch(lo=0.1, hi=0.4, eval_every=50, refinements=2)
    assert [s.observe(50, 0.0), s.observe(100, 0.05), s.observe(150, 0.2)] == [
        "below", "below", "keep"]
    assert s.rewind_step == 100 and s.is_best


def test_band_search_rewinds_with_denser_measurements_after_an_overshoot():
    s = BandSearch(lo=0.1, hi=0.4, eval_every=8, refinements=2)
    assert s.observe(8, 0.02) == "below"
    assert s.observe(16, 0.60) == "rewind" and (s.rewind_step, s.eval_every) == (8, 4)
    assert s.observe(12, 0.50) == "rewind" and (s.rewind_step, s.eval_every) == (8, 2)
    assert s.observe(10, 0.45) == "stop"  # no refinements left: keep the best seen
    # distances to the band: 0.08, 0.20, 0.10, 0.05 -> the last one is the best
    assert s.is_best and s.best_distance == pytest.approx(0.05)


def test_band_search_stops_on_an_overshoot_without_a_checkpoint_below():
    s = BandSearch(lo=0.1, hi=0.4, eval_every=8, refinements=3)
    assert s.observe(8, 0.9) == "stop"


def test_band_search_per_task_needs_every_task_inside_the_band():
    s = BandSearch(lo=0.1, hi=0.4, eval_every=10, refinements=1)
    # code inside, math below: continue, and this is a rewind point (nothing above the band)
    assert s.observe(10, {"math": 0.02, "code": 0.30}) == "below" and s.rewind_step == 10
    # code above, math still below: continue, but not a rewind point
    assert s.observe(20, {"math": 0.05, "code": 0.50}) == "below" and s.rewind_step == 10
    # nothing below, code above: an overshoot -> back to step 10
    assert s.observe(30, {"math": 0.20, "code": 0.55}) == "rewind" and s.eval_every == 5
    assert s.observe(15, {"math": 0.12, "code": 0.38}) == "keep"
    # distances 0.08, 0.10 (code 0.50), 0.15, 0 -> the last is the best
    assert s.is_best and s.best_distance == 0.0


def test_task_weights_shift_batches_toward_the_tasks_below_the_band():
    shares = {"math": 0.6, "code": 0.4}
    w = task_weights({"math": 0.05, "code": 0.30}, shares, 0.1, 0.4, in_band_weight=0.25)
    assert w == pytest.approx({"math": 0.6, "code": 0.1})
    w = task_weights({"math": 0.05, "code": 0.50}, shares, 0.1, 0.4, in_band_weight=0.25)
    assert w == pytest.approx({"math": 0.6, "code": 0.0})
    # nothing left to draw from (all above, in_band_weight 0): fall back to the shares
    w = task_weights({"math": 0.2, "code": 0.9}, shares, 0.1, 0.4, in_band_weight=0.0)
    assert w == shares


def test_val_prompts_are_held_out_of_a_small_difficulty_one_space():
    """Regression: difficulty-1 math has ~600 distinct prompts, which 20k training examples
    covered entirely, so the val set used to end up empty (max_batch = 0)."""
    model = build_tiny_model(ModelConfig(name="tiny-s"))
    cfg = _short(math_fraction=1.0, math_difficulties=(1,), n_train=20000, max_steps=1,
                 eval_every=1)
    result = train_sft(model, new_tiny_tokenizer(), cfg)
    assert set(result.pass_rate_by_task) == {"math"} and result.steps == 1


def test_sft_config_checks_the_band():
    with pytest.raises(ConfigError, match="band_lo"):
        SFTConfig(band_lo=0.5, band_hi=0.2)


def test_family_difficulties_interleave_one_generator_per_family():
    tok = new_tiny_tokenizer()
    cfg = SFTConfig(math_fraction=1.0, math_families=("chain", "add"), math_difficulties=(4, 5),
                    family_difficulties={"add": (2,)})
    math_rows = sft_data(cfg, tok, 6, 0)["math"]
    # chain at 0, 2, 4 with difficulties 4, 5, 4 (math_difficulties); add at 1, 3, 5 at 2
    assert [(ex.source, ex.difficulty) for ex, _, _ in math_rows] == [
        ("synth-chain", 4), ("synth-add", 2), ("synth-chain", 5), ("synth-add", 2),
        ("synth-chain", 4), ("synth-add", 2)]
    # without it: the one shared generator of main (the default's data is unchanged)
    plain = SFTConfig(math_fraction=1.0, math_families=("add", "sub"), math_difficulties=(1, 2))
    assert [ex for ex, _, _ in sft_data(plain, tok, 8, 0)["math"]] == generate_math(
        8, plain.data_seed, difficulties=(1, 2), families=("add", "sub"))
    with pytest.raises(ConfigError, match=r"family_difficulties names \['mul'\]"):
        SFTConfig(math_families=("chain",), family_difficulties={"mul": (1,)})


def test_code_variant_reaches_the_sft_targets():
    tok = new_tiny_tokenizer()
    binary = sft_data(SFTConfig(math_fraction=0.0, code_variant="binary"), tok, 4, 0)["code"]
    ranged = sft_data(SFTConfig(math_fraction=0.0), tok, 4, 0)["code"]
    assert all("f=lambda x:" in ex.solution for ex, _, _ in binary)
    assert all("def f(x):" in ex.solution for ex, _, _ in ranged)


def test_sft_data_targets_are_solution_plus_eos():
    tok = new_tiny_tokenizer()
    data = sft_data(SFTConfig(n_train=4), tok, 4, 0)
    assert set(data) == {"math", "code"}
    ex, prompt, target = data["math"][0]
    assert prompt == [tok.bos_token_id] + tok.encode(ex.prompt, add_special_tokens=False)
    assert tok.decode(target[:-1]) == ex.solution and target[-1] == tok.eos_token_id
    assert sft_data(SFTConfig(math_fraction=1.0), tok, 2, 0).keys() == {"math"}


def _short(**kw):
    base = dict(max_steps=6, eval_every=3, eval_prompts=8, final_eval_prompts=8, n_train=128,
                batch_size=16, warmup_steps=0, lr=3e-3, max_new_tokens=48)
    return SFTConfig(**{**base, **kw})


def test_short_run_outside_the_band_keeps_the_closest_checkpoint():
    model = build_tiny_model(ModelConfig(name="tiny-s"))
    result = train_sft(model, new_tiny_tokenizer(), _short(band_lo=0.9, band_hi=1.0))
    assert [h["step"] for h in result.history] == [3, 6]
    assert not result.in_band and result.steps in (3, 6)
    assert result.final_loss < math.log(103)  # below the loss of a uniform guess
    assert 0.0 <= result.pass_rate <= 1.0 and set(result.pass_rate_by_task) == {"math", "code"}


def test_budget_trains_every_step_and_measures_once_at_the_end():
    model = build_tiny_model(ModelConfig(name="tiny-s"))
    # a band nothing reaches would stop a band search at its first measurement; the budget
    # ignores it and trains all max_steps steps
    result = train_sft(model, new_tiny_tokenizer(),
                       _short(stop="budget", max_steps=7, band_lo=0.99, band_hi=1.0))
    assert result.steps == 7 and result.history == []
    assert 0.0 <= result.pass_rate <= 1.0 and set(result.pass_rate_by_task) == {"math", "code"}


def test_cosine_decay_warms_up_then_falls_to_zero_at_max_steps():
    cfg = SFTConfig(max_steps=110, warmup_steps=10, decay="cosine")
    # warmup: (s + 1) / 10; then 0.5 (1 + cos(pi (s - 10) / 100))
    assert [lr_factor(cfg, s) for s in (0, 9, 10, 60, 110)] == pytest.approx(
        [0.1, 1.0, 1.0, 0.5, 0.0])
    assert lr_factor(SFTConfig(max_steps=110, warmup_steps=10), 60) == 1.0


def test_length_batches_group_similar_lengths_and_keep_every_example():
    pool = [(i, [0] * (i % 7), [0] * (i % 5)) for i in range(24)]  # (id, prompt, target)
    batches = length_batches(pool, 6, random.Random(0))
    assert len(batches) == 4 and sorted(x[0] for b in batches for x in b) == list(range(24))
    spans = sorted((min(len(p) + len(t) for _, p, t in b), max(len(p) + len(t) for _, p, t in b))
                   for b in batches)
    assert all(hi <= lo_next for (_, hi), (lo_next, _) in zip(spans, spans[1:]))
    assert length_batches(pool[:6], 6, random.Random(0)) == [pool[:6]]  # one bucket: as is


def test_short_run_stops_at_the_first_measurement_inside_the_band():
    model = build_tiny_model(ModelConfig(name="tiny-s"))
    result = train_sft(model, new_tiny_tokenizer(), _short(band_lo=0.0, band_hi=1.0))
    assert result.steps == 3 and result.in_band and len(result.history) == 1


@pytest.mark.slow
def test_scalerl_base_writes_a_loadable_model_dir(tmp_path):
    cfg = tmp_path / "base.yaml"
    cfg.write_text("model: {name: tiny-s, seed: 2}\n"
                   "sft: {max_steps: 4, eval_every: 2, eval_prompts: 4, final_eval_prompts: 4,"
                   " n_train: 64, batch_size: 8}\n")
    out = tmp_path / "base"
    assert main(["base", "--config", str(cfg), "--out", str(out)]) == 0
    info = json.loads((out / "base_info.json").read_text())
    assert info["model"] == "tiny-s" and info["steps"] in (2, 4) and info["parameters"] == 137984
    assert {"pass_rate", "final_loss", "seconds", "history", "in_band"} <= set(info)
    AutoModelForCausalLM.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).convert_tokens_to_ids("</think>") == 5
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {name: tiny-s}\nsft: {stepz: 3}\n")
    assert main(["base", "--config", str(bad), "--out", str(tmp_path / "x")]) == 2
