"""Recipe config and presets: defaults = ScaleRL, LOO variants, prevalent recipes, overrides."""

from __future__ import annotations

import pytest

from scalerl.config import ConfigError
from scalerl.rl.recipe import (
    INTERRUPTION_TEXT,
    LOO_CHANGES,
    PRESET_DOCS,
    PRESETS,
    RecipeConfig,
    list_presets,
    recipe_from_preset,
)
from scalerl.rollout.budget import GenerationBudget


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def test_every_preset_builds_round_trips_and_is_documented():
    assert list_presets()[0] == "scalerl"
    expected = {"scalerl", "loo-dapo", "loo-fp32", "loo-savg", "loo-plan", "loo-batch",
                "loo-lp", "loo-8op", "loo-npr", "deepseek-grpo", "qwen25-dapo", "magistral",
                "minimax-m1"}
    assert set(list_presets()) == expected == set(PRESET_DOCS)
    for name in list_presets():
        cfg = recipe_from_preset(name)
        assert isinstance(cfg, RecipeConfig)
        assert RecipeConfig.from_dict(cfg.to_dict()) == cfg


def test_scalerl_defaults_are_the_paper_values():
    cfg = recipe_from_preset("scalerl")
    assert cfg == RecipeConfig()
    assert (cfg.loss.kind, cfg.loss.aggregation, cfg.loss.eps_max) == ("cispo", "prompt", 4.0)
    assert cfg.advantage_normalization == "batch" and cfg.zero_variance_filter
    assert cfg.npr_threshold == 0.9
    assert (cfg.off_policy, cfg.max_lag) == ("pipeline", 8)
    assert cfg.fp32_lm_head and cfg.length_control == "interruption"
    assert cfg.think_budget == (10240, 12288) and cfg.answer_budget == 2048
    assert cfg.interruption_text == INTERRUPTION_TEXT
    assert INTERRUPTION_TEXT.endswith("formulate a final answer now. </think>")
    assert (cfg.prompts_per_step, cfg.generations_per_prompt, cfg.samples_per_step) == (48, 16,
                                                                                         768)
    opt = cfg.optimizer
    assert (opt.lr, opt.warmup_steps, opt.eps, opt.weight_decay) == (5e-7, 100, 1e-15, 0.01)
    assert (cfg.reward_correct, cfg.reward_incorrect) == (1.0, -1.0)
    assert (cfg.length_penalty.max_len, cfg.length_penalty.cache_len) == (14336, 2048)
    # cap with the paper's text of n tokens: hi + n + answer budget (one computation)
    assert GenerationBudget.from_recipe(cfg, 20).max_new_tokens == 12288 + 20 + 2048


@pytest.mark.parametrize("name", sorted(LOO_CHANGES))
def test_loo_variant_differs_in_exactly_its_component(name):
    base = flatten(recipe_from_preset("scalerl").to_dict())
    variant = flatten(recipe_from_preset(name).to_dict())
    changed = {k for k in base if base[k] != variant[k]}
    assert changed == set(LOO_CHANGES[name])


def test_loo_values():
    assert recipe_from_preset("loo-dapo").loss.kind == "dapo"
    assert recipe_from_preset("loo-savg").loss.aggregation == "sample"
    assert recipe_from_preset("loo-plan").advantage_normalization == "group"
    assert not recipe_from_preset("loo-batch").zero_variance_filter
    assert not recipe_from_preset("loo-fp32").fp32_lm_head
    lp = recipe_from_preset("loo-lp")
    assert lp.length_control == "length_penalty"
    assert GenerationBudget.from_recipe(lp, 20).max_new_tokens == 14336
    op = recipe_from_preset("loo-8op")
    assert (op.off_policy, op.ppo_minibatches) == ("ppo", 8)
    assert recipe_from_preset("loo-npr").npr_threshold is None


def test_prevalent_recipes_match_appendix():
    ds = recipe_from_preset("deepseek-grpo")
    assert (ds.loss.kind, ds.loss.eps, ds.loss.aggregation) == ("grpo", 0.2, "sample")
    assert (ds.off_policy, ds.ppo_minibatches, ds.prompts_per_step) == ("ppo", 8, 48)
    assert ds.advantage_normalization == "group" and not ds.zero_variance_filter
    assert not ds.fp32_lm_head and ds.npr_threshold is None
    qd = recipe_from_preset("qwen25-dapo")
    assert (qd.loss.kind, qd.loss.eps_low, qd.loss.eps_high) == ("dapo", 0.2, 0.26)
    assert (qd.loss.aggregation, qd.off_policy, qd.prompts_per_step) == ("prompt", "ppo", 80)
    assert qd.zero_variance_filter and not qd.fp32_lm_head
    mg = recipe_from_preset("magistral")
    assert mg.to_dict() == qd.replace(off_policy="pipeline").to_dict()  # "DAPO but PipelineRL"
    mm = recipe_from_preset("minimax-m1")
    assert (mm.loss.kind, mm.fp32_lm_head, mm.off_policy, mm.loss.aggregation) == (
        "cispo", True, "ppo", "prompt")
    assert mm.prompts_per_step == 80 and mm.zero_variance_filter


def test_overrides_merge_into_nested_configs():
    cfg = recipe_from_preset("scalerl", {"loss": {"eps_max": 8.0},
                                         "optimizer": {"lr": 1e-6}, "think_budget": [40, 60]})
    assert (cfg.loss.kind, cfg.loss.eps_max) == ("cispo", 8.0)
    assert (cfg.optimizer.lr, cfg.optimizer.eps) == (1e-6, 1e-15)
    assert cfg.think_budget == (40, 60)
    dapo = recipe_from_preset("qwen25-dapo", {"loss": {"eps_high": 0.28}})
    assert (dapo.loss.kind, dapo.loss.eps_high) == ("dapo", 0.28)
    assert "loss" not in PRESETS["scalerl"]  # presets are not mutated by overrides


def test_layers_merge_in_order_once():
    # later layers win; nested mappings merge; empty and None layers change nothing
    train = {"optimizer": {"lr": 1e-4, "eps": 1e-8}, "npr_threshold": 0.5}
    model = {"optimizer": {"lr": 2e-4}}
    recipe = {"optimizer": {"lr": 3e-4}, "loss": {"eps_max": 5.0}}
    cfg = recipe_from_preset("scalerl", train, model, None, {}, recipe)
    assert (cfg.optimizer.lr, cfg.optimizer.eps, cfg.optimizer.weight_decay) == (3e-4, 1e-8, 0.01)
    assert (cfg.npr_threshold, cfg.loss.eps_max) == (0.5, 5.0)
    # a kind switch in any layer drops the preset's clip fields of its own kind, and a later
    # layer may set the new kind's fields
    switched = recipe_from_preset("deepseek-grpo", {"loss": {"kind": "cispo"}},
                                  {"loss": {"eps_max": 8.0}})
    assert (switched.loss.kind, switched.loss.eps_max) == ("cispo", 8.0)
    # the result round-trips through a run.yaml mapping unchanged
    assert RecipeConfig.from_dict(switched.to_dict()) == switched
    assert train == {"optimizer": {"lr": 1e-4, "eps": 1e-8}, "npr_threshold": 0.5}  # not mutated


def test_errors_name_the_problem():
    with pytest.raises(ConfigError, match="unknown recipe preset 'scalerl2'; valid presets: "
                                          "scalerl, loo-dapo"):
        recipe_from_preset("scalerl2")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) loss\.epsmax .*valid keys: "):
        recipe_from_preset("scalerl", {"loss": {"epsmax": 5}})
    with pytest.raises(ConfigError, match="unknown key\\(s\\) batch_size"):
        recipe_from_preset("scalerl", {"batch_size": 5})
    with pytest.raises(ConfigError, match="'ppo2' is not one of"):
        recipe_from_preset("scalerl", {"off_policy": "ppo2"})
    with pytest.raises(ConfigError, match="think_budget"):
        recipe_from_preset("scalerl", {"think_budget": [60, 40]})
    with pytest.raises(ConfigError, match="npr_threshold = 1.5 must be <= 1"):
        recipe_from_preset("scalerl", {"npr_threshold": 1.5})
    with pytest.raises(ConfigError, match="reward_correct"):
        recipe_from_preset("scalerl", {"reward_correct": -2.0})
    with pytest.raises(ConfigError, match="betas"):
        recipe_from_preset("scalerl", {"optimizer": {"betas": [0.9, 1.5]}})
    with pytest.raises(ConfigError, match="must be a mapping"):
        recipe_from_preset("scalerl", [("a", 1)])  # type: ignore[arg-type]


def test_a_clip_field_of_another_loss_kind_is_an_error():
    # TRL's eps_high for CISPO's eps_max would do nothing: it must fail, naming field and kind
    with pytest.raises(ConfigError, match=r"kind = 'cispo' does not read loss.eps_high .*"
                                          r"cispo reads eps_max"):
        recipe_from_preset("scalerl", {"loss": {"eps_high": 5}})
    with pytest.raises(ConfigError, match="does not read loss.eps_max"):
        recipe_from_preset("scalerl", {"loss": {"kind": "dapo", "eps_max": 8}})
    # the fields of the kind in use are fine, and a preset's own clip fields give way when an
    # override changes the kind (deepseek-grpo sets eps for grpo)
    assert recipe_from_preset("scalerl", {"loss": {"eps_max": 5}}).loss.eps_max == 5
    switched = recipe_from_preset("deepseek-grpo", {"loss": {"kind": "cispo", "eps_max": 8}})
    assert (switched.loss.kind, switched.loss.eps_max) == ("cispo", 8)
