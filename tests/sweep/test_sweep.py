"""scalerl.sweep without snakemake: validation with defaults, run ids, the merge order, and the
generation budget that training and evaluation derive for every run of the shipped configs."""

from pathlib import Path

import pytest
import yaml

from scalerl.config import ConfigError
from scalerl.eval.runner import EvalSettings
from scalerl.rl.run_config import EvalConfig, RunConfig
from scalerl.rl.trainer import generation_budget
from scalerl.sweep import check_runs, expand, load_sweep, run_config
from scalerl.sweep.config import RuleResources

REPO = Path(__file__).resolve().parents[2]


def _sweep(**changes):
    data = {
        "models": {"m1": {"config": {"model": {"name": "tiny-s"}},
                          "recipe_overrides": {"optimizer": {"lr": 2e-4}, "npr_threshold": 0.5}},
                   "m2": {"config": {"model": {"name": "tiny-m"}}}},
        "recipes": {"fast": {"preset": "scalerl", "overrides": {"optimizer": {"lr": 3e-4}}}},
        "sweep": {"models": ["m1", "m2"], "gen_lens": [40, 64], "recipes": ["fast", "loo-dapo"],
                  "batches": ["4x2"], "seeds": [0, 1]},
        "length": {"answer_budget": 8, "think_min_fraction": 0.5},
        "train": {"chunks": 2, "steps_per_chunk": [1, 3], "device": "cpu",
                  "recipe_overrides": {"optimizer": {"lr": 1e-4, "eps": 1e-8},
                                       "interruption_text": "</think>"}},
        "eval": {"samples_per_prompt": 2},
    }
    for key, value in changes.items():
        data[key] = value
    return data


def test_defaults_come_from_the_package():
    sweep = load_sweep({"models": {"m": {"config": {}}},
                        "sweep": {"models": ["m"], "gen_lens": [4096]}})
    assert sweep.eval == EvalConfig() and sweep.eval.samples_per_prompt == 16
    assert (sweep.grid.recipes, sweep.grid.batches, sweep.grid.seeds) == (("scalerl",),
                                                                          ("48x16",), (0,))
    assert sweep.chunks == 4 and sweep.steps_per_chunk == RunConfig.steps_per_chunk
    assert sweep.resources["train"] == RuleResources() and not sweep.grid.racing.enabled
    assert set(sweep.mixes) == {"mc"}


def test_run_ids_follow_the_grid_and_tag_the_mix_only_when_there_are_several():
    runs = expand(load_sweep(_sweep()))
    assert len(runs) == 2 * 2 * 2 * 2
    assert list(runs)[:3] == ["m1_L40_fast_b4x2_s0", "m1_L40_fast_b4x2_s1",
                              "m1_L40_loo-dapo_b4x2_s0"]
    mixed = _sweep(mixes={"a": {"math": 1.0}, "b": {"code": 1.0}})
    mixed["sweep"]["mixes"] = ["a", "b"]
    ids = list(expand(load_sweep(mixed)))
    assert ids[:2] == ["m1_L40_fast_b4x2_s0_a", "m1_L40_fast_b4x2_s0_b"]


def test_recipe_overrides_merge_train_then_model_then_recipe_then_sweep():
    sweep = load_sweep(_sweep())
    runs = expand(sweep)
    cfg = run_config(sweep, runs["m1_L40_fast_b4x2_s1"], base="B", prompts="P")
    recipe = cfg.recipe
    # train sets lr 1e-4 and eps; model m1 sets 2e-4; recipe `fast` sets 3e-4 (wins)
    assert recipe.optimizer.lr == 3e-4 and recipe.optimizer.eps == 1e-8
    assert recipe.npr_threshold == 0.5  # from the model, untouched by the recipe
    assert (recipe.prompts_per_step, recipe.generations_per_prompt) == (4, 2)
    # gen_len 40 with answer budget 8: hi 32, lo round(0.5 * 32) = 16; L_max 40
    assert recipe.think_budget == (16, 32) and recipe.answer_budget == 8
    assert recipe.length_penalty.max_len == 40
    assert (cfg.run, cfg.seed, cfg.model, cfg.base, cfg.prompts) == ("m1_L40_fast_b4x2_s1", 1,
                                                                    "m1", "B", "P")
    assert cfg.recipe_name == "fast" and cfg.chunk_steps == (1, 3) and cfg.device == "cpu"
    other = run_config(sweep, runs["m2_L64_loo-dapo_b4x2_s0"], base="B", prompts="P")
    other_recipe = other.recipe
    assert other_recipe.optimizer.lr == 1e-4  # only train's: m2 and loo-dapo set none
    assert other_recipe.loss.kind == "dapo" and other.recipe_name == "loo-dapo"
    assert other.eval.samples_per_prompt == 2 and other.eval.max_prompts == 1000


def test_the_commands_options_come_from_the_sweep():
    from scalerl.sweep import fit_options, predict_options, race_options, report_options

    data = _sweep(fit={"compute": "device_hours", "extra_args": ["--bootstrap", "5"],
                       "predict_args": ["--seed", "3"]})
    data["sweep"]["racing"] = {"enabled": True, "margin": 0.05}
    sweep = load_sweep(data)
    runs = expand(sweep)
    run = runs["m1_L40_fast_b4x2_s1"]
    assert fit_options(sweep, run) == [
        "--group-by", "task", "--compute-col", "compute_device_hours",
        "--meta", "run=m1_L40_fast_b4x2_s1", "--meta", "model=m1", "--meta", "gen_len=40",
        "--meta", "recipe=fast", "--meta", "batch=4x2", "--meta", "seed=1", "--meta", "mix=mc",
        "--bootstrap", "5"]
    assert predict_options(sweep, all_chunks=True) == [
        "--all-chunks", "--chunks", "2", "--compute-col", "compute_device_hours", "--seed", "3"]
    assert predict_options(sweep, all_chunks=False)[:2] == ["--chunks", "2"]
    race = race_options(sweep, runs.values())
    assert race[:6] == ["--task", "math", "--margin", "0.05", "--min-fraction", "0.3"]
    groups = dict(item.split("=") for item in race[7::2])
    assert len(groups) == len(runs) and set(race[6::2]) == {"--group"}
    # the two seeds of a cell race as one; other cells apart
    assert groups["m1_L40_fast_b4x2_s0"] == groups["m1_L40_fast_b4x2_s1"] == "m1_40_fast_4x2_mc"
    assert len(set(groups.values())) == len(runs) // 2
    assert report_options(sweep) == ["--by", "model,gen_len,recipe,batch,mix,task",
                                     "--order", "model=m1,m2"]


def test_sweep_mates_share_recipe_batch_and_mix():
    from scalerl.sweep import sweep_mates

    sweep = load_sweep(_sweep())
    runs = expand(sweep)  # 2 models x 2 lengths x 2 recipes x 2 seeds
    mates = {r.id for r in sweep_mates(sweep, runs["m1_L40_fast_b4x2_s0"], runs.values())}
    # the other 7 runs of recipe fast (models, lengths, seeds), none of loo-dapo, not itself
    assert mates == {r for r in runs if "_fast_" in r} - {"m1_L40_fast_b4x2_s0"}
    assert len(mates) == 7
    off = load_sweep(_sweep(fit={"joint": False}))
    assert sweep_mates(off, runs["m1_L40_fast_b4x2_s0"], runs.values()) == []


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["train"].update(chunkz=1), "unknown key train.chunkz"),
    (lambda d: d["train"].update(run="x"), "train.run is set by the sweep"),
    (lambda d: d["sweep"].update(models=["m3"]), "sweep.models: 'm3' is not defined"),
    (lambda d: d["sweep"].update(recipes=["nope"]), "'nope' is neither defined"),
    (lambda d: d["sweep"].update(gen_lens=[8]), "sweep.gen_lens: 8 leaves no thinking budget"),
    (lambda d: d["models"]["m1"].update(recipe_overrides={"think_budget": [1, 2]}),
     "models.m1.recipe_overrides: think_budget are set by the sweep"),
    (lambda d: d["train"].update(steps_per_chunk=[1, 2, 3]),
     "lists 3 chunk length(s) but train.chunks is 2"),
    (lambda d: d.update(models={"bad_name": {"config": {}}}), "name 'bad_name' is not allowed"),
    (lambda d: d["eval"].update(downstream={"aime": {}}), "eval.downstream.aime: path is"),
    (lambda d: d["eval"].update(downstream={"he": {"path": "x.jsonl", "format": "humanevl"}}),
     "humanevl"),
])
def test_bad_sweeps_name_the_key(change, expected):
    data = _sweep()
    change(data)
    with pytest.raises(ConfigError, match="invalid config") as err:
        sweep = load_sweep(data)
        check_runs(sweep, expand(sweep))
    assert expected in str(err.value)


def test_every_problem_is_reported_at_once():
    data = _sweep()
    data["train"]["chunkz"] = 1
    data["eval"]["samples_per_prompt"] = 0
    with pytest.raises(ConfigError) as err:
        load_sweep(data)
    assert "train.chunkz" in str(err.value) and "samples_per_prompt" in str(err.value)


def test_check_runs_names_the_run_and_the_sources():
    data = _sweep()
    data["recipes"]["fast"]["overrides"]["loss"] = {"eps_high": 5}
    sweep = load_sweep(data)
    with pytest.raises(ConfigError, match=r"run m1_L40_fast_b4x2_s0 .*recipes.fast.*eps_high"):
        check_runs(sweep, expand(sweep))


@pytest.mark.parametrize("name", ["config.yaml", "gpu.yaml"])
@pytest.mark.parametrize("n_interrupt_tokens", [1, 20])
def test_trainer_and_eval_derive_the_same_budget_for_every_shipped_run(name, n_interrupt_tokens):
    sweep = load_sweep(yaml.safe_load((REPO / "config" / name).read_text()))
    runs = expand(sweep)
    assert runs
    for run in runs.values():
        cfg = run_config(sweep, run, base="B", prompts="P")
        recipe = cfg.recipe
        trainer = generation_budget(cfg, n_interrupt_tokens)
        evaluation = EvalSettings.from_run(cfg, n_interrupt_tokens).budget
        assert trainer == evaluation, run.id
        # the generation length L of the run id is what both use
        assert trainer.gen_len == run.gen_len, run.id
        if recipe.length_control == "interruption":
            assert trainer.max_new_tokens == run.gen_len + n_interrupt_tokens


def test_schema_names_the_package_fields_and_no_defaults():
    """The workflow reads results_dir and resources from scalerl.sweep; the JSON schema only
    types them, so a default lives in one place (the package's classes)."""
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    rules = schema["properties"]["resources"]["properties"]
    from scalerl.sweep.config import RULES

    assert set(rules) == set(RULES)
    for rule, spec in rules.items():
        assert set(spec["properties"]) == set(RuleResources().to_dict()), rule
        assert not any("default" in v for v in spec["properties"].values()), rule
    assert "default" not in schema["properties"]["results_dir"]
    assert load_sweep({"models": {"m": {"config": {}}},
                       "sweep": {"models": ["m"], "gen_lens": [4096]}}).results_dir == "results"


def test_job_resources_one_node_and_several():
    from scalerl.sweep import job_resources
    from scalerl.sweep.config import RuleResources

    assert job_resources(RuleResources(gpu=1, mem_mb=8000, runtime=30)) == {
        "gpu": 1, "mem_mb": 8000, "runtime": 30}
    # one node, 8 GPUs: one task (scalerl train starts its ranks), not one per GPU
    assert job_resources(RuleResources(gpu=8, threads=32))["tasks_per_gpu"] == 0
    two = job_resources(RuleResources(nodes=2, gpu=8, threads=64, mem_mb=512000))
    assert two == {"mem_mb": 512000, "runtime": 60, "nodes": 2, "gpu": 0, "tasks": 2,
                   "tasks_per_gpu": 0, "mpi": "srun", "cpus_per_task": 64, "gres": "gpu:8"}
